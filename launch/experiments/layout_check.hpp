// layout-check: the experiment's options and its run (launch/experiments/layout_check.cpp
// says what it does; launch/cli/cmd_experiments.cpp registers it as a subcommand).
// Determinism contract: see launch/experiments/layout_check.cpp.
#pragma once

#include <string>
#include <vector>
#include "launch/experiments/job_options.hpp"

namespace lockstep::experiments {

struct LayoutCheckOptions : JobOptions {
  LayoutCheckOptions() { out = "runs/layout-check"; }
  std::string layouts = "1x1,1x2,2x1,2x2";
  std::string microbatches;  // empty: the config's parallel.microbatch
  int steps = 0;             // 0: the config's run.steps
};

// Runs the experiment; returns the exit status. Throws lockstep::Error on bad input.
int layout_check(const LayoutCheckOptions& o);

}  // namespace lockstep::experiments
