// A rank's local piece of one logical float32 tensor of training state (parameters, reduced
// gradients, AdamW moments): the one description that checkpoints (save, load, reshard)
// and verify (fingerprints over logical indices) share, so neither needs to know TP or ZeRO.
//
// A piece is a contiguous range [flat_begin, flat_end) of the row-major flattening of a
// box (the TP shard: box_offset/box_shape inside global_shape). Without ZeRO the range is
// the whole box; under ZeRO-1 it is this DP rank's segment of the box. `owner` marks the
// one rank that counts the piece (in fingerprint sums) and writes it (in checkpoints):
// replicas of the same piece on other ranks have owner == false, so summing or writing
// the owner pieces of all ranks covers every logical element exactly once.
// Determinism contract: pure index arithmetic; for_each_run visits the maximal contiguous
// runs of logical indices in increasing local order, independent of anything but the
// piece's geometry.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor.hpp"

namespace lockstep {

struct StatePiece {
  std::string name;             // canonical logical name: "param/<p>", "adam_m/<p>", ...
  Shape global_shape;           // logical (unsharded) shape
  Shape box_offset;             // the box's first logical index per dim
  Shape box_shape;              // the box's shape (== global_shape when not TP-sharded)
  std::int64_t flat_begin = 0;  // range of the box's row-major flattening held here
  std::int64_t flat_end = 0;    //   [flat_begin, flat_end)
  float* data = nullptr;        // [flat_end - flat_begin] floats
  bool owner = true;            // counts / writes this piece (one owner per element)

  std::int64_t size() const { return flat_end - flat_begin; }
};

// A piece covering a whole local tensor whose ShardDesc places it in its logical tensor.
StatePiece piece_of(std::string name, Tensor& local, bool owner);

// Throws lockstep::Error (naming the piece) unless the box lies inside global_shape and
// 0 <= flat_begin <= flat_end <= numel(box_shape).
void check_piece(const StatePiece& p);

// Calls f(logical_index, local_index, length) for each maximal run of consecutive logical
// row-major indices of the piece: elements data[local_index .. local_index + length) are
// the logical elements [logical_index, logical_index + length).
template <class F>
void for_each_run(const StatePiece& p, F&& f) {
  const std::size_t rank = p.box_shape.size();
  if (p.flat_end <= p.flat_begin) return;
  if (rank == 0) {
    f(std::int64_t{0}, std::int64_t{0}, std::int64_t{1});
    return;
  }
  const std::int64_t row = p.box_shape[rank - 1];
  // Global row-major strides.
  std::vector<std::int64_t> gstride(rank, 1);
  for (std::size_t d = rank - 1; d-- > 0;) gstride[d] = gstride[d + 1] * p.global_shape[d + 1];
  std::int64_t k = p.flat_begin;
  while (k < p.flat_end) {
    // Multi-index of box element k, then its logical index.
    std::int64_t rem = k, logical = 0;
    for (std::size_t d = rank; d-- > 0;) {
      const std::int64_t idx = rem % p.box_shape[d];
      rem /= p.box_shape[d];
      logical += (idx + p.box_offset[d]) * gstride[d];
    }
    const std::int64_t in_row = k % row;
    const std::int64_t len = std::min(row - in_row, p.flat_end - k);
    f(logical, k - p.flat_begin, len);
    k += len;
  }
}

}  // namespace lockstep
