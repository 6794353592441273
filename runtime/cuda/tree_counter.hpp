// The canonical sum of docs/design.md section 2 (runtime/csum.hpp) as host/device building blocks:
// a block chain from -0.0 and the binary counter that combines block results by the pairwise
// tree T. The CUDA kernels and their CPU tests use these same functions.
// Determinism contract: TreeCounter<N> gives, for leaves pushed left to right, exactly
// lockstep::tree_fold over them (older + newer on every merge, the rest folded from the
// right), i.e. the bits of csum_detail::RowCounters and BinaryCounter. N values share one
// count (a C tile, a row group), so every value follows the same merge pattern.
#pragma once

#include <cstdint>

#include "runtime/cuda/hd.hpp"

namespace lockstep::hd {

inline constexpr float kNegZero = -0.0f;

// At most 2^kTreeLevels leaves (with reduce_block 64: 2^26 elements per reduced axis).
inline constexpr int kTreeLevels = 20;

template <int N>
struct TreeCounter {
  float level[kTreeLevels][N];
  std::int64_t count = 0;
  int depth = 0;

  // Pushes one leaf per value. The merge pattern depends on `count` alone.
  LOCKSTEP_HD void push(float (&leaf)[N]) {
    for (std::int64_t c = count; c & 1; c >>= 1) {
      --depth;
      LOCKSTEP_UNROLL
      for (int e = 0; e < N; ++e) leaf[e] = level[depth][e] + leaf[e];
    }
    LOCKSTEP_UNROLL
    for (int e = 0; e < N; ++e) level[depth][e] = leaf[e];
    ++depth;
    ++count;
  }
  // T over everything pushed; -0.0 when nothing was.
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

// csum(x[0], x[stride], ... n terms) with block size `block`: lockstep::csum's bits.
LOCKSTEP_HD inline float csum(const float* x, std::int64_t n, int block, std::int64_t stride = 1) {
  TreeCounter<1> tc;
  for (std::int64_t lo = 0; lo < n; lo += block) {
    const std::int64_t hi = lo + block < n ? lo + block : n;
    float acc[1] = {kNegZero};
    for (std::int64_t k = lo; k < hi; ++k) acc[0] = acc[0] + x[k * stride];
    tc.push(acc);
  }
  float out[1];
  tc.result(out);
  return out[0];
}

}  // namespace lockstep::hd
