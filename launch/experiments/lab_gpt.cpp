#include "launch/experiments/lab_gpt.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "checkpoint/safetensors.hpp"
#include "launch/experiments/subprocess.hpp"
#include "runtime/error.hpp"

namespace lockstep::lab {
namespace {

namespace fs = std::filesystem;

std::string default_config() {
  std::vector<fs::path> tries;
  if (const char* r = std::getenv("LOCKSTEP_ROOT")) tries.push_back(fs::path(r));
  tries.push_back(fs::path(proc::self_exe()).parent_path().parent_path().parent_path());
  tries.push_back(fs::current_path());
  for (const auto& t : tries)
    if (fs::exists(t / "launch/configs/tiny.toml"))
      return (t / "launch/configs/tiny.toml").string();
  fail("lab --model gpt: launch/configs/tiny.toml not found",
       "pass a config file or set LOCKSTEP_ROOT to the source tree");
}

std::string ckpt_dir(const std::string& run, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return run + "/checkpoints/" + name;
}

// name -> float values of every param/* tensor of a checkpoint directory.
std::map<std::string, std::vector<float>> read_params(const std::string& dir) {
  std::map<std::string, std::vector<float>> out;
  check(fs::is_directory(dir), "checkpoint '" + dir + "' does not exist",
        "did the run write it? see its .log");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string path = e.path().string();
    if (e.path().extension() != ".safetensors") continue;
    const ckpt::StHeader h = ckpt::read_safetensors_header(path);
    std::ifstream f(path, std::ios::binary);
    for (const auto& t : h.tensors) {
      if (t.name.find("param/") == std::string::npos || t.dtype != DType::f32) continue;
      std::vector<float> v(t.bytes() / sizeof(float));
      f.seekg(static_cast<std::streamoff>(h.data_start + t.begin));
      f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(t.bytes()));
      check(f.good(), "cannot read tensor '" + t.name + "' of '" + path + "'");
      out[e.path().filename().string() + ":" + t.name] = std::move(v);
    }
  }
  check(!out.empty(), "checkpoint '" + dir + "' holds no param/* tensor",
        "is it a lockstep checkpoint?");
  return out;
}

struct Run {
  std::map<std::int64_t, nlohmann::json> lines;
  std::map<std::int64_t, std::string> raw;
};

Run load(const std::string& dir) {
  Run r;
  r.raw = proc::read_trace(dir);
  for (const auto& [s, l] : r.raw) r.lines[s] = nlohmann::json::parse(l);
  return r;
}

bool params_equal(const nlohmann::json& a, const nlohmann::json& b) {
  for (const auto& [k, v] : a["fp"].items())
    if (k.rfind("param/", 0) == 0 && (!b["fp"].contains(k) || b["fp"][k] != v)) return false;
  return true;
}

std::string rounded(const nlohmann::json& line) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", std::stod(line["loss"].get<std::string>()));
  return buf;
}

double loss_of(const nlohmann::json& line) {
  return std::stod(line["loss"].get<std::string>());
}

}  // namespace

double max_param_difference(const std::string& a, const std::string& b) {
  const auto pa = read_params(a), pb = read_params(b);
  check(pa.size() == pb.size(), "checkpoints '" + a + "' and '" + b + "' hold different tensors",
        "compare checkpoints of the same layout");
  double m = 0;
  for (const auto& [name, va] : pa) {
    const auto it = pb.find(name);
    check(it != pb.end() && it->second.size() == va.size(),
          "tensor " + name + " of '" + a + "' has no equal-sized twin in '" + b + "'");
    for (std::size_t i = 0; i < va.size(); ++i)
      m = std::max(m, std::fabs(static_cast<double>(va[i]) - it->second[i]));
  }
  return m;
}

