// The hook through which the op trace (verify/op_trace.hpp) and fault injection
// (debug.perturb) see the ops of one training step, without model/, parallel/ or optim/
// depending on verify/. Ops name themselves with run-independent names
// ("layers.2.mlp.fc1.fwd", "layers.2.mlp.fc1.wgrad", "dp.reduce", "adam.update", ...).
// Determinism contract: observing never changes a result: record() only reads its
// arguments. perturb(name) returning true is the one deliberate exception: the op then
// changes its reduction order (as a nondeterministic kernel would), for testing the tools.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace lockstep {

class OpObserver {
 public:
  virtual ~OpObserver() = default;
  // True when record() wants calls at all (cheap; ops skip building arguments otherwise).
  virtual bool recording() const = 0;
  // One op: its name, its inputs and its output, as this rank holds them.
  virtual void record(std::string_view op, std::span<const std::span<const float>> inputs,
                      std::span<const float> output) = 0;
  // True if the op of this name must change its reduction order (debug.perturb).
  virtual bool perturb(std::string_view op) const = 0;
};

}  // namespace lockstep
