// The scalar binary counter of the canonical sum (docs/design.md section 2) for R independent
// rows: push block results left to right; equal-weight neighbours merge as soon as both
// exist (older + newer), and result() folds what is left from the right, which equals the
// pairwise tree T over the pushed leaves. Used by csum, the LayerNorm/softmax row sums and
// the attention rows.
// Determinism contract: the association is fixed by the leaf count alone.
// It lives in an anonymous namespace on purpose: ISA-specific translation units
// (*_avx512.cpp) include it too, and a shared inline definition compiled with AVX-512 flags
// could be picked by the linker for the scalar path.
#pragma once

#include <cstdint>

#include "runtime/csum.hpp"

namespace lockstep::csum_detail {
namespace {

template <int R>
struct RowCounters {
  float value[R][64];
  std::int64_t weight[R][64];
  int n[R] = {};
  void push(int r, float v) {
    std::int64_t w = 1;
    while (n[r] > 0 && weight[r][n[r] - 1] == w) {
      v = value[r][--n[r]] + v;
      w *= 2;
    }
    value[r][n[r]] = v;
    weight[r][n[r]++] = w;
  }
  float result(int r) const {
    if (n[r] == 0) return kAdditiveIdentity;
    float acc = value[r][n[r] - 1];
    for (int i = n[r] - 2; i >= 0; --i) acc = value[r][i] + acc;
    return acc;
  }
};

}  // namespace
}  // namespace lockstep::csum_detail
