// The per-thread body of the invariant-mode GEMM kernel (runtime/cuda/gemm_canonical.cu),
// written once as a host/device function so the CPU can run the very same arithmetic
// (tests/unit/test_cuda_gemm_host.cpp emulates the whole grid with it).
//
// Contract: exactly runtime/gemm.hpp's `canonical` (and `reference`): for every C element,
// K is cut into the leaves of `rule` (blocks of B consecutive k, restarting at each sequence on a
// token axis); each leaf is an FMA chain from -0.0 in ascending k, acc = fma(A[i,k], B[k,j],
// acc); the leaf results are combined by the tree T (pow2 or halving, runtime/reduce_tree.hpp)
// through the post-order counter (runtime/cuda/tree_counter.hpp).
// Determinism contract: a C element's bits depend only on its row of op(A), its column of
// op(B), K and block, never on M, N, the TM x TN micro-tile, the launch shape, strides or
// transposition (a tile only decides which elements one thread computes). K == 0 gives -0.0.
#pragma once

#include <cstdint>

#include "runtime/hd.hpp"
#include "runtime/cuda/tree_counter.hpp"

namespace lockstep::hd {

// Strided views: op(A)[i, k] = A[i * a_row + k * a_col], op(B)[k, j] = B[k * b_row + j * b_col],
// C[i, j] = C[i * ldc + j]. Transposition is only a swap of the two strides.
struct GemmView {
  std::int64_t M, N, K;
  const float* A;
  std::int64_t a_row, a_col;
  const float* B;
  std::int64_t b_row, b_col;
  float* C;
  std::int64_t ldc;
  SumRuleHD rule;  // B, the tree and the token axis' sequences of the canonical sum
};

// Computes C[i0 .. i0+TM) x [j0 .. j0+TN) (clipped to M x N). Rows/columns past the edge are
// computed on a clamped index and not stored, so the loop has no data-dependent branches.
template <int TM, int TN>
LOCKSTEP_HD inline void canonical_gemm_tile(const GemmView& g, std::int64_t i0, std::int64_t j0) {
  std::int64_t ri[TM], cj[TN];
  LOCKSTEP_UNROLL
  for (int a = 0; a < TM; ++a) ri[a] = (i0 + a < g.M ? i0 + a : g.M - 1) * g.a_row;
  LOCKSTEP_UNROLL
  for (int b = 0; b < TN; ++b) cj[b] = (j0 + b < g.N ? j0 + b : g.N - 1) * g.b_col;

  TreeCounter<TM * TN> tree;
  const AxisHD axis(g.rule, g.K);
  for (std::int64_t l = 0; l < axis.count(); ++l) {
    const std::int64_t lo = axis.start(l), hi = lo + axis.len(l);
    float acc[TM * TN];
    LOCKSTEP_UNROLL
    for (int e = 0; e < TM * TN; ++e) acc[e] = kNegZero;
    for (std::int64_t k = lo; k < hi; ++k) {
      float av[TM], bv[TN];
      LOCKSTEP_UNROLL
      for (int a = 0; a < TM; ++a) av[a] = g.A[ri[a] + k * g.a_col];
      LOCKSTEP_UNROLL
      for (int b = 0; b < TN; ++b) bv[b] = g.B[k * g.b_row + cj[b]];
      LOCKSTEP_UNROLL
      for (int a = 0; a < TM; ++a) {
        LOCKSTEP_UNROLL
        for (int b = 0; b < TN; ++b) acc[a * TN + b] = fma(av[a], bv[b], acc[a * TN + b]);
      }
    }
    tree.push(acc, axis.merges_after(l));
  }
  float out[TM * TN];
  tree.result(out);
  LOCKSTEP_UNROLL
  for (int a = 0; a < TM; ++a) {
    LOCKSTEP_UNROLL
    for (int b = 0; b < TN; ++b)
      if (i0 + a < g.M && j0 + b < g.N) g.C[(i0 + a) * g.ldc + j0 + b] = out[a * TN + b];
  }
}

}  // namespace lockstep::hd
