// The canonical tree of docs/design.md section 2: how a reduction axis is cut into leaves
// (block chains) and in which association the leaves are added. One rule, used by every
// reduction (csum, the canonical GEMM's K panels, the row kernels, the microbatch and rank
// combiners, the CUDA tile body).
//
// A tree is named by its shape (the versioned contract constant numerics.tree):
//   pow2     T(lo, hi) = T(lo, lo + p) + T(lo + p, hi), p the largest power of two < hi - lo
//            (contract v1; the token axis is flat: blocks of B run across sequences);
//   halving  the same with h = ceil((hi - lo) / 2) (contract v2, the default), and on the token
//            axis (SumRule::segment > 0) sequences are the leaves of the top tree, each a
//            halving tree over its own blocks (blocks restart at each sequence; the last
//            block of a sequence may be short).
// Both shapes agree for every power-of-two count. With halving, every cut at k * n / 2^j
// (2^j dividing n) is a node, so a power-of-two TP or DP that divides what it cuts always
// splits the axis into subtrees.
// Streaming form: the leaves of a tree, pushed left to right onto a stack, merge in post order;
// merges_after_leaf() says how many merges (top + newer) follow each leaf, which for pow2 is
// the binary counter's carry count (and the final right fold after the last leaf).
// Determinism contract: the association depends only on the shape and the leaf count (and the
// segment length), never on threads, ISA, tiling or sharding.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/tree_rule.hpp"
#include "runtime/enum_names.hpp"

namespace lockstep {

enum class TreeShape : std::uint8_t { pow2, halving };
constexpr std::array<EnumName<TreeShape>, 2> enum_names(TreeShape) {
  return {{{TreeShape::pow2, "pow2"}, {TreeShape::halving, "halving"}}};
}
inline constexpr TreeShape kDefaultTree = TreeShape::halving;

// Everything below is defined out of line (runtime/reduce_tree.cpp, built without ISA flags) on
// purpose: the ISA-specific translation units (*_avx2.cpp, *_avx512.cpp) call it, and an inline
// copy compiled with their flags could be the one the linker keeps for every caller.

// The size of the left child of a node over n >= 2 leaves.
std::int64_t tree_split(TreeShape shape, std::int64_t n);

// Merges that follow leaf i (0 <= i < n) of the n-leaf tree: the internal nodes whose last
// leaf is i. After leaf n - 1 the whole stack folds into the root.
int merges_after_leaf(TreeShape shape, std::int64_t n, std::int64_t i);

// Merges that follow pushing the node [a, b) as one pre-merged value (the internal nodes that
// strictly contain it and end at b), or -1 if [a, b) is not a node of the n-leaf tree.
int merges_after_node(TreeShape shape, std::int64_t n, std::int64_t a, std::int64_t b);

// The end of the largest node that starts at leaf a, ends at or before b and covers at most
// max_leaves leaves (at least one leaf); -1 if no node starts at a.
std::int64_t largest_node_from(TreeShape shape, std::int64_t n, std::int64_t a, std::int64_t b,
                               std::int64_t max_leaves);

// How one reduction axis is blocked and combined.
struct SumRule {
  int block = 64;                      // B: elements per leaf chain (numerics.reduce_block)
  TreeShape tree = kDefaultTree;       // numerics.tree
  std::int64_t segment = 0;            // > 0 (halving only): the axis is whole sequences of this
                                       // many elements (the token axis); 0: one flat axis
  // The same rule over an axis made of sequences of `len` elements: segmented under halving,
  // flat (today's token axis) under pow2.
  SumRule over_sequences(std::int64_t len) const;
};

// The leaves of an axis of n elements under a rule: leaf i covers [start(i), start(i) + len(i)).
class AxisLeaves {
 public:
  // Throws lockstep::Error if block < 1 or n is not a whole number of segments.
  AxisLeaves(const SumRule& rule, std::int64_t n);
  std::int64_t count() const;
  std::int64_t start(std::int64_t i) const;
  std::int64_t len(std::int64_t i) const;
  // Merges that follow leaf i in post order (the tree over sequences, then each sequence's).
  int merges_after(std::int64_t i) const;
  // The subtree of whole leaves [lo, hi) pushed pre-merged: the merges that follow it, or -1
  // if it is not a node of the axis' tree.
  int merges_after_node(std::int64_t lo, std::int64_t hi) const;
  // The end of the largest node that starts at leaf lo (a node boundary) and covers at most
  // max_leaves leaves (at least one).
  std::int64_t node_end(std::int64_t lo, std::int64_t max_leaves) const;
  // Leaves per sequence and the number of sequences (1 and count() for a flat axis).
  std::int64_t leaves_per_segment() const;
  std::int64_t segments() const;
  TreeShape shape() const { return shape_; }

 private:
  hd::AxisHD hd_view() const;  // the arithmetic, shared with the CUDA bodies
  TreeShape shape_;
  std::int64_t block_, seg_len_, per_seg_, segments_;
};

// An axis' leaves as flat arrays for the kernels, computed once per call: leaf i covers
// [bound[i], bound[i + 1]) and is followed by merges[i] merges in post order.
class LeafTable {
 public:
  explicit LeafTable(const AxisLeaves& axis);
  std::int64_t count() const { return static_cast<std::int64_t>(merges_.size()); }
  const std::int64_t* bounds() const { return bound_.data(); }
  const std::uint8_t* merges() const { return merges_.data(); }

 private:
  std::vector<std::int64_t> bound_;
  std::vector<std::uint8_t> merges_;
};

// merges_after_leaf(shape, n, i) for every n in [1, max_leaves] and i < n, computed once per
// call for kernels whose rows have different lengths (the causal attention rows).
class MergeTable {
 public:
  MergeTable(TreeShape shape, std::int64_t max_leaves);
  // The row of the n-leaf tree: merges after each of its n leaves.
  const std::uint8_t* row(std::int64_t n) const { return m_.data() + n * (n - 1) / 2; }

 private:
  std::vector<std::uint8_t> m_;
};

// The rule as the CUDA bodies take it (runtime/tree_rule.hpp).
hd::SumRuleHD hd_rule(const SumRule& rule);

// T over leaf values in the tree's association, written out recursively (the literal
// reference the streaming forms are tested against). Returns -0.0 for no leaves.
float fold_leaves(const AxisLeaves& axis, std::span<const float> leaves);

}  // namespace lockstep
