// Host/device portability for code that both g++ and nvcc compile: LOCKSTEP_HD marks a
// function __host__ __device__ under nvcc and is empty under the host compiler, and the few
// IEEE operations whose spelling differs (fused multiply-add, square root) get one name.
// Determinism contract: every function here is one correctly rounded IEEE operation on both
// sides (std::fma / __fmaf_rn, std::sqrt / __fsqrt_rn), so a LOCKSTEP_HD function built from
// them and from + - * / gives the same bits on the CPU (-ffp-contract=off) and on the GPU
// (nvcc --fmad=false -prec-div=true -prec-sqrt=true -ftz=false, set in
// runtime/cuda/CMakeLists.txt).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define LOCKSTEP_HD __host__ __device__
#else
#define LOCKSTEP_HD
#endif
// Loop unrolling for the device pass (register arrays need compile-time indices there).
#if defined(__CUDA_ARCH__)
#define LOCKSTEP_UNROLL _Pragma("unroll")
#else
#define LOCKSTEP_UNROLL
#endif

namespace lockstep::hd {

LOCKSTEP_HD inline float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

LOCKSTEP_HD inline float sqrt(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return std::sqrt(x);
#endif
}

// Division spelled as an intrinsic on the device, so the bits never depend on -prec-div.
LOCKSTEP_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace lockstep::hd
