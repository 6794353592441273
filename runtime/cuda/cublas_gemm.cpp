// cuBLAS handle set-up per determinism mode and the row-major SGEMM of
// runtime/cuda/cublas_gemm.hpp.
#include "runtime/cuda/cublas_gemm.hpp"

#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/error.hpp"

namespace lockstep::cuda {

void check_cublas(cublasStatus_t st, std::string_view call, std::source_location loc) {
  if (st == CUBLAS_STATUS_SUCCESS) return;
  std::string hint = "check the shapes and that a GPU is selected (select_device)";
  if (st == CUBLAS_STATUS_NOT_INITIALIZED)
    hint = "cuBLAS could not start: is there a GPU and a driver? (select_device says)";
  else if (st == CUBLAS_STATUS_ALLOC_FAILED)
    hint = "device memory is exhausted: reduce the microbatch or the workspace";
  else if (st == CUBLAS_STATUS_ARCH_MISMATCH || st == CUBLAS_STATUS_NOT_SUPPORTED)
    hint = "this GPU or cuBLAS version does not support the requested math mode";
  fail("cuBLAS call " + std::string(call) + " failed: " + cublasGetStatusName(st) + " (" +
           cublasGetStatusString(st) + ")",
       hint, loc);
}

Cublas::Cublas(Determinism mode, const Stream& stream, const CublasOptions& o) : mode_(mode) {
  check(mode != Determinism::invariant,
        "cuBLAS is not used in invariant mode: its bits depend on the shapes and the algorithm "
        "cuBLAS picks",
        "use cuda::gemm_canonical for invariant mode");
  LOCKSTEP_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    LOCKSTEP_CUBLAS_CHECK(cublasSetStream(handle_, stream.get()));
    LOCKSTEP_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    if (mode == Determinism::deterministic) {
      const char* tf32 = std::getenv("NVIDIA_TF32_OVERRIDE");
      check(tf32 == nullptr || std::strcmp(tf32, "1") != 0,
            "NVIDIA_TF32_OVERRIDE=1 would let cuBLAS use TF32 in the deterministic fp32 mode",
            "unset NVIDIA_TF32_OVERRIDE (or set it to 0)");
      workspace_ = DeviceBuffer<std::byte>(o.workspace_bytes, "cuBLAS workspace");
      LOCKSTEP_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.size()));
      LOCKSTEP_CUBLAS_CHECK(cublasSetAtomicsMode(handle_, CUBLAS_ATOMICS_NOT_ALLOWED));
      LOCKSTEP_CUBLAS_CHECK(
          cublasSetMathMode(handle_, o.pedantic ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH));
    } else {
      LOCKSTEP_CUBLAS_CHECK(cublasSetAtomicsMode(handle_, CUBLAS_ATOMICS_ALLOWED));
      LOCKSTEP_CUBLAS_CHECK(cublasSetMathMode(
          handle_, o.fast_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    }
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Cublas::~Cublas() {
  if (handle_) cublasDestroy(handle_);
}

void Cublas::gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K,
                  const float* A, std::int64_t lda, const float* B, std::int64_t ldb, float* C,
                  std::int64_t ldc) {
  const std::string dims =
      "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
  check(M >= 0 && N >= 0 && K >= 0, "cuda::Cublas::gemm: negative size (" + dims + ")");
  check(lda >= (ta == Trans::N ? K : M) && ldb >= (tb == Trans::N ? N : K) && ldc >= N,
        "cuda::Cublas::gemm: a leading dimension is too small (" + dims + ")",
        "row-major: lda >= K (A not transposed) or M, ldb >= N (B not transposed) or K, ldc >= N");
  for (std::int64_t v : {M, N, K, lda, ldb, ldc})
    check(v <= INT_MAX, "cuda::Cublas::gemm: " + dims + " exceeds cuBLAS's 32-bit sizes",
          "split the GEMM");
  if (M == 0 || N == 0) return;
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: pass B first.
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_CUBLAS_CHECK(cublasSgemm(handle_, tb == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T,
                                    ta == Trans::N ? CUBLAS_OP_N : CUBLAS_OP_T, int(N), int(M),
                                    int(K), &one, B, int(ldb), A, int(lda), &zero, C, int(ldc)));
}

}  // namespace lockstep::cuda
