// `lockstep train`'s run around the training step (launch/train_job.hpp): resume, the start-up
// lines, the loop with its trace, metrics and progress lines, checkpoints and preemption. The step:
// sampler -> batch -> forward/backward per microbatch -> canonical gradient reduction
// (microbatch counter, then DP tree) -> exact global-norm clip -> AdamW -> fingerprints ->
// trace and metrics lines.
// Determinism contract: in invariant mode every quantity of a step is a function of the
// config's logical content (model, data, seed, optimizer, reduce_block) only: not of TP,
// DP, microbatch, threads or ISA, whenever the validator (launch/validate.hpp) grants G3.
// The trace line of a step is then byte-identical across those layouts.
#pragma once

#include <string>

#include "launch/config.hpp"
#include "runtime/comm.hpp"

namespace lockstep {

// Runs the whole job described by cfg on the ranks of `mpi`. Returns the exit code.
// Throws lockstep::Error on any failure (run_ranks turns it into one line + MPI_Abort).
int train(const config::Config& cfg, Context& mpi);

}  // namespace lockstep
