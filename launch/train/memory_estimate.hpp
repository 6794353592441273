// The memory a training job will need per rank, estimated from the config before anything
// starts (docs/design.md section 8, "memory per stage"): for each pipeline stage, one rank's
// weights, gradient buffers (the model's terms, which are the reducer's flat buffer without
// ZeRO, and the microbatch combiner), AdamW moments (divided over DP with ZeRO-1, with its
// allgather buffers), activations (the forward state of one microbatch, model/memory_footprint.hpp,
// times the microbatches the schedule keeps in flight on that stage) and scratch (the backward's,
// the GEMMs' per-thread buffers at their largest over the stage's GEMMs, and the DP and TP
// groups' tree-collective buffers in invariant mode).
// Not counted: the process itself (binary, libraries, Open MPI and its buffers, the allocator;
// kProcessBytes) and the data loader's token buffers.
// Determinism contract: none needed (bookkeeping; nothing here touches a value).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/train/config.hpp"

namespace lockstep::config {

// What a rank's process holds besides the estimate: peak RSS minus the estimate measured 26-45
// MiB on tiny and bench-small (docs/benchmarks.md, "Pipeline parallelism").
constexpr std::int64_t kProcessBytes = std::int64_t{50} << 20;

struct StageMemory {
  int stage = 0;
  std::int64_t weights = 0, gradients = 0, optimizer = 0, activations = 0, scratch = 0;  // bytes
  std::int64_t slots = 1;             // microbatches whose activations are held at once
  std::int64_t microbatch_bytes = 0;  // the forward state of one microbatch
  std::int64_t total() const { return weights + gradients + optimizer + activations + scratch; }
};

// One entry per pipeline stage (its TP and DP ranks are alike); empty when cfg is not valid on
// `world_size` ranks (config_problems).
std::vector<StageMemory> memory_estimate(const Config& cfg, int world_size);

// The estimate's bytes over all `world_size` ranks (each stage's ranks alike).
std::int64_t all_ranks_bytes(const std::vector<StageMemory>& est, int world_size);

// "memory per rank (estimate): 1.52 GiB = weights 475 MiB + gradients ..." (one stage) or one
// line per stage, then the sum over all ranks.
std::vector<std::string> memory_lines(const Config& cfg, int world_size);

}  // namespace lockstep::config
