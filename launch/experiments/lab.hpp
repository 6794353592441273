// lab: the experiment's options and its run (launch/experiments/lab.cpp
// says what it does; launch/cli/cmd_experiments.cpp registers it as a subcommand).
// Determinism contract: see launch/experiments/lab.cpp.
#pragma once

#include <string>
#include <vector>

namespace lockstep::experiments {

struct LabOptions {
  std::string model = "regression";
  std::string out;
  int steps = 0;       // 0: 100 (regression) / 30 (gpt)
  int restore_at = 0;  // 0: 40 (regression) / 12 (gpt)
  std::string config;  // gpt: default launch/configs/tiny.toml
  std::vector<std::string> sets;
  int np = 2;
  std::string plot_script;  // default: launch/experiments/lab_plot.py next to the build
  std::vector<std::string> mpi_args;
};

// Runs the experiment; returns the exit status. Throws lockstep::Error on bad input.
int lab(const LabOptions& o);

}  // namespace lockstep::experiments
