// Preemption: SIGTERM / SIGINT (what a cluster scheduler sends before it kills a job) set a
// flag instead of killing the rank; the training loop finishes the current step, all ranks
// agree (one integer allreduce), save a checkpoint and exit 0. A second signal of the same
// kind gets the default action (the user really wants the job gone).
// Determinism contract: only decides where a run stops; the state saved is the state
// after a whole step, so resuming continues the uninterrupted trajectory bit for bit.
#pragma once

#include "runtime/comm.hpp"

namespace lockstep {

class PreemptionGuard {
 public:
  PreemptionGuard();   // installs the handlers (one guard at a time)
  ~PreemptionGuard();  // restores the previous handlers
  PreemptionGuard(const PreemptionGuard&) = delete;
  PreemptionGuard& operator=(const PreemptionGuard&) = delete;

  // Collective over `world`: true on every rank if any rank received a signal. Returns the
  // signal number through `signal` (0 when none).
  bool requested(const Communicator& world, int* signal = nullptr) const;
};

}  // namespace lockstep
