// `lockstep train`'s run around the training step (launch/train/train_job.hpp): resume, the
// start-up lines, the loop with its trace, metrics and progress lines, checkpoints and
// preemption. The step: sampler -> batch -> forward/backward per microbatch -> canonical
// gradient reduction (microbatch counter, then DP tree) -> exact global-norm clip -> AdamW ->
// fingerprints -> trace and metrics lines.
// The loop runs each step through a StepDriver: by default the job's step alone; an
// experiment can drive the loop with its own (the tax experiment's interleaved modes,
// launch/experiments/interleave.hpp) without the loop knowing about it.
// Determinism contract: in invariant mode every quantity of a step is a function of the
// config's logical content (model, data, seed, optimizer, reduce_block) only: not of TP,
// DP, microbatch, threads or ISA, whenever the validator (launch/train/validate.hpp) grants
// G3. The trace line of a step is then byte-identical across those layouts. A driver times
// and may run other jobs beside the step; it never changes the job's bits.
#pragma once

#include <cstdint>
#include <string>

#include "launch/train/config.hpp"
#include "launch/train/train_job.hpp"
#include "runtime/comm.hpp"

namespace lockstep {

// One step of the loop as the driver ran it.
struct StepTiming {
  StepResult result;
  double seconds = 0;       // the job's step, wall clock
  double cpu_seconds = 0;   // the job's step, CPU time of the process (all threads)
  double loop_seconds = 0;  // everything the driver ran for this step (the ETA counts it)
};

class StepDriver {
 public:
  virtual ~StepDriver() = default;
  // Once, after the job is built and resumed (resumed_from: the checkpoint it continues
  // from; empty on a fresh run), before any file of the run directory is written.
  virtual void start(const TrainJob& job, const std::string& resumed_from);
  // A line for the start-up banner (empty: none).
  virtual std::string banner() const;
  // Runs step `step` of the job (and whatever the driver runs beside it).
  virtual StepTiming step(TrainJob& job, std::int64_t step);
  // After rank 0 wrote the step's trace and metrics lines (called on every rank).
  virtual void finish_step(std::int64_t step, const StepTiming& t);
};

// Runs the whole job described by cfg on the ranks of `mpi`, each step through `driver`.
// Returns the exit code. Throws lockstep::Error on any failure (run_ranks turns it into one
// line + MPI_Abort).
int train(const config::Config& cfg, Context& mpi, StepDriver& driver);
// The same with the default driver (the job's step alone).
int train(const config::Config& cfg, Context& mpi);

// cfg with run.threads resolved (0: the cores of this host / the ranks on it).
config::Config with_threads_resolved(const config::Config& cfg, int world_size);

}  // namespace lockstep