GptLabResult run_gpt_lab(const GptLabConfig& cfg, const std::string& out) {
  const std::int64_t N = cfg.steps, K = cfg.restore_at;
  check(K >= 1 && K < N, "lab --model gpt: --restore-at " + std::to_string(K) +
                             " must lie inside the " + std::to_string(N) + " steps");
  check(cfg.np >= 2, "lab --model gpt needs --np >= 2",
        "the reversed-reduction scenario perturbs the DP reduction (debug.perturb=dp.reduce)");
  const std::string config = cfg.config.empty() ? default_config() : cfg.config;
  const proc::Layout layout{1, cfg.np};
  const std::string Ks = std::to_string(K);
  const std::string ref_dir = out + "/reference";
  struct Step {
    std::string name, dir, title;
    std::vector<std::string> sets;
  };
  const std::vector<Step> plan = {
      {"reference", ref_dir, "reference run, checkpoint at " + Ks, {"ckpt.interval=" + Ks}},
      {"same_seed_full_state", out + "/same_seed", "same seed, full state", {}},
      {"full_checkpoint_at_" + Ks,
       out + "/checkpoint",
       "train to " + Ks + " (stop_at)",
       {"run.stop_at=" + Ks}},
      {"", out + "/checkpoint", "resume from the step-" + Ks + " checkpoint", {"run.resume=auto"}},
      {"reversed_reduction_order",
       out + "/reversed",
       "debug.perturb=dp.reduce",
       {"debug.perturb=dp.reduce"}},
      {"optimizer_state_reset_at_" + Ks,
       out + "/optim_reset",
       "resume from the reference at " + Ks + ", ckpt.load_optim=false",
       {"run.resume=" + ckpt_dir(ref_dir, K), "ckpt.load_optim=false"}},
      {"sampler_rng_reset_at_" + Ks,
       out + "/sampler_reset",
       "resume from the reference at " + Ks + ", ckpt.load_data=false",
       {"run.resume=" + ckpt_dir(ref_dir, K), "ckpt.load_data=false"}},
  };
  std::printf("lab: GPT (%s) on %s, %lld steps, restore at %lld\n", config.c_str(),
              layout.name().c_str(), static_cast<long long>(N), static_cast<long long>(K));
  for (const auto& s : plan)
    if (s.title.rfind("resume from the step", 0) != 0)
      fs::remove_all(s.dir), fs::remove(s.dir + ".log");
  for (std::size_t i = 0; i < plan.size(); ++i) {
    std::printf("[%zu/%zu] %s ...\n", i + 1, plan.size(), plan[i].title.c_str());
    std::fflush(stdout);
    proc::Job j;
    j.layout = layout;
    j.config = config;
    j.sets = cfg.sets;
    j.sets.push_back("run.steps=" + std::to_string(N));
    for (const auto& s : plan[i].sets) j.sets.push_back(s);
    for (const auto& a : cfg.mpi_args) j.run_args.push_back("--mpi-arg=" + a);
    j.out = plan[i].dir;
    proc::run_job_or_throw(j, "lab run '" + plan[i].title + "'");
  }

  const Run ref = load(ref_dir);
  check(static_cast<std::int64_t>(ref.lines.size()) == N,
        ref_dir + "/trace.jsonl has " + std::to_string(ref.lines.size()) + " steps, expected " +
            std::to_string(N));
  GptLabResult res;
  nlohmann::ordered_json summary = {{"checks_passed", 0},
                                    {"summary", nlohmann::ordered_json::array()}};
  nlohmann::ordered_json details = {{"model", "gpt"}, {"config", config}, {"np", cfg.np}};
  details["reference_loss"] = nlohmann::ordered_json::array();
  for (const auto& [s, l] : ref.lines) details["reference_loss"].push_back(loss_of(l));
  details["scenarios"] = nlohmann::ordered_json::array();
  struct Sc {
    std::int64_t first = 0, mism = 0, hidden = 0;
    double maxd = 0, final_loss = 0;
    bool identical_lines = true;
  };
  std::vector<Sc> sc;
  for (const auto& p : plan) {
    if (p.name.empty() || p.name == "reference") continue;
    const Run r = load(p.dir);
    Sc s;
    nlohmann::ordered_json e = {{"scenario", p.name}};
    e["loss"] = nlohmann::ordered_json::array();
    e["mismatch"] = nlohmann::ordered_json::array();
    e["hidden"] = nlohmann::ordered_json::array();
    for (std::int64_t t = 1; t <= N; ++t) {
      const auto it = r.lines.find(t);
      // Reset scenarios start from the reference's checkpoint: steps <= K are its own.
      const nlohmann::json& line = it != r.lines.end() ? it->second : ref.lines.at(t);
      check(it != r.lines.end() || t <= K, p.dir + "/trace.jsonl lacks step " + std::to_string(t),
            "see " + p.dir + ".log");
      const bool mism = !params_equal(ref.lines.at(t), line);
      const bool hid = mism && rounded(ref.lines.at(t)) == rounded(line);
      if (it != r.lines.end() && r.raw.at(t) != ref.raw.at(t)) s.identical_lines = false;
      if (mism && s.first == 0) s.first = t;
      s.mism += mism;
      s.hidden += hid;
      e["loss"].push_back(loss_of(line));
      e["mismatch"].push_back(mism);
      e["hidden"].push_back(hid);
    }
    s.final_loss = loss_of(r.lines.at(N));
    s.maxd = max_param_difference(ckpt_dir(ref_dir, N), ckpt_dir(p.dir, N));
    e["max_abs_weight_diff_final"] = s.maxd;
    details["scenarios"].push_back(e);
    summary["summary"].push_back(
        {{"scenario", p.name},
         {"first_weight_mismatch",
          s.first ? nlohmann::ordered_json(s.first) : nlohmann::ordered_json()},
         {"weight_mismatch_steps", s.mism},
         {"hidden_weight_mismatch_steps", s.hidden},
         {"maximum_weight_difference", s.maxd},
         {"final_loss", s.final_loss}});
    sc.push_back(s);
  }
  const double ref_final = loss_of(ref.lines.at(N));
  summary["reference_final_loss"] = ref_final;

  auto add = [&res](std::string name, bool ok, std::string detail = "") {
    res.checks.push_back({std::move(name), ok, std::move(detail)});
  };
  auto num = [](double x) {
    char b[48];
    std::snprintf(b, sizeof b, "%.6g", x);
    return std::string(b);
  };
  bool finite = std::isfinite(ref_final);
  for (const auto& s : sc) finite = finite && std::isfinite(s.final_loss);
  add("reference learns: final loss below the first", ref_final < loss_of(ref.lines.at(1)),
      num(loss_of(ref.lines.at(1))) + " -> " + num(ref_final));
  add("every final loss is finite", finite);
  add("same seed + full state: no weight mismatch", sc[0].mism == 0, std::to_string(sc[0].mism));
  add("same seed + full state: every trace line byte-identical", sc[0].identical_lines);
  add("same seed + full state: final weights equal (max |dw| = 0)", sc[0].maxd == 0,
      num(sc[0].maxd));
  add("full checkpoint: no weight mismatch", sc[1].mism == 0, std::to_string(sc[1].mism));
  add("full checkpoint: every trace line byte-identical (all state digests)",
      sc[1].identical_lines);
  add("full checkpoint: final weights equal (max |dw| = 0)", sc[1].maxd == 0, num(sc[1].maxd));
  add("reversed DP reduction: weights differ from step 1", sc[2].first == 1,
      "first mismatch at step " + std::to_string(sc[2].first));
  add("reversed DP reduction: the difference never heals",
      sc[2].first > 0 && sc[2].mism == N - sc[2].first + 1,
      std::to_string(sc[2].mism) + " steps differ");
  add("reversed DP reduction: final max |dw| is small (0 < d < 1e-2)",
      sc[2].maxd > 0 && sc[2].maxd < 1e-2, num(sc[2].maxd));
  add("reversed DP reduction: final loss within 1e-2 relative",
      std::fabs(sc[2].final_loss - ref_final) <= 1e-2 * std::fabs(ref_final),
      num(sc[2].final_loss) + " vs " + num(ref_final));
  add("reversed DP reduction: some mismatched steps hidden by the rounded (%.4f) loss",
      sc[2].hidden > 0, std::to_string(sc[2].hidden) + " of " + std::to_string(sc[2].mism));
  for (int i : {3, 4}) {
    const std::string what = i == 3 ? "optimizer reset" : "sampler reset";
    add(what + ": first mismatch at step " + std::to_string(K + 1), sc[i].first == K + 1,
        "first mismatch at step " + std::to_string(sc[i].first));
    add(what + ": every step after the reset differs", sc[i].mism == N - K,
        std::to_string(sc[i].mism) + " steps differ");
  }
  add("optimizer reset moves the weights more than the reordered reduction",
      sc[3].maxd > sc[2].maxd, num(sc[3].maxd) + " vs " + num(sc[2].maxd));
  int passed = 0;
  for (const auto& c : res.checks) passed += c.passed;
  summary["checks_passed"] = passed;
  details["checks"] = nlohmann::ordered_json::array();
  for (const auto& c : res.checks)
    details["checks"].push_back({{"check", c.name}, {"passed", c.passed}, {"detail", c.detail}});
  res.summary = summary;
  res.details = details;
  return res;
}

}  // namespace lockstep::lab
