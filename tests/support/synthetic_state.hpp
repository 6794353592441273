// Synthetic sharded training state for checkpoint tests and benchmarks: the pieces one rank
// holds of a list of logical tensors under a TP x DP layout, laid out as the trainer lays
// them out (launch/train/grad_sync.hpp): a TP box per rank (split on tp_dim, or replicated with
// TP rank 0 as the owner), the whole box on every DP replica with DP rank 0 owning it, or with
// ZeRO a padded flat segment per DP rank (the last ones short or empty), each its own owner.
// World rank r is TP rank r % tp, DP rank r / tp. Determinism contract: none (test data).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/state_piece.hpp"
#include "runtime/tensor.hpp"

namespace lockstep::testing {

struct SyntheticSpec {
  std::string name;
  Shape shape;
  int tp_dim;  // -1: replicated over TP (one owner)
};

struct SyntheticState {
  std::vector<std::vector<float>> store;  // the pieces' data
  std::vector<StatePiece> pieces;
  std::int64_t local_bytes = 0;  // float32 bytes held by this rank
};

// The pieces of `specs` held by world rank `rank` of `world_size` ranks; every element set to
// `init`.
inline SyntheticState make_synthetic_state(int rank, int world_size,
                                           const std::vector<SyntheticSpec>& specs, int tp,
                                           bool zero, float init) {
  SyntheticState st;
  const int tp_rank = rank % tp, dp_rank = rank / tp, dp = world_size / tp;
  st.store.reserve(specs.size());
  for (const SyntheticSpec& s : specs) {
    StatePiece p;
    p.name = s.name;
    p.global_shape = s.shape;
    p.box_offset = Shape(s.shape.size(), 0);
    p.box_shape = s.shape;
    if (s.tp_dim >= 0) {
      const auto d = static_cast<std::size_t>(s.tp_dim);
      p.box_shape[d] = s.shape[d] / tp;
      p.box_offset[d] = p.box_shape[d] * tp_rank;
    }
    const std::int64_t n = shape_numel(p.box_shape);
    const bool tp_owner = s.tp_dim >= 0 || tp_rank == 0;
    if (zero) {
      const std::int64_t seg = (n + dp - 1) / dp;  // padded segments: the last one is short
      p.flat_begin = std::min(n, seg * dp_rank);
      p.flat_end = std::min(n, seg * (dp_rank + 1));
      p.owner = tp_owner;
    } else {
      p.flat_begin = 0;
      p.flat_end = n;
      p.owner = tp_owner && dp_rank == 0;
    }
    st.store.emplace_back(static_cast<std::size_t>(p.size()), init);
    p.data = st.store.back().data();
    st.local_bytes += p.size() * 4;
    st.pieces.push_back(p);
  }
  return st;
}

}  // namespace lockstep::testing
