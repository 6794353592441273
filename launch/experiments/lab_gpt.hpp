// The replay lab on the GPT model, through the trainer (`lockstep run` jobs at TP 1 x DP np,
// the tiny preset by default): a reference run with a checkpoint at step K, and the five
// scenarios of lab_regression.hpp in their trainer form:
//   same_seed_full_state       the same job again;
//   full_checkpoint_at_K       run.stop_at=K (checkpoint, exit), then run.resume=auto;
//   reversed_reduction_order   debug.perturb=dp.reduce: the DP gradient reduction summed as a
//                              left-to-right chain instead of the canonical tree (the same
//                              values in another order; the GPT analogue of the MLP's
//                              reversed batch sum; needs DP >= 2);
//   optimizer_state_reset_at_K resume from the reference's step-K checkpoint with
//                              ckpt.load_optim=false (AdamW moments restart at zero);
//   sampler_rng_reset_at_K     the same with ckpt.load_data=false (data order restarts).
// Weight mismatch per step: the "param/*" fingerprints of trace.jsonl differ; hidden: while
// the loss rounded to 4 decimals is equal; maximum_weight_difference: max |Δw| between the
// step-N checkpoints (the trace holds fingerprints, not weights). Steps 1..K of the two
// reset scenarios are the reference's own (they resume from its checkpoint).
// Determinism contract: compares what the jobs write; never rewrites it.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/experiments/lab_regression.hpp"

namespace lockstep::lab {

struct GptLabConfig {
  std::string config;  // empty: launch/configs/tiny.toml of the source tree
  std::vector<std::string> sets;
  int np = 2;
  std::int64_t steps = 30;
  std::int64_t restore_at = 12;
  std::vector<std::string> mpi_args;
};

struct GptLabResult {
  nlohmann::ordered_json summary, details;
  std::vector<Check> checks;
};

GptLabResult run_gpt_lab(const GptLabConfig& cfg, const std::string& out_dir);

// max |a - b| over the float32 tensors named param/* in two checkpoint directories of the
// same layout (rank_*.safetensors); throws if their tensor lists differ.
double max_param_difference(const std::string& ckpt_a, const std::string& ckpt_b);

}  // namespace lockstep::lab
