// Validation of a run configuration against a layout, before any work starts, and the
// statement of which guarantees (docs/design.md section 1: G1-G4) that layout gets and why.
// Determinism contract: the G3/G4 verdict is exactly the condition under which every
// reduction of a step is a node of its canonical tree (docs/design.md section 2): power-of-two
// TP and DP groups, and every split reduction axis cut at nodes. Under numerics.tree = halving:
// the row-parallel K per TP rank and the vocab shard hold whole blocks of
// numerics.reduce_block (then 2^j | blocks, a node), DP divides the global batch (a tree over
// sequences), and any microbatch size works (split at the nodes). Under pow2 (contract v1):
// every split axis, a microbatch's and a DP rank's tokens included, holds a power-of-two
// number of whole blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/train/config.hpp"

namespace lockstep::config {

// Every problem with cfg on `world_size` ranks, one line each (empty: valid). Each line
// names the keys and numbers involved and how to fix them.
std::vector<std::string> config_problems(const Config& cfg, int world_size);

// Throws a lockstep::Error listing every problem (one per line) if there is any.
void validate_or_throw(const Config& cfg, int world_size);

// The microbatches per step and DP rank (MicrobatchPlan's passes) of a DP group of `dp`; 0 when
// the global batch does not split so.
std::int64_t passes_per_rank(const Config& cfg, std::int64_t dp);

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
