// resume-check: the experiment's options and its run (launch/experiments/resume_check.cpp
// says what it does; launch/cli/cmd_experiments.cpp registers it as a subcommand).
// Determinism contract: see launch/experiments/resume_check.cpp.
#pragma once

#include <string>
#include <vector>
#include "launch/experiments/job_options.hpp"

namespace lockstep::experiments {

struct ResumeCheckOptions : JobOptions {
  ResumeCheckOptions() { out = "runs/resume-check"; }
  int steps = 0;
  std::string save_at;
  std::string layout = "1x1";
  std::string resume_layout;  // empty: --layout
};

// Runs the experiment; returns the exit status. Throws lockstep::Error on bad input.
int resume_check(const ResumeCheckOptions& o, bool with_verify);

}  // namespace lockstep::experiments
