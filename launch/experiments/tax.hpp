// tax: the experiment's options and its run (launch/experiments/tax.cpp
// says what it does; launch/cli/cmd_experiments.cpp registers it as a subcommand).
// Determinism contract: see launch/experiments/tax.cpp.
#pragma once

#include <string>
#include <vector>
#include "launch/experiments/job_options.hpp"

namespace lockstep::experiments {

struct TaxOptions : JobOptions {
  TaxOptions() { out = "runs/tax"; }
  std::string modes = "fast,deterministic,invariant,invariant+verify";
  int trials = 3;
  int steps = 8;
  int skip = 2;
  int np = 1;
  int tp = 1;
  int pp = 1;
  bool interleaved = false;
  std::string json;
};

// Runs the experiment; returns the exit status. Throws lockstep::Error on bad input.
int tax(const TaxOptions& o);

}  // namespace lockstep::experiments
