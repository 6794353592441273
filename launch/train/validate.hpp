// Validation of a run configuration against a layout, before any work starts, and the
// statement of which guarantees (docs/design.md section 1: G1-G4) that layout gets and why.
// Determinism contract: the G3/G4 verdict is exactly the condition under which every
// reduction of a step is an aligned subtree of its canonical sum (docs/design.md section 2):
// power-of-two TP and DP groups, and every split reduction axis (row-parallel K per TP
// rank, the vocab shard, a microbatch's tokens, a DP rank's tokens) holding a power-of-two
// number of whole blocks of numerics.reduce_block.
#pragma once

#include <string>
#include <vector>

#include "launch/train/config.hpp"

namespace lockstep::config {

// Every problem with cfg on `world_size` ranks, one line each (empty: valid). Each line
// names the keys and numbers involved and how to fix them.
std::vector<std::string> config_problems(const Config& cfg, int world_size);

// Throws a lockstep::Error listing every problem (one per line) if there is any.
void validate_or_throw(const Config& cfg, int world_size);

struct Guarantee {
  std::string level;  // "G1".."G4"
  bool holds = false;
  std::string why;  // one sentence
};
struct GuaranteeReport {
  std::vector<Guarantee> levels;
  std::string summary() const;  // "G1 ✓  G2 ✓  G3 ✓  G4 ✓" plus the reasons for any ✗
};

// Assumes a valid config (config_problems empty).
GuaranteeReport guarantees(const Config& cfg, int world_size);

}  // namespace lockstep::config
