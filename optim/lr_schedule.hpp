// The learning-rate schedule of Megatron-LM (OptimizerParamScheduler.get_lr), as a pure
// function of the step number:
//   warmup > 0 and step <= warmup : lr * step / warmup          (linear warmup from 0)
//   constant                      : lr
//   step > total_steps            : min_lr
//   otherwise, with r = (step - warmup) / (total_steps - warmup) in [0, 1]:
//     cosine : min_lr + 0.5 * (cos(pi * r) + 1) * (lr - min_lr)
//     linear : min_lr + (1 - r) * (lr - min_lr)
// Everything is evaluated in float64 in Megatron's operation order and rounded once to
// float32. cos is our own (lr_cos_pi below: a fixed polynomial evaluation in IEEE double
// with no FMA), not libm's, so the bits do not depend on the C library; it is accurate to
// a few float64 ulps, so the float32 result equals Megatron's math.cos-based value except,
// at most, when the double lies within a few ulps of a float32 rounding boundary.
// Determinism contract: lr_at is a pure function of (config, step); resuming at step k
// needs nothing but k.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "runtime/enum_names.hpp"

namespace lockstep {

enum class LrSchedule { cosine, linear, constant };
constexpr std::array<EnumName<LrSchedule>, 3> enum_names(LrSchedule) {
  return {{{LrSchedule::cosine, "cosine"},
           {LrSchedule::linear, "linear"},
           {LrSchedule::constant, "constant"}}};
}

const char* lr_schedule_name(LrSchedule s);
// "cosine", "linear" or "constant"; throws a lockstep::Error otherwise.
LrSchedule parse_lr_schedule(std::string_view name);

struct LrScheduleConfig {
  double lr = 3e-4;              // peak learning rate (optim.lr)
  double min_lr = 3e-5;          // floor after decay (optim.min_lr)
  std::int64_t warmup = 10;      // warmup steps (optim.warmup)
  std::int64_t total_steps = 0;  // decay ends here (run.steps)
  LrSchedule schedule = LrSchedule::cosine;
};

// Throws a lockstep::Error naming the bad field unless 0 <= min_lr <= lr (finite),
// 0 <= warmup <= total_steps.
void validate(const LrScheduleConfig& c);

// The learning rate of step `step` (steps count from 1; step 0 gives 0 during warmup).
float lr_at(const LrScheduleConfig& c, std::int64_t step);

// cos(pi * r) for r in [0, 1], evaluated with IEEE double operations only (exposed for
// tests).
double lr_cos_pi(double r);

}  // namespace lockstep
