// The interleaved timing of the determinism-tax experiment (`lockstep tax --interleaved`, or
// `lockstep train` with debug.interleave = MODE,MODE,...): the first mode's job is the run
// itself (its trace.jsonl, metrics.jsonl and checkpoints); every other mode (launch/train/
// modes.hpp) trains beside it in the same process on its own state, one step of each in turn,
// in an order rotated by one per step (so no mode always runs first or right after another),
// each timed alone. run.out/tax_steps.jsonl gets {"step", "first", "ms": {mode: ms}} per step.
// It drives the training loop through its public StepDriver (launch/train/trainer.hpp).
// Determinism contract: the jobs share no state (every random stream is keyed by seed and
// step), so the run's bits are those of the first mode's run alone.
#pragma once

#include "launch/train/config.hpp"
#include "runtime/comm.hpp"

namespace lockstep::experiments {

// Trains cfg (debug.interleave set and valid) with every mode of its list interleaved.
int train_interleaved(const config::Config& cfg, Context& mpi);

}  // namespace lockstep::experiments
