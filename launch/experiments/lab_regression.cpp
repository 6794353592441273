#include "launch/experiments/lab_regression.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>

#include "model/regression_mlp.hpp"
#include "optim/adamw.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"

namespace lockstep::lab {
namespace {

const RegressionMlpConfig kModel{};  // 16 -> 64 -> 4, batch 64

// A training run of the lab: the model, Adam's moments, and the two counters a restore may
// reset (Adam's step count and the data order both count from their t0).
struct LabRun {
  const RegressionLabConfig& cfg;
  ReductionOrder order = ReductionOrder::canonical;
  RegressionMlp model{kModel, KernelCtx::best(1, 64)};
  std::vector<std::vector<float>> m, v;
  std::int64_t step = 0;     // completed steps
  std::int64_t adam_t0 = 0;  // Adam's t = step - adam_t0
  std::int64_t data_t0 = 0;  // batch index = step - data_t0

  explicit LabRun(const RegressionLabConfig& c, std::uint64_t seed) : cfg(c) {
    model.init(seed);
    for (const auto& p : model.params()) {
      m.emplace_back(p.size(), 0.0f);
      v.emplace_back(p.size(), 0.0f);
    }
  }

  RegressionBatch batch_of(std::int64_t s) const {
    return regression_batch(kModel, cfg.data_seed, cfg.sampler_seed, s - data_t0);
  }

  float train_step() {
    const std::int64_t s = step + 1;
    const float loss = model.forward_backward(batch_of(s), order);
    AdamWHyper h;
    h.lr = cfg.lr;
    h.beta1 = 0.9;
    h.beta2 = 0.999;
    h.eps = 1e-8;
    h.weight_decay = 0.0;  // plain Adam
    h.decay = false;
    h.step = s - adam_t0;
    auto& params = model.params();
    for (std::size_t i = 0; i < params.size(); ++i)
      adamw_step(KernelCtx::best(1, 64), h, std::span<float>(params[i]),
                 std::span<const float>(model.grads()[i]), std::span<float>(m[i]),
                 std::span<float>(v[i]));
    step = s;
    return loss;
  }

  std::vector<float> flat_params() const {
    std::vector<float> f;
    for (const auto& p : model.params()) f.insert(f.end(), p.begin(), p.end());
    return f;
  }

  // The full state as bytes: counters, then parameters, first and second moments.
  std::string serialize() const {
    std::string b = "LSLAB001";
    auto put = [&b](const void* p, std::size_t n) { b.append(static_cast<const char*>(p), n); };
    for (std::int64_t x : {step, adam_t0, data_t0}) put(&x, sizeof x);
    for (const auto* set : {&model.params(), &m, &v})
      for (const auto& t : *set) {
        const std::uint64_t n = t.size();
        put(&n, sizeof n);
        put(t.data(), n * sizeof(float));
      }
    return b;
  }

