// The invariant-mode GEMM on the GPU: C[M,N] = op(A)[M,K] . op(B)[K,N], row-major, C
// overwritten, every pointer in device memory, launched on the rank's stream.
// Determinism contract: runtime/gemm.hpp's `canonical` bit for bit (leaf chains from -0.0 with
// FMAs, leaves combined by the rule's tree T): the per-thread body is hd::canonical_gemm_tile
// (runtime/cuda/gemm_canonical_core.hpp), which tests/unit/test_cuda_gemm_host.cpp holds to
// lockstep::gemm on the CPU. The launch shape only decides which thread computes which
// element, so bits depend on neither M, N, tiling nor layout. CUDA cores only (FFMA): tensor
// cores do not round each product-sum the way an FMA chain does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/tree_rule.hpp"
#include "runtime/gemm.hpp"

namespace lockstep::cuda {

// Same argument rules as lockstep::gemm (ta/tb, lda/ldb/ldc minimums); rule: KernelCtx::rule()'s
// block, tree and token sequences. Throws lockstep::Error on bad sizes or a K with more leaves
// than the tree counter holds (2^hd::kMaxLeafBits).
void gemm_canonical(cudaStream_t stream, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
                    std::int64_t K, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float* C, std::int64_t ldc, const hd::SumRuleHD& rule);

}  // namespace lockstep::cuda
