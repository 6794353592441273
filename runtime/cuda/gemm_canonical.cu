// Kernel and launcher of runtime/cuda/gemm_canonical.hpp. One thread owns a kTM x kTN
// micro-tile of C and runs hd::canonical_gemm_tile on it; a 16 x 16 thread block covers a
// 64 x 64 tile of C. Operands are read through the read-only cache (L1/L2 reuse across the
// tile); there is no shared-memory staging yet, so this is the correctness baseline of the
// invariant mode, not a tuned kernel.
#include "runtime/cuda/gemm_canonical.hpp"

#include <string>

#include "runtime/cuda/device.hpp"
#include "runtime/cuda/gemm_canonical_core.hpp"
#include "runtime/error.hpp"

namespace lockstep::cuda {

namespace {

constexpr int kTM = 4, kTN = 4, kThreads = 16;

__global__ void __launch_bounds__(kThreads* kThreads) canonical_gemm_kernel(const hd::GemmView g) {
  const std::int64_t i0 = (std::int64_t(blockIdx.y) * kThreads + threadIdx.y) * kTM;
  const std::int64_t j0 = (std::int64_t(blockIdx.x) * kThreads + threadIdx.x) * kTN;
  if (i0 >= g.M || j0 >= g.N) return;
  hd::canonical_gemm_tile<kTM, kTN>(g, i0, j0);
}

}  // namespace

void gemm_canonical(cudaStream_t stream, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
                    std::int64_t K, const float* A, std::int64_t lda, const float* B,
                    std::int64_t ldb, float* C, std::int64_t ldc, const hd::SumRuleHD& rule) {
  const int block = rule.block;
  const std::string dims =
      "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  check(M >= 0 && N >= 0 && K >= 0, "cuda::gemm_canonical: negative size (" + dims + ")");
  check(block >= 1, "cuda::gemm_canonical: reduce_block " + std::to_string(block) + " < 1",
        "set numerics.reduce_block to a positive number (default 64)");
  check(lda >= (ta == Trans::N ? K : M) && ldb >= (tb == Trans::N ? N : K) && ldc >= N,
        "cuda::gemm_canonical: a leading dimension is too small (" + dims +
            ", lda=" + std::to_string(lda) + " ldb=" + std::to_string(ldb) +
            " ldc=" + std::to_string(ldc) + ")",
        "row-major: lda >= K (A not transposed) or M, ldb >= N (B not transposed) or K, ldc >= N");
  check(rule.segment == 0 || (rule.halving && K % rule.segment == 0),
        "cuda::gemm_canonical: K=" + std::to_string(K) + " is not whole sequences of " +
            std::to_string(rule.segment) + " under the halving tree",
        "build token rules with KernelCtx::over_sequences");
  check(hd::AxisHD(rule, K).count() <= (std::int64_t(1) << hd::kMaxLeafBits),
        "cuda::gemm_canonical: K=" + std::to_string(K) + " has more than 2^" +
            std::to_string(hd::kMaxLeafBits) + " leaves of " + std::to_string(block),
        "raise numerics.reduce_block or hd::kTreeLevels");
  if (M == 0 || N == 0) return;
  const hd::GemmView g{M,
                       N,
                       K,
                       A,
                       ta == Trans::N ? lda : 1,
                       ta == Trans::N ? 1 : lda,
                       B,
                       tb == Trans::N ? ldb : 1,
                       tb == Trans::N ? 1 : ldb,
                       C,
                       ldc,
                       rule};
  const std::int64_t gx = (N + kTN * kThreads - 1) / (kTN * kThreads);
  const std::int64_t gy = (M + kTM * kThreads - 1) / (kTM * kThreads);
  check(gy <= 65535, "cuda::gemm_canonical: M=" + std::to_string(M) + " needs too many tile rows",
        "split the GEMM along M");
  canonical_gemm_kernel<<<dim3(unsigned(gx), unsigned(gy)), dim3(kThreads, kThreads), 0, stream>>>(
      g);
  LOCKSTEP_CUDA_CHECK_LAUNCH("canonical_gemm_kernel");
}

}  // namespace lockstep::cuda