  void deserialize(const std::string& b, const std::string& what) {
    std::size_t off = 8;
    check(b.size() >= 8 && b.compare(0, 8, "LSLAB001") == 0, what + " is not a lab checkpoint",
          "it is written by the lab itself; delete it and rerun");
    auto get = [&](void* p, std::size_t n) {
      check(off + n <= b.size(), what + " is truncated at byte " + std::to_string(off),
            "delete it and rerun the lab");
      std::memcpy(p, b.data() + off, n);
      off += n;
    };
    for (std::int64_t* x : {&step, &adam_t0, &data_t0}) get(x, sizeof *x);
    for (auto* set : {&model.params(), &m, &v})
      for (auto& t : *set) {
        std::uint64_t n = 0;
        get(&n, sizeof n);
        check(n == t.size(), what + ": tensor of " + std::to_string(n) + " floats, expected " +
                                 std::to_string(t.size()));
        get(t.data(), n * sizeof(float));
      }
    check(off == b.size(), what + " has " + std::to_string(b.size() - off) + " trailing bytes");
  }
};

struct Trajectory {
  std::vector<float> loss;
  std::vector<std::vector<float>> params;  // after each step
};

void record(LabRun& r, Trajectory& t, std::int64_t to) {
  while (r.step < to) {
    t.loss.push_back(r.train_step());
    t.params.push_back(r.flat_params());
  }
}

std::string rounded(const RegressionLabConfig& cfg, float x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, cfg.loss_format.c_str(), static_cast<double>(x));
  return buf;
}

ScenarioResult compare(const RegressionLabConfig& cfg, const std::string& name,
                       const Trajectory& ref, const Trajectory& t) {
  ScenarioResult r;
  r.scenario = name;
  r.loss = t.loss;
  for (std::size_t s = 0; s < ref.params.size(); ++s) {
    double md = 0;
    bool mism = std::memcmp(ref.params[s].data(), t.params[s].data(),
                            ref.params[s].size() * sizeof(float)) != 0;
    for (std::size_t i = 0; i < ref.params[s].size(); ++i)
      md = std::max(md, std::fabs(static_cast<double>(ref.params[s][i]) - t.params[s][i]));
    const bool hid = mism && rounded(cfg, ref.loss[s]) == rounded(cfg, t.loss[s]);
    r.max_abs_diff.push_back(md);
    r.mismatch.push_back(mism);
    r.hidden.push_back(hid);
    if (mism && r.first_mismatch == 0) r.first_mismatch = static_cast<std::int64_t>(s) + 1;
    r.mismatch_steps += mism;
    r.hidden_steps += hid;
    r.max_diff = std::max(r.max_diff, md);
  }
  r.final_loss = t.loss.back();
  return r;
}

// max |Δw| of one step in units of the ulp of the largest |w| (the weights' scale).
double max_ulps(const std::vector<float>& ref, const std::vector<float>& x) {
  float big = 0;
  double d = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    big = std::max(big, std::fabs(ref[i]));
    d = std::max(d, std::fabs(static_cast<double>(ref[i]) - x[i]));
  }
  return d / (std::nextafter(big, INFINITY) - big);
}

std::string hex64(std::uint64_t x) {
  char b[24];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(x));
  return b;
}

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

