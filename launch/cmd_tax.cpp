// `lockstep tax [--modes fast,deterministic,invariant,invariant+verify] [--trials T]
// [--steps N] [--skip S] [--np N] [--tp T] [--json FILE] [CONFIG] [--set k=v ...]`: the
// determinism tax. One warm-up run, then T trials; each trial runs every mode once, in an
// order rotated by one per trial (so drift on a noisy machine hits every mode alike). A run's
// figure is the median of its steady-state step times (metrics.jsonl "ms", the first S steps
// skipped); per mode: the median over trials, min and max, and the tax against fast, both
// from the medians and paired (per trial: this mode's run over fast's run of the same trial,
// which ran within a minute of it; median, min and max of those ratios).
// Modes: fast | deterministic | invariant (verify.replica_check_interval=0 in all three),
// invariant+verify (replica check every step), invariant+optrace (that plus verify.ops over
// all steps).
// Determinism contract: none (a timing tool); it reports the machine's load with the numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "launch/commands.hpp"
#include "launch/config.hpp"
#include "launch/job_options.hpp"
#include "launch/subprocess.hpp"
#include "launch/validate.hpp"
#include "runtime/error.hpp"

namespace lockstep::cli {
namespace {

struct TaxOptions : JobOptions {
  TaxOptions() { out = "runs/tax"; }
  std::string modes = "fast,deterministic,invariant,invariant+verify";
  int trials = 3;
  int steps = 8;
  int skip = 2;
  int np = 1;
  int tp = 1;
  std::string json;
};

std::vector<std::string> mode_sets(const std::string& mode, int steps) {
  if (mode == "fast" || mode == "deterministic" || mode == "invariant")
    return {"run.determinism=" + mode, "verify.replica_check_interval=0"};
  if (mode == "invariant+verify")
    return {"run.determinism=invariant", "verify.replica_check_interval=1"};
  if (mode == "invariant+optrace")
    return {"run.determinism=invariant", "verify.replica_check_interval=1",
            "verify.ops=1-" + std::to_string(steps)};
  fail("unknown mode '" + mode + "'",
       "modes: fast, deterministic, invariant, invariant+verify, invariant+optrace");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

int tax(const TaxOptions& o) {
  const auto modes = proc::split_list(o.modes);
  check(!modes.empty(), "--modes names no mode", "e.g. --modes fast,invariant");
  check(o.steps > o.skip,
        "--steps " + std::to_string(o.steps) + " leaves no step after --skip " +
            std::to_string(o.skip),
        "use more steps than skipped ones");
  check(o.np % o.tp == 0,
        "--np " + std::to_string(o.np) + " is not a multiple of --tp " + std::to_string(o.tp),
        "np = tp x dp");
  const proc::Layout layout{o.tp, o.np / o.tp};
  config::Config base;
  if (!o.config.empty()) config::load_toml_file(base, o.config);
  for (const auto& s : o.sets) config::apply_override(base, s);
  for (const auto& m : modes) {  // preflight every mode
    config::Config c = base;
    c.parallel.tp = o.tp;
    c.run.steps = o.steps;
    for (const auto& s : mode_sets(m, o.steps)) config::apply_override(c, s);
    config::validate_or_throw(c, o.np);
  }
  std::filesystem::create_directories(o.out);
  const std::string load_start = loadavg();
  const int runs = 1 + o.trials * static_cast<int>(modes.size());
  std::printf(
      "tax: %zu modes x %d trials on %s (%d rank(s)), %d steps per run, first %d skipped; "
      "load average %s\n",
      modes.size(), o.trials, layout.name().c_str(), o.np, o.steps, o.skip, load_start.c_str());
  auto job = [&](const std::string& mode, const std::string& out, int steps) {
    proc::Job j;
    j.layout = layout;
    j.config = o.config;
    j.sets = o.sets;
    for (const auto& s : mode_sets(mode, steps)) j.sets.push_back(s);
    j.sets.push_back("run.steps=" + std::to_string(steps));
    j.sets.push_back("ckpt.save=false");
    for (const auto& a : o.mpi_args) j.run_args.push_back("--mpi-arg=" + a);
    j.out = out;
    std::filesystem::remove_all(out);
    std::filesystem::remove(out + ".log");
    return j;
  };
  int n = 1;
  std::printf("[%d/%d] warm-up (%s) ...\n", n, runs, modes[0].c_str());
  std::fflush(stdout);
  proc::run_job_or_throw(job(modes[0], o.out + "/warmup", o.skip + 1), "warm-up");

  std::map<std::string, std::vector<double>> per_mode;  // trial medians, ms
  for (int t = 0; t < o.trials; ++t) {
    for (std::size_t i = 0; i < modes.size(); ++i) {
      const std::string& mode = modes[(i + static_cast<std::size_t>(t)) % modes.size()];
      const std::string out = o.out + "/t" + std::to_string(t + 1) + "-" + mode;
      std::printf("[%d/%d] trial %d/%d: %s ...", ++n, runs, t + 1, o.trials, mode.c_str());
      std::fflush(stdout);
      proc::run_job_or_throw(job(mode, out, o.steps), "tax run " + mode);
      std::vector<double> ms;
      for (const auto& [step, v] : proc::read_step_ms(out))
        if (step > o.skip) ms.push_back(v);
      check(!ms.empty(), out + "/metrics.jsonl has no step after the skipped ones");
      per_mode[mode].push_back(median(ms));
      std::printf(" %.1f ms/step\n", per_mode[mode].back());
    }
  }
  const std::string load_end = loadavg();

  nlohmann::ordered_json j;
  j["config"] = o.config.empty() ? "(defaults)" : o.config;
  j["sets"] = o.sets;
  j["np"] = o.np;
  j["tp"] = o.tp;
  j["steps"] = o.steps;
  j["skip"] = o.skip;
  j["trials"] = o.trials;
  j["conditions"] = {{"cores", std::thread::hardware_concurrency()},
                     {"loadavg_start", load_start},
                     {"loadavg_end", load_end}};
  const bool has_fast = per_mode.count("fast") > 0;
  const double fast = has_fast ? median(per_mode["fast"]) : 0;
  std::printf("\n%-20s %12s %12s %12s %12s %24s\n", "mode", "median ms", "min ms", "max ms",
              "tax vs fast", "paired: median (range)");
  j["modes"] = nlohmann::ordered_json::array();
  for (const auto& m : modes) {
    const auto& v = per_mode[m];
    const double med = median(v), lo = *std::min_element(v.begin(), v.end()),
                 hi = *std::max_element(v.begin(), v.end());
    nlohmann::ordered_json e;
    e["mode"] = m;
    e["median_ms"] = med;
    e["min_ms"] = lo;
    e["max_ms"] = hi;
    e["trial_medians_ms"] = v;
    char taxs[32] = "-", paired[64] = "-";
    if (has_fast) {
      const double pct = 100.0 * (med / fast - 1.0);
      e["tax_pct"] = pct;
      std::snprintf(taxs, sizeof taxs, "%+.1f%%", pct);
      // Trial t of every mode is per_mode[mode][t]: modes run in trial order.
      std::vector<double> per_trial;
      for (std::size_t t = 0; t < v.size(); ++t)
        per_trial.push_back(100.0 * (v[t] / per_mode["fast"][t] - 1.0));
      const double pmed = median(per_trial);
      const auto [plo, phi] = std::minmax_element(per_trial.begin(), per_trial.end());
      e["paired_tax_pct"] = {{"median", pmed}, {"min", *plo}, {"max", *phi},
                             {"per_trial", per_trial}};
      std::snprintf(paired, sizeof paired, "%+.1f%% (%+.1f..%+.1f)", pmed, *plo, *phi);
    } else {
      e["tax_pct"] = nullptr;
      e["paired_tax_pct"] = nullptr;
    }
    j["modes"].push_back(e);
    std::printf("%-20s %12.1f %12.1f %12.1f %12s %24s\n", m.c_str(), med, lo, hi, taxs, paired);
  }
  std::printf(
      "(median over %d trials of each run's median step time, steps %d..%d; paired: the same "
      "trial's runs compared; load average %s at the start, %s at the end)\n",
      o.trials, o.skip + 1, o.steps, load_start.c_str(), load_end.c_str());
  const std::string json_path = o.json.empty() ? o.out + "/tax.json" : o.json;
  std::ofstream f(json_path);
  f << j.dump(2) << "\n";
  check(f.good(), "cannot write '" + json_path + "'", "check the --json path");
  std::printf("tax: JSON in %s\n", json_path.c_str());
  return 0;
}

}  // namespace

Runner add_tax(CLI::App& app) {
  auto o = std::make_shared<TaxOptions>();
  auto* sub = app.add_subcommand("tax", "step time per determinism mode: the determinism tax");
  sub->add_option("--modes", o->modes, "comma-separated modes")->capture_default_str();
  sub->add_option("--trials", o->trials, "interleaved trials")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--steps", o->steps, "steps per run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--skip", o->skip, "first steps of a run left out (warm-up)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--np", o->np, "ranks")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--tp", o->tp, "tensor-parallel size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--json", o->json, "write the results here (default: OUT/tax.json)");
  add_job_options(sub, *o, false, "TOML config (e.g. launch/configs/bench-small.toml)");
  return guarded([o] { return tax(*o); });
}

}  // namespace lockstep::cli
