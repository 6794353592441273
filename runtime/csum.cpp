#include "runtime/csum.hpp"
#include "runtime/csum_counter.hpp"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>

#include "runtime/enum_names.hpp"
#include "runtime/error.hpp"

namespace lockstep {

void TreeCombiner::clear() {
  for (float* lv : stack_)
    if (lv != root_) spare_.push_back(lv);
  stack_.clear();
  count_ = 0;
  pending_ = 0;
}

void TreeCombiner::set_root_buffer(float* root) {
  if (count_ != 0)
    fail("TreeCombiner::set_root_buffer after " + std::to_string(count_) + " leaves",
         "set the root buffer right after clear()");
  root_ = root;
}

std::int64_t TreeCombiner::buffers() const {
  const bool root_held = root_ != nullptr && !stack_.empty() && stack_[0] == root_;
  return std::ssize(own_) + (root_held ? 1 : 0);
}

int TreeCombiner::merges_of(std::int64_t width) const {
  check(pending_ == 0, "TreeCombiner: a new node while a streamed one is open",
        "call close_node() after the last merge_part()");
  const int merges = merges_after_node(shape_, total_, count_, count_ + width);
  if (merges < 0)
    fail("TreeCombiner: leaves [" + std::to_string(count_) + ", " + std::to_string(count_ + width) +
             ") are not a node of the " + std::string(enum_name(shape_)) + " tree over " +
             std::to_string(total_) + " leaves",
         "push the nodes of the tree in order (launch/train splits microbatches at its nodes)");
  return merges;
}

// A buffer for a new stack level: the caller's root buffer at the bottom, else a recycled one
// (so a training step allocates nothing here after its first).
float* TreeCombiner::new_level() {
  float* lv = nullptr;
  if (stack_.empty() && root_) {
    lv = root_;
  } else if (!spare_.empty()) {
    lv = spare_.back();
    spare_.pop_back();
  } else {
    own_.emplace_back(static_cast<std::size_t>(len_));
    lv = own_.back().data();
  }
  stack_.push_back(lv);
  return lv;
}

float* TreeCombiner::open_node(std::int64_t width) {
  const int merges = merges_of(width);
  count_ += width;
  if (merges == 0) return new_level();
  pending_ = merges;
  pending_n_ = 0;
  return nullptr;
}

namespace {
constexpr std::int64_t kMergeBlock = 1024;  // elements per pass through an L1 buffer

// dst[i] = L[merges-1][at+i] + (... + (L[0][at+i] + part[i])) for i < n (part null: +0.0),
// n <= kMergeBlock. One level at a time over a block held in L1, so that the adds vectorize (a
// loop over the levels inside the loop over elements did not); each element's adds and their
// order are those of that loop. dst may be L[merges-1] + at: it is written last.
void merge_block(float* dst, const float* const* L, std::int64_t at, int merges, const float* part,
                 std::int64_t n) {
  alignas(64) float v[kMergeBlock];
  const float* l0 = L[0] + at;
  if (part) {
    for (std::int64_t i = 0; i < n; ++i) v[i] = l0[i] + part[i];
  } else {
    for (std::int64_t i = 0; i < n; ++i) v[i] = l0[i] + 0.0f;
  }
  for (int k = 1; k < merges; ++k) {
    const float* l = L[k] + at;
    for (std::int64_t i = 0; i < n; ++i) v[i] = l[i] + v[i];
  }
  std::copy_n(v, n, dst);
}
}  // namespace

// v = L_1 + v, then L_2 + (L_1 + v), ... (L_1 the newest level): each element's merges in
// one pass, written into the oldest level they fold, which stays on the stack.
void TreeCombiner::merge_part(std::int64_t offset, const float* part, std::int64_t n) {
  if (pending_ == 0 || offset < 0 || n < 0 || offset + n > len_)
    fail("TreeCombiner::merge_part: elements [" + std::to_string(offset) + ", " +
             std::to_string(offset + n) + ") of " + std::to_string(len_) +
             (pending_ > 0 ? "" : " with no streamed node open"),
         "open_node() returned nullptr first; pieces lie inside [0, len)");
  const std::size_t top = stack_.size();
  const int merges = pending_;
  std::array<const float*, 64> left{};  // merges <= the stack's depth <= log2(leaves) + 1
  for (int k = 0; k < merges; ++k) left[k] = stack_[top - 1 - k] + offset;
  float* dst = stack_[top - merges] + offset;
  const std::int64_t blocks = (n + kMergeBlock - 1) / kMergeBlock;
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1 && n >= 65536)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t e = b * kMergeBlock;
    merge_block(dst + e, left.data(), e, merges, part ? part + e : nullptr,
                std::min(kMergeBlock, n - e));
  }
  pending_n_ += n;
}