RegressionLabResult run_regression_lab(const RegressionLabConfig& cfg,
                                       const std::string& work_dir) {
  check(cfg.steps > cfg.restore_at + 1 && cfg.restore_at >= 1,
        "lab: restore step " + std::to_string(cfg.restore_at) + " must lie inside the " +
            std::to_string(cfg.steps) + " steps",
        "use more steps or an earlier restore step");
  const std::int64_t N = cfg.steps, K = cfg.restore_at;
  RegressionLabResult res;

  Trajectory ref;
  {
    LabRun r(cfg, cfg.model_seed);
    record(r, ref, N);
  }
  res.reference_loss = ref.loss;

  // 1. Same seed, full state: a second run from scratch.
  Trajectory same;
  {
    LabRun r(cfg, cfg.model_seed);
    record(r, same, N);
  }
  // 2. Full checkpoint at K: the state goes through a file into a fresh run (initialised
  // from another seed, so everything it ends up with comes from the file).
  Trajectory ck;
  const std::string ckpt_path = work_dir + "/regression_ckpt_step" + std::to_string(K) + ".bin";
  bool roundtrip = false;
  std::uint64_t ckpt_hash = 0;
  {
    auto r = std::make_unique<LabRun>(cfg, cfg.model_seed);
    record(*r, ck, K);
    const std::string bytes = r->serialize();
    {
      std::ofstream f(ckpt_path, std::ios::binary);
      f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      check(f.good(), "cannot write '" + ckpt_path + "'", "check the --out directory");
    }
    r.reset();
    std::ifstream f(ckpt_path, std::ios::binary);
    const std::string back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    LabRun restored(cfg, cfg.model_seed + 1);
    restored.deserialize(back, ckpt_path);
    roundtrip = restored.serialize() == bytes;
    ckpt_hash = xxh3_64(bytes.data(), bytes.size());
    record(restored, ck, N);
  }
  // 3. Reversed reduction order over the batch, every step.
  Trajectory rev;
  {
    LabRun r(cfg, cfg.model_seed);
    r.order = ReductionOrder::reversed;
    record(r, rev, N);
  }
  // 4. Optimizer state reset at K: moments zeroed, Adam's step count restarts at 1.
  Trajectory opt;
  {
    LabRun r(cfg, cfg.model_seed);
    record(r, opt, K);
    for (auto& t : r.m) std::fill(t.begin(), t.end(), 0.0f);
    for (auto& t : r.v) std::fill(t.begin(), t.end(), 0.0f);
    r.adam_t0 = K;
    record(r, opt, N);
  }
  // 5. Sampler RNG reset at K: the data order restarts from the first batch.
  Trajectory smp;
  bool smp_batch_is_first = false;
  {
    LabRun r(cfg, cfg.model_seed);
    record(r, smp, K);
    r.data_t0 = K;
    const RegressionBatch a = r.batch_of(K + 1);
    const RegressionBatch b = regression_batch(kModel, cfg.data_seed, cfg.sampler_seed, 1);
    smp_batch_is_first = a.x == b.x && a.y == b.y;
    record(r, smp, N);
  }

  res.scenarios = {compare(cfg, "same_seed_full_state", ref, same),
                   compare(cfg, "full_checkpoint_at_" + std::to_string(K), ref, ck),
                   compare(cfg, "reversed_reduction_order", ref, rev),
                   compare(cfg, "optimizer_state_reset_at_" + std::to_string(K), ref, opt),
                   compare(cfg, "sampler_rng_reset_at_" + std::to_string(K), ref, smp)};
  const auto& S = res.scenarios;
  auto add = [&res](std::string name, bool ok, std::string detail) {
    res.checks.push_back({std::move(name), ok, std::move(detail)});
  };
  auto num = [](double x) {
    char b[48];
    std::snprintf(b, sizeof b, "%.6g", x);
    return std::string(b);
  };
  const float ref_final = ref.loss.back();
  bool finite = std::isfinite(ref_final);
  for (const auto& s : S) finite = finite && std::isfinite(s.final_loss);
  add("reference learns: final loss < half the first loss", ref_final < 0.5f * ref.loss.front(),
      num(ref.loss.front()) + " -> " + num(ref_final));
  add("every final loss is finite", finite, "");
  add("same seed + full state: no weight mismatch at any step", S[0].mismatch_steps == 0,
      std::to_string(S[0].mismatch_steps) + " steps differ");
  add("same seed + full state: final loss bitwise equal", same_bits(S[0].final_loss, ref_final),
      num(S[0].final_loss));
  add("full checkpoint: the file restores to the same bytes", roundtrip,
      ckpt_path + " xxh3 " + hex64(ckpt_hash));
  add("full checkpoint: no weight mismatch at any step", S[1].mismatch_steps == 0,
      std::to_string(S[1].mismatch_steps) + " steps differ");
  add("full checkpoint: max |dw| is exactly 0", S[1].max_diff == 0.0, num(S[1].max_diff));
  add("full checkpoint: final loss bitwise equal", same_bits(S[1].final_loss, ref_final),
      num(S[1].final_loss));
  add("reversed reduction: weights differ from step 1", S[2].first_mismatch == 1,
      "first mismatch at step " + std::to_string(S[2].first_mismatch));
  add("reversed reduction: the difference never heals (every later step differs)",
      S[2].first_mismatch > 0 && S[2].mismatch_steps == N - S[2].first_mismatch + 1,
      std::to_string(S[2].mismatch_steps) + " steps differ");
  {
    const double u = S[2].first_mismatch > 0 ? max_ulps(ref.params[S[2].first_mismatch - 1],
                                                        rev.params[S[2].first_mismatch - 1])
                                             : -1;
    add("reversed reduction: at the first mismatch max |dw| <= 4 ulp of the largest |w|",
        u > 0 && u <= 4, num(u) + " ulp");
  }
  add("reversed reduction: max |dw| over the run stays below 1e-3 (same math, other rounding)",
      S[2].max_diff > 0 && S[2].max_diff < 1e-3, num(S[2].max_diff));
  add("reversed reduction: most mismatched steps are hidden by the rounded loss log",
      S[2].mismatch_steps > 0 && 2 * S[2].hidden_steps > S[2].mismatch_steps,
      std::to_string(S[2].hidden_steps) + " of " + std::to_string(S[2].mismatch_steps) +
          " hidden at " + cfg.loss_format);
  add("reversed reduction: final loss within 1e-3 relative of the reference",
      std::fabs(S[2].final_loss - ref_final) <= 1e-3 * std::fabs(ref_final),
      num(S[2].final_loss) + " vs " + num(ref_final));
  for (int i : {3, 4}) {
    const std::string what = i == 3 ? "optimizer reset" : "sampler reset";
    add(what + ": first mismatch at step " + std::to_string(K + 1), S[i].first_mismatch == K + 1,
        "first mismatch at step " + std::to_string(S[i].first_mismatch));
    add(what + ": every step after the reset differs (" + std::to_string(N - K) + " steps)",
        S[i].mismatch_steps == N - K, std::to_string(S[i].mismatch_steps) + " steps differ");
  }
  add("optimizer reset: a visible change (max |dw| > 1e-4), not rounding noise",
      S[3].max_diff > 1e-4, num(S[3].max_diff));
  add("sampler reset: step " + std::to_string(K + 1) + " trains on step 1's batch, bit for bit",
      smp_batch_is_first, "");
  add("full-state scenarios hide nothing (0 hidden mismatch steps)",
      S[0].hidden_steps == 0 && S[1].hidden_steps == 0, "");
  return res;
}

