#include "runtime/reduce_tree.hpp"

#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/tree_rule.hpp"

namespace lockstep {

namespace {
bool halving(TreeShape shape) {
  return shape == TreeShape::halving;
}
}  // namespace

std::int64_t tree_split(TreeShape shape, std::int64_t n) {
  return hd::tree_split(halving(shape), n);
}

int merges_after_leaf(TreeShape shape, std::int64_t n, std::int64_t i) {
  if (shape == TreeShape::pow2)  // the binary counter: carries, and the right fold at the end
    return i + 1 < n ? std::countr_one(static_cast<std::uint64_t>(i))
                     : std::popcount(static_cast<std::uint64_t>(i));
  return hd::merges_after_leaf(true, n, i);
}

int merges_after_node(TreeShape shape, std::int64_t n, std::int64_t a, std::int64_t b) {
  return hd::merges_after_node(halving(shape), n, a, b);
}

std::int64_t largest_node_from(TreeShape shape, std::int64_t n, std::int64_t a, std::int64_t b,
                               std::int64_t max_leaves) {
  return hd::largest_node_from(halving(shape), n, a, b, max_leaves);
}

SumRule SumRule::over_sequences(std::int64_t len) const {
  SumRule r = *this;
  r.segment = tree == TreeShape::halving ? len : 0;
  return r;
}

namespace {
hd::AxisHD axis_hd(const SumRule& rule, std::int64_t n) {
  return hd::AxisHD(hd_rule(rule), n);
}
}  // namespace

hd::SumRuleHD hd_rule(const SumRule& rule) {
  return hd::SumRuleHD{rule.block, rule.tree == TreeShape::halving, rule.segment};
}

AxisLeaves::AxisLeaves(const SumRule& rule, std::int64_t n) : shape_(rule.tree) {
  if (rule.block < 1)
    fail("reduce_block " + std::to_string(rule.block) + " must be >= 1",
         "set numerics.reduce_block to a positive number (default 64)");
  if (rule.segment > 0 && rule.tree != TreeShape::halving)
    fail("a token axis of sequences needs the halving tree", "use SumRule::over_sequences");
  if (rule.segment > 0 && n % rule.segment != 0)
    fail("a reduction over " + std::to_string(n) + " tokens is not a whole number of sequences of " +
             std::to_string(rule.segment),
         "token reductions run over whole sequences");
  const hd::AxisHD a = axis_hd(rule, n);
  block_ = a.block, seg_len_ = a.seg_len, per_seg_ = a.per_seg, segments_ = a.segments;
}

hd::AxisHD AxisLeaves::hd_view() const {
  return hd::AxisHD(hd::SumRuleHD{static_cast<int>(block_), shape_ == TreeShape::halving, seg_len_},
                    segments_ * seg_len_);
}

std::int64_t AxisLeaves::count() const {
  return segments_ * per_seg_;
}
std::int64_t AxisLeaves::leaves_per_segment() const {
  return per_seg_;
}
std::int64_t AxisLeaves::segments() const {
  return segments_;
}
std::int64_t AxisLeaves::start(std::int64_t i) const {
  return hd_view().start(i);
}
std::int64_t AxisLeaves::len(std::int64_t i) const {
  return hd_view().len(i);
}
int AxisLeaves::merges_after(std::int64_t i) const {
  if (shape_ == TreeShape::pow2)  // flat: the binary counter's closed form
    return lockstep::merges_after_leaf(shape_, count(), i);
  return hd_view().merges_after(i);
}
int AxisLeaves::merges_after_node(std::int64_t lo, std::int64_t hi) const {
  return hd_view().merges_after_node(lo, hi);
}
std::int64_t AxisLeaves::node_end(std::int64_t lo, std::int64_t max_leaves) const {
  return hd_view().node_end(lo, count(), max_leaves);
}

LeafTable::LeafTable(const AxisLeaves& axis) {
  const std::int64_t n = axis.count();
  bound_.resize(static_cast<std::size_t>(n + 1));
  merges_.resize(static_cast<std::size_t>(n));
  bound_[0] = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    bound_[static_cast<std::size_t>(i + 1)] = axis.start(i) + axis.len(i);
    merges_[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(axis.merges_after(i));
  }
}

MergeTable::MergeTable(TreeShape shape, std::int64_t max_leaves) {
  const std::int64_t n = std::max<std::int64_t>(max_leaves, 0);
  m_.resize(static_cast<std::size_t>(n * (n + 1) / 2));
  for (std::int64_t k = 1; k <= n; ++k)
    for (std::int64_t i = 0; i < k; ++i)
      m_[static_cast<std::size_t>(k * (k - 1) / 2 + i)] =
          static_cast<std::uint8_t>(merges_after_leaf(shape, k, i));
}

namespace {
float fold_range(TreeShape shape, std::span<const float> v) {
  return tree_fold(shape, v, [](float x, float y) { return x + y; });
}
}  // namespace

float fold_leaves(const AxisLeaves& axis, std::span<const float> leaves) {
  if (leaves.empty()) return -0.0f;
  if (static_cast<std::int64_t>(leaves.size()) != axis.count())
    fail("fold_leaves: " + std::to_string(leaves.size()) + " leaves for an axis of " +
         std::to_string(axis.count()));
  const auto per = static_cast<std::size_t>(axis.leaves_per_segment());
  std::vector<float> seqs;
  for (std::size_t s = 0; s < leaves.size(); s += per)
    seqs.push_back(fold_range(axis.shape(), leaves.subspan(s, per)));
  return fold_range(axis.shape(), seqs);
}

}  // namespace lockstep
