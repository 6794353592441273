// cuBLAS SGEMM for the deterministic and fast modes (row-major, like lockstep::gemm).
// Determinism contract:
//   deterministic: one handle per rank bound to the rank's one stream, a workspace Lockstep
//     allocates once and pins to the handle (cublasSetWorkspace, so cuBLAS never picks a
//     different scratch between calls), atomics not allowed (CUBLAS_ATOMICS_NOT_ALLOWED, no
//     split-K with atomic accumulation), CUBLAS_DEFAULT_MATH (no TF32 for fp32) or
//     CUBLAS_PEDANTIC_MATH on request, and NVIDIA_TF32_OVERRIDE=1 refused. Per cuBLAS's
//     documentation that gives the same bits run to run on the same GPU model, library version
//     and shapes (G1/G2) — not across shapes or layouts (that is the invariant mode's canonical
//     kernel, runtime/cuda/gemm_canonical.hpp).
//   fast: cuBLAS's defaults plus atomics allowed, TF32 only when asked for.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string_view>

#include "runtime/cuda/device.hpp"
#include "runtime/determinism.hpp"
#include "runtime/gemm.hpp"

namespace lockstep::cuda {

// Throws lockstep::Error unless st == CUBLAS_STATUS_SUCCESS (call text, file:line, status name
// and string, a hint).
void check_cublas(cublasStatus_t st, std::string_view call,
                  std::source_location loc = std::source_location::current());
#define LOCKSTEP_CUBLAS_CHECK(call) ::lockstep::cuda::check_cublas((call), #call)

struct CublasOptions {
  bool pedantic = false;   // deterministic: CUBLAS_PEDANTIC_MATH instead of DEFAULT
  bool fast_tf32 = false;  // fast: allow TF32 tensor cores for fp32
  std::size_t workspace_bytes = std::size_t{32} << 20;  // deterministic's pinned workspace
};

class Cublas {
 public:
  // mode invariant is refused (its GEMM is gemm_canonical). Needs a selected device.
  Cublas(Determinism mode, const Stream& stream, const CublasOptions& options = {});
  ~Cublas();
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;

  // C[M,N] = op(A)[M,K] . op(B)[K,N], row-major, device pointers; the argument rules of
  // lockstep::gemm. Sizes must fit cuBLAS's int.
  void gemm(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K, const float* A,
            std::int64_t lda, const float* B, std::int64_t ldb, float* C, std::int64_t ldc);

  Determinism mode() const { return mode_; }
  cublasHandle_t handle() const { return handle_; }

 private:
  Determinism mode_;
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer<std::byte> workspace_;
};

}  // namespace lockstep::cuda
