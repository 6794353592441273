// The named run modes: each a name and the config overrides that make a run of it. The
// determinism-tax experiment times them (`lockstep tax`), and debug.interleave lists them.
//   fast | deterministic | invariant   run.determinism = that, replica check off
//   invariant+verify                   invariant, cross-replica check every step
//   invariant+optrace                  that, plus the op trace over every step
// Determinism contract: none (naming only); each mode's run keeps its own contract.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/train/config.hpp"

namespace lockstep::config {

// The mode names above, in that order, and as one comma-separated line (for messages).
const std::vector<std::string>& run_modes();
std::string run_modes_text();
bool is_run_mode(const std::string& mode);
// The --set overrides of `mode` for a run of `steps` steps; throws lockstep::Error naming the
// valid modes on an unknown one.
std::vector<std::string> run_mode_sets(const std::string& mode, std::int64_t steps);
// cfg with the overrides of `mode` applied (run.steps taken from cfg).
Config with_run_mode(const Config& cfg, const std::string& mode);

}  // namespace lockstep::config
