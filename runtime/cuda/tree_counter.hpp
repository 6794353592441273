// The canonical sum of docs/design.md section 2 (runtime/csum.hpp) as host/device building blocks:
// a block chain from -0.0 and the post-order counter that combines leaf results by the tree T
// (runtime/tree_rule.hpp says how many merges follow each leaf). The CUDA kernels and
// their CPU tests use these same functions.
// Determinism contract: TreeCounter<N> with the tree's schedule gives, for leaves pushed left to
// right, exactly lockstep::tree_fold over them (older + newer on every merge), i.e. the bits of
// csum_detail::RowCounters and TreeCombiner. N values share one schedule (a C tile, a row
// group), so every value follows the same merge pattern.
#pragma once

#include <cstdint>

#include "runtime/hd.hpp"
#include "runtime/tree_rule.hpp"

namespace lockstep::hd {

inline constexpr float kNegZero = -0.0f;

// The counter's stack depth: a tree of at most 2^kMaxLeafBits leaves (with reduce_block 64: 2^23
// elements per reduced axis) is at most kMaxLeafBits + 2 levels high (two levels of rounding up
// when it is a tree over sequences, each a tree over blocks), plus the leaf being merged.
inline constexpr int kTreeLevels = 20;
inline constexpr int kMaxLeafBits = kTreeLevels - 3;

template <int N>
struct TreeCounter {
  float level[kTreeLevels][N];
  std::int64_t count = 0;
  int depth = 0;

  // Pushes one leaf per value, then merges `merges` times (AxisHD::merges_after).
  LOCKSTEP_HD void push(float (&leaf)[N], int merges) {
    for (int k = 0; k < merges; ++k) {
      --depth;
      LOCKSTEP_UNROLL
      for (int e = 0; e < N; ++e) leaf[e] = level[depth][e] + leaf[e];
    }
    LOCKSTEP_UNROLL
    for (int e = 0; e < N; ++e) level[depth][e] = leaf[e];
    ++depth;
    ++count;
  }
  // T over everything pushed (the root after a complete schedule); -0.0 when nothing was.
  LOCKSTEP_HD void result(float (&out)[N]) const {
    if (depth == 0) {
      LOCKSTEP_UNROLL
      for (int e = 0; e < N; ++e) out[e] = kNegZero;
      return;
    }
    LOCKSTEP_UNROLL
    for (int e = 0; e < N; ++e) out[e] = level[depth - 1][e];
    for (int l = depth - 2; l >= 0; --l) {
      LOCKSTEP_UNROLL
      for (int e = 0; e < N; ++e) out[e] = level[l][e] + out[e];
    }
  }
};

// The tree of `rule` over n elements with leaf(lo, hi) giving each leaf's value (leaves in
// order): runtime/csum.cpp's counted_sum.
template <class Leaf>
LOCKSTEP_HD inline float tree_sum(std::int64_t n, const SumRuleHD& rule, Leaf leaf) {
  const AxisHD axis(rule, n);
  TreeCounter<1> tc;
  for (std::int64_t l = 0; l < axis.count(); ++l) {
    const std::int64_t lo = axis.start(l);
    float acc[1] = {leaf(lo, lo + axis.len(l))};
    tc.push(acc, axis.merges_after(l));
  }
  float out[1];
  tc.result(out);
  return out[0];
}

// The canonical sum of the n terms term(0), term(1), ... under `rule` (each term evaluated once,
// in order): lockstep::csum's bits over the array of those terms.
template <class Term>
LOCKSTEP_HD inline float csum_of(std::int64_t n, const SumRuleHD& rule, Term term) {
  return tree_sum(n, rule, [term](std::int64_t lo, std::int64_t hi) {
    float acc = kNegZero;
    for (std::int64_t k = lo; k < hi; ++k) acc = acc + term(k);
    return acc;
  });
}

// The canonical dot product of a[0..n) and b[0..n) (leaves are FMA chains from -0.0):
// lockstep::cdot's bits.
LOCKSTEP_HD inline float cdot(const float* a, const float* b, std::int64_t n,
                              const SumRuleHD& rule) {
  return tree_sum(n, rule, [a, b](std::int64_t lo, std::int64_t hi) {
    float acc = kNegZero;
    for (std::int64_t k = lo; k < hi; ++k) acc = fma(a[k], b[k], acc);
    return acc;
  });
}

// csum(x[0], x[stride], ... n terms) under `rule`: lockstep::csum's bits.
LOCKSTEP_HD inline float csum(const float* x, std::int64_t n, const SumRuleHD& rule,
                              std::int64_t stride = 1) {
  return csum_of(n, rule, [x, stride](std::int64_t k) { return x[k * stride]; });
}

}  // namespace lockstep::hd
