// `lockstep lab [--model regression|gpt] --out DIR`: the replay lab (docs/design.md section 7).
// regression: launch/experiments/lab_regression.hpp in process (100 steps, five scenarios, >= 15
// checks). gpt: the same scenarios through the trainer (launch/experiments/lab_gpt.hpp). Both write
// DIR/summary.json ({"checks_passed", "summary": [...], "reference_final_loss"}),
// DIR/details.json (per-step series and every check) and PNG figures drawn by
// launch/experiments/lab_plot.py (python3-matplotlib). Exit 0 when every check passes, 1 otherwise.
// Determinism contract: see lab_regression.hpp / lab_gpt.hpp; this file only writes files.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "launch/experiments/lab.hpp"
#include "launch/experiments/lab_gpt.hpp"
#include "launch/experiments/lab_regression.hpp"
#include "launch/experiments/subprocess.hpp"
#include "runtime/error.hpp"

namespace lockstep::experiments {
namespace {

// launch/experiments/lab_plot.py of the source tree this binary was built from: LOCKSTEP_ROOT, else
// the build directory's parent (build*/bin/lockstep), else the working directory.
std::string find_plot_script(const std::string& given) {
  namespace fs = std::filesystem;
  if (!given.empty()) return given;
  std::vector<fs::path> tries;
  if (const char* r = std::getenv("LOCKSTEP_ROOT"))
    tries.push_back(fs::path(r) / "launch/experiments/lab_plot.py");
  tries.push_back(fs::path(proc::self_exe()).parent_path().parent_path().parent_path() /
                  "launch/experiments/lab_plot.py");
  tries.push_back(fs::current_path() / "launch/experiments/lab_plot.py");
  for (const auto& t : tries)
    if (fs::exists(t)) return t.string();
  return "";
}

void write_json(const std::string& path, const nlohmann::ordered_json& j) {
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  check(f.good(), "cannot write '" + path + "'", "check --out");
}

}  // namespace

int lab(const LabOptions& o) {
  namespace fs = std::filesystem;
  fs::create_directories(o.out);
  nlohmann::ordered_json summary, details;
  std::vector<lab::Check> checks;
  if (o.model == "regression") {
    lab::RegressionLabConfig cfg;
    if (o.steps) cfg.steps = o.steps;
    if (o.restore_at) cfg.restore_at = o.restore_at;
    std::printf(
        "lab: regression MLP (16-64-4, batch 64, Adam lr %g), %lld steps, restore at %lld\n",
        cfg.lr, static_cast<long long>(cfg.steps), static_cast<long long>(cfg.restore_at));
    std::fflush(stdout);
    const auto r = lab::run_regression_lab(cfg, o.out);
    summary = r.summary();
    details = r.details();
    checks = r.checks;
  } else {
    lab::GptLabConfig cfg;
    cfg.config = o.config;
    cfg.sets = o.sets;
    cfg.np = o.np;
    cfg.mpi_args = o.mpi_args;
    if (o.steps) cfg.steps = o.steps;
    if (o.restore_at) cfg.restore_at = o.restore_at;
    const auto r = lab::run_gpt_lab(cfg, o.out);
    summary = r.summary;
    details = r.details;
    checks = r.checks;
  }
  write_json(o.out + "/summary.json", summary);
  write_json(o.out + "/details.json", details);

  std::printf("\n%-32s %8s %10s %8s %12s %12s\n", "scenario", "first", "mismatch", "hidden",
              "max |dw|", "final loss");
  for (const auto& s : summary["summary"]) {
    const std::string first =
        s["first_weight_mismatch"].is_null() ? "-" : s["first_weight_mismatch"].dump();
    const std::string maxd =
        s["maximum_weight_difference"].is_null() ? "n/a" : s["maximum_weight_difference"].dump();
    std::printf("%-32s %8s %10lld %8lld %12.4g %12.6g\n", s["scenario"].get<std::string>().c_str(),
                first.c_str(), s["weight_mismatch_steps"].get<long long>(),
                s["hidden_weight_mismatch_steps"].get<long long>(),
                s["maximum_weight_difference"].is_null()
                    ? 0.0
                    : s["maximum_weight_difference"].get<double>(),
                s["final_loss"].get<double>());
    (void)maxd;
  }
  int passed = 0;
  for (const auto& c : checks) {
    passed += c.passed;
    std::printf("  %s %s%s\n", c.passed ? "ok  " : "FAIL", c.name.c_str(),
                c.detail.empty() ? "" : (" (" + c.detail + ")").c_str());
  }

  const std::string script = find_plot_script(o.plot_script);
  if (script.empty()) {
    std::printf(
        "lab: figures skipped: launch/experiments/lab_plot.py not found (set LOCKSTEP_ROOT)\n");
  } else {
    const int rc = proc::run(
        {std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3", script,
         o.out},
        o.out + "/plot.log", [](const std::string& l) { std::printf("  %s\n", l.c_str()); });
    if (rc != 0)
      std::printf(
          "lab: figures failed (exit %d, log %s/plot.log); python3-matplotlib is needed: "
          "apt-get install python3-matplotlib\n",
          rc, o.out.c_str());
  }
  std::printf("lab: %d/%zu checks passed; %s/summary.json\n", passed, checks.size(), o.out.c_str());
  return passed == static_cast<int>(checks.size()) ? 0 : 1;
}

}  // namespace lockstep::experiments
