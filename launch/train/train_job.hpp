// One training job's state and its step (docs/design.md section 4, "one training step"): the
// data (dataset + sampler), the model, the gradient synchronization, the state trace, the op
// trace and the optimizer settings of one config. run_step() is, in order: sample ->
// forward/backward per microbatch -> canonical gradient reduction (microbatch counter, then
// DP tree) -> state trace -> exact global-norm clip -> AdamW -> publish (ZeRO) ->
// fingerprints. A step whose loss or gradient norm is not finite is stopped before the update
// or skipped (optim.on_nonfinite). Fault injection (debug.bitflip, debug.nan) and the op trace
// hang off the step as hooks.
// `lockstep train` drives one job (launch/train/trainer.hpp adds resume, checkpoints, trace
// and metrics lines); an experiment may drive several in one process (the tax experiment's
// interleaved timing, launch/experiments/interleave.hpp).
// Determinism contract: in invariant mode every quantity of a step is a function of the
// config's logical content (model, data, seed, optimizer, reduce_block) only: not of TP, DP,
// microbatch, threads or ISA, whenever the validator (launch/train/validate.hpp) grants G3.
// Jobs in one process share no state (every random stream is keyed by seed and step), so a
// job's bits do not depend on what else runs beside it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/gpt_dataset.hpp"
#include "data/sampler.hpp"
#include "launch/train/config.hpp"
#include "launch/train/grad_sync.hpp"
#include "launch/train/state_trace.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/microbatch_plan.hpp"
#include "parallel/stage_link.hpp"
#include "runtime/comm.hpp"
#include "runtime/grid.hpp"
#include "verify/op_trace.hpp"

namespace lockstep {

// Where a step went non-finite (the same on every rank).
struct Nonfinite {
  std::string tensor;  // the first parameter in table order with a non-finite gradient
                       // element ("" when every gradient is finite: only the loss, or the
                       // norm overflowed)
  int rank = -1;       // the lowest world rank holding a non-finite element of it
  std::string tag;     // that rank's grid tag ("tp1-dp0")
  std::string describe(std::int64_t step, float loss, float grad_norm) const;
};

// What one step produced (rank 0's view of the world-wide values).
struct StepResult {
  float loss = 0, grad_norm = 0, lr = 0;
  Fingerprints fp;
  double verify_seconds = 0;           // the two verify calls, including their collectives (wall)
  std::optional<Nonfinite> nonfinite;  // set when the loss or the gradient norm is not finite
  bool stopped = false;                // the guard stopped the step before its update
  bool skipped = false;                // the guard skipped the step (optim.on_nonfinite=skip)
  // More than one rank, by world rank (ms): compute = the rank's forward and backward passes of
  // the step up to its first DP collective (TP exchanges included; with PP less its pipeline
  // wait, reported apart); sync = from there until its gradients are reduced: the loss and gradient
  // reductions over DP, including the wait for the slowest rank of its DP group. A rank whose
  // compute is the largest is the straggler the others' sync waits for. rank = the step on the
  // rank's own clock, from its start to these figures' allgather (after the update and the
  // fingerprints): it bounds the rank's compute + sync (+ pipeline wait), which rank 0's step
  // time need not, since each rank starts its step when its own previous one ends.
  std::vector<float> compute_ms, sync_ms, rank_ms;
  // PP > 1 only, by world rank: the seconds the rank waited for its pipeline neighbours in the
  // step (its share of the bubble, plus transfers), its peak resident memory and what its
  // activation slots hold (Gpt::forward_state_bytes), in MiB.
  std::vector<float> pipeline_wait_ms, peak_rss_mib, activation_mib;
};

class TrainJob {
 public:
  // cfg: validated for mpi's world size, run.threads resolved (> 0). Builds the data, the
  // model (initialized from run.seed), the gradient sync and the traces; throws
  // lockstep::Error on any failure.
  TrainJob(const config::Config& cfg, Context& mpi);

  // Runs training step `step` (1-based) on every rank of the job.
  StepResult run_step(std::int64_t step);

  const config::Config& cfg() const { return cfg_; }
  const KernelCtx& kctx() const { return kctx_; }
  const Grid& grid() const { return grid_; }
  const Gpt& model() const { return *model_; }
  const data::GptDataset& dataset() const { return *dataset_; }
  data::Sampler& sampler() { return *sampler_; }
  StateTrace& state() { return *state_; }
  std::int64_t microbatch() const { return mb_; }
  // Forward/backward passes per rank and step (MicrobatchPlan: under halving a microbatch size
  // that is not a node of the rank's tree becomes several smaller passes).
  std::int64_t microbatches() const { return static_cast<std::int64_t>(plan_.passes.size()); }
  // Steps skipped by the non-finite guard so far (AdamW's step count is step - skipped);
  // saved in checkpoints and restored on resume.
  std::int64_t skipped_steps() const { return skipped_; }
  void set_skipped_steps(std::int64_t n) { skipped_ = n; }

 private:
  float forward_backward(std::int64_t step);  // every microbatch of this rank; the loss
  float pipeline_forward_backward(std::int64_t step);  // the same as a pipeline stage (PP > 1)
  void fill_batch();  // every microbatch's tokens, labels and sequence ids of this step
  void setup_pipeline();
  void rank_metrics(StepResult& r, double compute_s, double sync_s, double elapsed_s);  // world > 1
  void update(std::int64_t step, float grad_norm, float lr);  // clip + AdamW (+ op records)
  void flip_bit(std::int64_t step);    // debug.bitflip's hook, after the update
  void inject_nan(std::int64_t step);  // debug.nan's hook, after the gradient fingerprint
  Nonfinite locate_nonfinite() const;  // collective: the first non-finite gradient

  config::Config cfg_;
  const Communicator& world_;
  KernelCtx kctx_;
  Grid grid_;
  LrScheduleConfig schedule_;                      // cfg.optim's, total_steps = run.steps
  std::int64_t mb_ = 0, per_rank_ = 0;  // sequences per microbatch (at most) / rank
  MicrobatchPlan plan_;
  std::unique_ptr<data::GptDataset> dataset_;
  std::unique_ptr<data::Sampler> sampler_;
  std::unique_ptr<Gpt> model_;
  std::unique_ptr<GradSync> sync_;
  std::unique_ptr<StateTrace> state_;
  std::unique_ptr<OpTrace> ops_;
  std::size_t bitflip_param_ = 0;              // debug.bitflip's tensor (when on)
  std::size_t nan_param_ = 0;                  // debug.nan's tensor (when on)
  std::int64_t skipped_ = 0;                   // steps skipped by the non-finite guard
  double passes_seconds_ = 0;  // this step's forward/backward passes, up to the first DP collective
  std::vector<AdamWTensor> update_tensors_;    // the update slices, for the fused clip + AdamW
  std::vector<std::int32_t> tokens_, labels_;  // [mb * context] ([per_rank * context] with PP)
  std::vector<std::int64_t> seq_ids_;          // [mb] ([per_rank] with PP)
  // Pipeline parallelism: the link to the neighbouring stages, the stage's activation slots,
  // and per microbatch the buffers of what is received and sent (the residual stream forward,
  // its gradient backward).
  std::unique_ptr<StageLink> link_;
  std::int64_t slots_ = 1;
  std::vector<std::vector<float>> recv_h_, recv_dh_, send_h_, send_dh_;
};

}  // namespace lockstep
