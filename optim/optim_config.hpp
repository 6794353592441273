// The config file's [optim] section, made of the optimizer's own structs: the learning-rate
// schedule (optim.lr, min_lr, warmup, schedule), AdamW's constants (optim.beta1, beta2, eps,
// weight_decay), the global-norm clip (optim.clip) and what a non-finite loss or gradient does
// (optim.on_nonfinite). launch/train/config.hpp's key table
// points into it; the schedule's total_steps is run.steps (set where the schedule is used).
// Determinism contract: none by itself (values only).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"
#include "runtime/enum_names.hpp"

namespace lockstep {

// A step whose loss or global gradient norm is not finite: stop the job before the update
// (nothing is applied or saved), or skip it (parameters and moments unchanged, the data and
// the learning-rate schedule move on, AdamW's step count does not; the skip is traced, and a
// rerun skips the same steps, so it replays bit for bit).
enum class NonfinitePolicy { stop, skip };
constexpr std::array<EnumName<NonfinitePolicy>, 2> enum_names(NonfinitePolicy) {
  return {{{NonfinitePolicy::stop, "stop"}, {NonfinitePolicy::skip, "skip"}}};
}

struct OptimConfig {
  LrScheduleConfig schedule;
  AdamWConfig adamw;
  double clip = 1.0;  // global gradient-norm clip; 0 disables
  NonfinitePolicy on_nonfinite = NonfinitePolicy::stop;
};

// Every problem with the section's values, one line each naming the keys (empty: valid). The
// config validator (launch/train/validate.hpp) reports these with the rest.
std::vector<std::string> optim_config_problems(const OptimConfig& c);

}  // namespace lockstep