nlohmann::ordered_json RegressionLabResult::summary() const {
  nlohmann::ordered_json j;
  int passed = 0;
  for (const auto& c : checks) passed += c.passed;
  j["checks_passed"] = passed;
  j["summary"] = nlohmann::ordered_json::array();
  for (const auto& s : scenarios) {
    nlohmann::ordered_json e;
    e["scenario"] = s.scenario;
    e["first_weight_mismatch"] =
        s.first_mismatch > 0 ? nlohmann::ordered_json(s.first_mismatch) : nlohmann::ordered_json();
    e["weight_mismatch_steps"] = s.mismatch_steps;
    e["hidden_weight_mismatch_steps"] = s.hidden_steps;
    e["maximum_weight_difference"] = s.max_diff;
    e["final_loss"] = s.final_loss;
    j["summary"].push_back(e);
  }
  j["reference_final_loss"] = reference_loss.back();
  return j;
}

nlohmann::ordered_json RegressionLabResult::details() const {
  nlohmann::ordered_json j;
  j["model"] = "regression";
  j["reference_loss"] = reference_loss;
  j["scenarios"] = nlohmann::ordered_json::array();
  for (const auto& s : scenarios) {
    nlohmann::ordered_json e;
    e["scenario"] = s.scenario;
    e["loss"] = s.loss;
    e["max_abs_weight_diff"] = s.max_abs_diff;
    e["mismatch"] = s.mismatch;
    e["hidden"] = s.hidden;
    j["scenarios"].push_back(e);
  }
  j["checks"] = nlohmann::ordered_json::array();
  for (const auto& c : checks)
    j["checks"].push_back({{"check", c.name}, {"passed", c.passed}, {"detail", c.detail}});
  return j;
}

}  // namespace lockstep::lab