void TreeCombiner::close_node() {
  if (pending_ == 0 || pending_n_ != len_)
    fail("TreeCombiner::close_node: " + std::to_string(pending_n_) + " of " + std::to_string(len_) +
             " elements merged",
         "merge every element of the node once before closing it");
  for (int k = 1; k < pending_; ++k) {
    spare_.push_back(stack_.back());
    stack_.pop_back();
  }
  pending_ = 0;
}

void TreeCombiner::push_node(const float* node, std::int64_t width) {
  const std::int64_t n = len_;
  if (float* dst = open_node(width)) {  // a new level: the node's own copy
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1 && n >= 65536)
    for (std::int64_t e = 0; e < n; ++e) dst[e] = node[e];
    return;
  }
  merge_part(0, node, n);
  close_node();
}

const float* TreeCombiner::root() const {
  if (count_ != total_ || stack_.size() != 1 || pending_ > 0)
    fail("TreeCombiner: result after " + std::to_string(count_) + " of " + std::to_string(total_) +
         " leaves");
  return stack_.back();
}

void TreeCombiner::result(float* out) const {
  if (stack_.empty() && count_ == 0) {
    std::fill(out, out + len_, kAdditiveIdentity);
    return;
  }
  const float* r = root();
  if (r != out) std::copy_n(r, len_, out);
}

std::int64_t TreeCombiner::peak_levels(TreeShape shape, std::int64_t leaves,
                                       std::span<const std::int64_t> widths) {
  std::int64_t depth = 0, peak = 0, at = 0;
  for (std::int64_t w : widths) {
    const int merges = merges_after_node(shape, leaves, at, at + w);
    check(merges >= 0, "TreeCombiner::peak_levels: leaves [" + std::to_string(at) + ", " +
                           std::to_string(at + w) + ") are not a node of the tree");
    at += w;
    depth = merges == 0 ? depth + 1 : depth - (merges - 1);
    peak = std::max(peak, depth);
  }
  return peak;
}

namespace {
// One leaf chain per leaf of the axis, merged in post order: the literal csum / cdot.
template <class Leaf>
float counted_sum(std::int64_t n, const SumRule& rule, Leaf leaf) {
  const AxisLeaves axis(rule, n);
  csum_detail::RowCounters<1> counter;
  for (std::int64_t i = 0; i < axis.count(); ++i)
    counter.push(0, leaf(axis.start(i), axis.start(i) + axis.len(i)), axis.merges_after(i));
  return counter.result(0);
}
}  // namespace

float csum(const float* x, std::int64_t n, const SumRule& rule, std::int64_t stride) {
  return counted_sum(n, rule, [&](std::int64_t lo, std::int64_t hi) {
    float acc = kAdditiveIdentity;
    for (std::int64_t k = lo; k < hi; ++k) acc += x[k * stride];
    return acc;
  });
}

float cdot(const float* a, const float* b, std::int64_t n, const SumRule& rule,
           std::int64_t stride_a, std::int64_t stride_b) {
  return counted_sum(n, rule, [&](std::int64_t lo, std::int64_t hi) {
    float acc = kAdditiveIdentity;
    for (std::int64_t k = lo; k < hi; ++k) acc = std::fma(a[k * stride_a], b[k * stride_b], acc);
    return acc;
  });
}

