// The scalar post-order counter of the canonical sum (docs/design.md section 2) for R
// independent rows: push leaf results left to right, each followed by the merges the tree's
// schedule gives (runtime/reduce_tree.hpp: merges_after_leaf, LeafTable, MergeTable; older + newer);
// after a row's last leaf one value is left, T over its leaves. Used by csum, the softmax row
// sums and the attention rows.
// Determinism contract: the association is fixed by the tree shape and the leaf count alone.
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
  int n[R] = {};
  void push(int r, float v, int merges) {
    for (int k = 0; k < merges; ++k) v = value[r][--n[r]] + v;
    value[r][n[r]++] = v;
  }
  // The root after a complete schedule (the rest folded from the right otherwise).
  float result(int r) const {
    if (n[r] == 0) return kAdditiveIdentity;
    float acc = value[r][n[r] - 1];
    for (int i = n[r] - 2; i >= 0; --i) acc = value[r][i] + acc;
    return acc;
  }
};

}  // namespace
}  // namespace lockstep::csum_detail
