// The integer rule of the canonical tree (runtime/reduce_tree.hpp) as host/device functions: the
// split of a node, and the merges that follow a leaf or a pushed node in post order. The CPU's
// runtime/reduce_tree.cpp and the CUDA bodies (tree_counter.hpp, row_ops_core.hpp) both use
// these, so the two sides cannot drift apart.
// halving = false is the pow2 tree (split at the largest power of two below the length), true
// the halving tree (split at ceil(length / 2)).
// Determinism contract: pure integer functions of their arguments.
#pragma once

#include <cstdint>

#include "runtime/hd.hpp"

namespace lockstep::hd {

// The size of the left child of a node over n >= 2 leaves.
LOCKSTEP_HD inline std::int64_t tree_split(bool halving, std::int64_t n) {
  if (halving) return (n + 1) / 2;
  std::int64_t p = 1;
  while (p * 2 < n) p *= 2;
  return p;
}

// Merges that follow leaf i (0 <= i < n) of the n-leaf tree: the internal nodes whose last leaf
// is i. After leaf n - 1 the whole stack folds into the root.
LOCKSTEP_HD inline int merges_after_leaf(bool halving, std::int64_t n, std::int64_t i) {
  int m = 0;
  std::int64_t lo = 0, hi = n;
  while (hi - lo > 1) {
    if (hi == i + 1) ++m;
    const std::int64_t mid = lo + tree_split(halving, hi - lo);
    if (i < mid)
      hi = mid;
    else
      lo = mid;
  }
  return m;
}

// Merges that follow pushing the node [a, b) pre-merged (the internal nodes that strictly
// contain it and end at b), or -1 if [a, b) is not a node of the n-leaf tree.
LOCKSTEP_HD inline int merges_after_node(bool halving, std::int64_t n, std::int64_t a,
                                         std::int64_t b) {
  if (a < 0 || b > n || a >= b) return -1;
  int m = 0;
  std::int64_t lo = 0, hi = n;
  while (lo != a || hi != b) {
    if (hi - lo <= 1) return -1;
    if (hi == b) ++m;
    const std::int64_t mid = lo + tree_split(halving, hi - lo);
    if (b <= mid)
      hi = mid;
    else if (a >= mid)
      lo = mid;
    else
      return -1;
  }
  return m;
}

// The end of the largest node that starts at leaf a, ends at or before b and covers at most
// max_leaves leaves (at least one leaf); -1 if no node starts at a.
LOCKSTEP_HD inline std::int64_t largest_node_from(bool halving, std::int64_t n, std::int64_t a,
                                                  std::int64_t b, std::int64_t max_leaves) {
  std::int64_t lo = 0, hi = n;
  while (true) {
    if (lo == a && hi <= b && hi - lo <= max_leaves) return hi;
    if (hi - lo <= 1) return -1;
    const std::int64_t mid = lo + tree_split(halving, hi - lo);
    if (a < mid)
      hi = mid;
    else
      lo = mid;
  }
}

// How one reduction axis is blocked and combined (lockstep::SumRule, without its enum): block
// B, the shape, and segment > 0 for a token axis of whole sequences (halving only).
struct SumRuleHD {
  int block;
  bool halving;
  std::int64_t segment;
};

// The leaves of an axis of n elements (lockstep::AxisLeaves' arithmetic): sequences of
// seg_len elements (one sequence of n for a flat axis), each cut into per_seg leaves of B (the
// last may be short); the tree is the one over sequences with each sequence's tree below.
struct AxisHD {
  bool halving;
  std::int64_t block, seg_len, per_seg, segments;

  LOCKSTEP_HD AxisHD(const SumRuleHD& r, std::int64_t n)
      : halving(r.halving),
        block(r.block),
        seg_len(r.segment > 0 ? r.segment : n),
        per_seg(n == 0 ? 1 : (seg_len + r.block - 1) / r.block),
        segments(n == 0 ? 0 : n / seg_len) {}
  LOCKSTEP_HD std::int64_t count() const { return segments * per_seg; }
  LOCKSTEP_HD std::int64_t start(std::int64_t i) const {
    return (i / per_seg) * seg_len + (i % per_seg) * block;
  }
  LOCKSTEP_HD std::int64_t len(std::int64_t i) const {
    const std::int64_t b = i % per_seg;
    return b + 1 < per_seg ? block : seg_len - b * block;
  }
  LOCKSTEP_HD int merges_after(std::int64_t i) const {
    const std::int64_t s = i / per_seg, b = i % per_seg;
    int m = merges_after_leaf(halving, per_seg, b);
    if (b + 1 == per_seg) m += merges_after_leaf(halving, segments, s);
    return m;
  }
  // The leaves [lo, hi) pushed pre-merged: the merges that follow, or -1 if not a node.
  LOCKSTEP_HD int merges_after_node(std::int64_t lo, std::int64_t hi) const {
    if (lo < 0 || hi > count() || lo >= hi) return -1;
    const std::int64_t s0 = lo / per_seg, s1 = (hi - 1) / per_seg;
    if (s0 != s1) {  // whole sequences, a node of the tree over sequences
      if (lo % per_seg != 0 || hi % per_seg != 0) return -1;
      return hd::merges_after_node(halving, segments, s0, s1 + 1);
    }
    const std::int64_t b0 = lo - s0 * per_seg, b1 = hi - s0 * per_seg;
    const int in_seq = hd::merges_after_node(halving, per_seg, b0, b1);
    if (in_seq < 0) return -1;
    return b1 == per_seg ? in_seq + hd::merges_after_node(halving, segments, s0, s0 + 1) : in_seq;
  }
  // The end of the largest node that starts at leaf lo (a node boundary), ends at or before
  // `end` and covers at most max_leaves leaves (at least one).
  LOCKSTEP_HD std::int64_t node_end(std::int64_t lo, std::int64_t end,
                                    std::int64_t max_leaves) const {
    const std::int64_t s = lo / per_seg, b = lo % per_seg;
    if (b == 0 && per_seg <= max_leaves && end - lo >= per_seg) {  // whole sequences
      const std::int64_t most = max_leaves / per_seg;
      return largest_node_from(halving, segments, s, end / per_seg, most) * per_seg;
    }
    const std::int64_t seq_end = end - s * per_seg < per_seg ? end - s * per_seg : per_seg;
    return s * per_seg + largest_node_from(halving, per_seg, b, seq_end, max_leaves);
  }
};

}  // namespace lockstep::hd
