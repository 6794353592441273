// The config file's [optim] section, made of the optimizer's own structs: the learning-rate
// schedule (optim.lr, min_lr, warmup, schedule), AdamW's constants (optim.beta1, beta2, eps,
// weight_decay) and the global-norm clip (optim.clip). launch/train/config.hpp's key table
// points into it; the schedule's total_steps is run.steps (set where the schedule is used).
// Determinism contract: none by itself (values only).
#pragma once

#include <string>
#include <vector>

#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"

namespace lockstep {

struct OptimConfig {
  LrScheduleConfig schedule;
  AdamWConfig adamw;
  double clip = 1.0;  // global gradient-norm clip; 0 disables
};

// Every problem with the section's values, one line each naming the keys (empty: valid). The
// config validator (launch/train/validate.hpp) reports these with the rest.
std::vector<std::string> optim_config_problems(const OptimConfig& c);

}  // namespace lockstep
