// The replay lab on the regression MLP (docs/design.md section 7): a float32 MLP trained with
// Adam on synthetic data for 100 steps, and five scenarios replayed against a reference
// run: the same seed with full state; a full checkpoint at step 40 written to a file and
// restored; the reversed reduction order over the batch; the optimizer state reset at 40
// (moments and Adam's step count restart); the sampler RNG reset at 40 (the data order
// restarts from the first batch). Per scenario: first step whose weights differ bitwise
// from the reference, how many steps differ, how many of those are hidden (the logged,
// rounded loss is identical), the largest |Δw|, the final loss; and >= 15 checks.
// Determinism contract: every run is a pure function of its seeds and scenario; the model
// reduces in canonical order unless the scenario says reversed, so the reference and the
// replays agree bit for bit exactly where the scenario keeps all state.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lockstep::lab {

struct RegressionLabConfig {
  std::int64_t steps = 100;
  std::int64_t restore_at = 40;  // checkpoint / reset step
  double lr = 1e-2;
  std::uint64_t model_seed = 1234, data_seed = 99, sampler_seed = 7;
  std::string loss_format = "%.4f";  // how the log rounds the loss ("hidden" mismatches)
};

// One scenario compared with the reference, per step (index s-1 for step s).
struct ScenarioResult {
  std::string scenario;
  std::vector<float> loss;           // loss of each step (before its update)
  std::vector<double> max_abs_diff;  // max |w - w_ref| over all weights after each step
  std::vector<bool> mismatch;        // any weight bit differs after the step
  std::vector<bool> hidden;          // mismatch while the rounded logged loss is equal
  std::int64_t first_mismatch = 0;   // 0: none
  std::int64_t mismatch_steps = 0, hidden_steps = 0;
  double max_diff = 0;
  float final_loss = 0;
};

struct Check {
  std::string name;
  bool passed = false;
  std::string detail;
};

struct RegressionLabResult {
  std::vector<float> reference_loss;
  std::vector<ScenarioResult> scenarios;  // the five, in the order of the header comment
  std::vector<Check> checks;
  // summary.json: {"checks_passed", "summary": [...], "reference_final_loss"}
  nlohmann::ordered_json summary() const;
  // The per-step series and every check (input of launch/experiments/lab_plot.py).
  nlohmann::ordered_json details() const;
};

// Runs the reference and the five scenarios; the checkpoint file is written in work_dir.
RegressionLabResult run_regression_lab(const RegressionLabConfig& cfg, const std::string& work_dir);

}  // namespace lockstep::lab