void csum_rows(const KernelCtx& ctx, const float* X, std::int64_t rows, std::int64_t cols,
               std::int64_t ld, float* out) {
  validate(ctx);
  if (ld < cols)
    fail("csum_rows: leading dimension " + std::to_string(ld) + " < cols " + std::to_string(cols));
  // Columns are independent sums, so vectorizing over j keeps each column's chain and tree
  // exactly as written (no reassociation: -ffp-contract=off and no -ffast-math).
  constexpr std::int64_t kChunk = 256;
  const std::int64_t chunks = (cols + kChunk - 1) / kChunk;
  const LeafTable leaves(AxisLeaves(ctx.rule(), rows));
  const std::int64_t* bound = leaves.bounds();
  const std::uint8_t* merges = leaves.merges();
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t j0 = c * kChunk;
    const std::int64_t w = std::min(kChunk, cols - j0);
    // Post-order stack of partial column sums.
    float levels[64][kChunk];
    float leaf[kChunk];
    int depth = 0;
    for (std::int64_t l = 0; l < leaves.count(); ++l) {
      const std::int64_t lo = bound[l], hi = bound[l + 1];
      for (std::int64_t j = 0; j < w; ++j) leaf[j] = kAdditiveIdentity;
      for (std::int64_t i = lo; i < hi; ++i) {
        const float* row = X + i * ld + j0;
        for (std::int64_t j = 0; j < w; ++j) leaf[j] += row[j];
      }
      for (int k = merges[l]; k > 0; --k) {
        const float* left = levels[--depth];
        for (std::int64_t j = 0; j < w; ++j) leaf[j] = left[j] + leaf[j];
      }
      std::copy(leaf, leaf + w, levels[depth++]);
    }
    float* dst = out + j0;
    if (depth == 0)
      std::fill(dst, dst + w, kAdditiveIdentity);
    else
      std::copy(levels[0], levels[0] + w, dst);
  }
}

namespace csum_detail {
// runtime/csum_avx512.cpp
void row_sums16_avx512(const float* X, std::int64_t ld, const std::int64_t* bound,
                       const std::uint8_t* merges, std::int64_t leaves, float* out);
}  // namespace csum_detail

RowCsums::RowCsums(const KernelCtx& ctx, std::int64_t cols)
    : ctx_(ctx), cols_(cols), leaves_((validate(ctx), AxisLeaves(ctx.rule(), cols))) {
  blocks16_ = ctx.isa == Isa::avx512;
  for (std::int64_t l = 0; l <= leaves_.count() && blocks16_; ++l)
    blocks16_ = leaves_.bounds()[l] % 16 == 0;
}

void RowCsums::operator()(const float* X, std::int64_t rows, std::int64_t ld, float* out) const {
  if (ld < cols_)
    fail("RowCsums: leading dimension " + std::to_string(ld) + " < cols " + std::to_string(cols_));
  const std::int64_t groups = blocks16_ ? rows / 16 : 0;
#pragma omp parallel for num_threads(ctx_.threads) schedule(static) if (groups > 1)
  for (std::int64_t g = 0; g < groups; ++g)
    csum_detail::row_sums16_avx512(X + g * 16 * ld, ld, leaves_.bounds(), leaves_.merges(),
                                   leaves_.count(), out + g * 16);
  const SumRule rule = ctx_.rule();
  for (std::int64_t i = groups * 16; i < rows; ++i) out[i] = csum(X + i * ld, cols_, rule);
}

namespace {
void tree_sum_rec(TreeShape shape, std::span<const float* const> parts, std::int64_t n, float* out) {
  if (parts.size() == 1) {
    std::copy(parts[0], parts[0] + n, out);
    return;
  }
  const auto h = static_cast<std::size_t>(tree_split(shape, static_cast<std::int64_t>(parts.size())));
  std::vector<float> right(static_cast<std::size_t>(n));
  tree_sum_rec(shape, parts.first(h), n, out);
  tree_sum_rec(shape, parts.subspan(h), n, right.data());
  for (std::int64_t e = 0; e < n; ++e) out[e] = out[e] + right[e];
}
}  // namespace

void tree_sum(TreeShape shape, std::span<const float* const> parts, std::int64_t n, float* out) {
  if (parts.empty()) {
    std::fill(out, out + n, kAdditiveIdentity);
    return;
  }
  tree_sum_rec(shape, parts, n, out);
}

}  // namespace lockstep
