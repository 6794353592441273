#include "runtime/csum.hpp"
#include "runtime/csum_counter.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/error.hpp"

namespace lockstep {
namespace {

bool is_pow2(std::int64_t w) {
  return w > 0 && (w & (w - 1)) == 0;
}

// The hot entry points build their error messages only when a check fails.
void check_block(int block) {
  if (block < 1)
    fail("reduce_block " + std::to_string(block) + " must be >= 1",
         "set numerics.reduce_block to a positive number (default 64)");
}

}  // namespace

void BinaryCounter::push(const float* leaf) {
  push_subtree(leaf, 1);
}

void BinaryCounter::clear() {
  for (auto& lv : stack_) spare_.push_back(std::move(lv.values));
  stack_.clear();
  count_ = 0;
}

void BinaryCounter::push_subtree(const float* subtree, std::int64_t weight) {
  if (!is_pow2(weight))
    fail("BinaryCounter: subtree weight " + std::to_string(weight) + " is not a power of two");
  if (count_ % weight != 0)
    fail("BinaryCounter: subtree of weight " + std::to_string(weight) + " pushed after " +
             std::to_string(count_) + " leaves is not aligned",
         "merge equal power-of-two pieces in order (e.g. equal microbatches)");
  // Level buffers are recycled (spare_), so a training step allocates nothing here.
  Level lv{weight, {}};
  if (!spare_.empty()) {
    lv.values = std::move(spare_.back());
    spare_.pop_back();
  }
  lv.values.assign(subtree, subtree + len_);
  while (!stack_.empty() && stack_.back().weight == lv.weight) {
    Level& left = stack_.back();
    for (std::int64_t e = 0; e < len_; ++e) lv.values[e] = left.values[e] + lv.values[e];
    lv.weight *= 2;
    spare_.push_back(std::move(left.values));
    stack_.pop_back();
  }
  stack_.push_back(std::move(lv));
  count_ += weight;
}

void BinaryCounter::result(float* out) const {
  if (stack_.empty()) {
    std::fill(out, out + len_, kAdditiveIdentity);
    return;
  }
  std::copy(stack_.back().values.begin(), stack_.back().values.end(), out);
  for (int i = static_cast<int>(stack_.size()) - 2; i >= 0; --i)
    for (std::int64_t e = 0; e < len_; ++e) out[e] = stack_[i].values[e] + out[e];
}

float csum(const float* x, std::int64_t n, int block, std::int64_t stride) {
  check_block(block);
  csum_detail::RowCounters<1> counter;
  for (std::int64_t lo = 0; lo < n; lo += block) {
    const std::int64_t hi = std::min<std::int64_t>(n, lo + block);
    float acc = kAdditiveIdentity;
    for (std::int64_t k = lo; k < hi; ++k) acc += x[k * stride];
    counter.push(0, acc);
  }
  return counter.result(0);
}

float cdot(const float* a, const float* b, std::int64_t n, int block, std::int64_t stride_a,
           std::int64_t stride_b) {
  check_block(block);
  csum_detail::RowCounters<1> counter;
  for (std::int64_t lo = 0; lo < n; lo += block) {
    const std::int64_t hi = std::min<std::int64_t>(n, lo + block);
    float acc = kAdditiveIdentity;
    for (std::int64_t k = lo; k < hi; ++k) acc = std::fma(a[k * stride_a], b[k * stride_b], acc);
    counter.push(0, acc);
  }
  return counter.result(0);
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
  const int block = ctx.reduce_block;
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t j0 = c * kChunk;
    const std::int64_t w = std::min(kChunk, cols - j0);
    // Binary-counter stack of partial column sums: levels[l] holds a subtree of weight[l].
    float levels[64][kChunk];
    std::int64_t weight[64];
    float leaf[kChunk];
    int depth = 0;
    for (std::int64_t lo = 0; lo < rows; lo += block) {
      const std::int64_t hi = std::min<std::int64_t>(rows, lo + block);
      for (std::int64_t j = 0; j < w; ++j) leaf[j] = kAdditiveIdentity;
      for (std::int64_t i = lo; i < hi; ++i) {
        const float* row = X + i * ld + j0;
        for (std::int64_t j = 0; j < w; ++j) leaf[j] += row[j];
      }
      std::int64_t wt = 1;
      while (depth > 0 && weight[depth - 1] == wt) {
        const float* left = levels[--depth];
        for (std::int64_t j = 0; j < w; ++j) leaf[j] = left[j] + leaf[j];
        wt *= 2;
      }
      std::copy(leaf, leaf + w, levels[depth]);
      weight[depth++] = wt;
    }
    float* dst = out + j0;
    if (depth == 0) {
      std::fill(dst, dst + w, kAdditiveIdentity);
      continue;
    }
    std::copy(levels[depth - 1], levels[depth - 1] + w, dst);
    for (int l = depth - 2; l >= 0; --l)
      for (std::int64_t j = 0; j < w; ++j) dst[j] = levels[l][j] + dst[j];
  }
}

namespace {
void tree_sum_rec(std::span<const float* const> parts, std::int64_t n, float* out) {
  if (parts.size() == 1) {
    std::copy(parts[0], parts[0] + n, out);
    return;
  }
  std::size_t p = 1;
  while (p * 2 < parts.size()) p *= 2;
  std::vector<float> right(static_cast<std::size_t>(n));
  tree_sum_rec(parts.first(p), n, out);
  tree_sum_rec(parts.subspan(p), n, right.data());
  for (std::int64_t e = 0; e < n; ++e) out[e] = out[e] + right[e];
}
}  // namespace

void tree_sum(std::span<const float* const> parts, std::int64_t n, float* out) {
  if (parts.empty()) {
    std::fill(out, out + n, kAdditiveIdentity);
    return;
  }
  tree_sum_rec(parts, n, out);
}

}  // namespace lockstep
