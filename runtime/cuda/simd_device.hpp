// The device trait of runtime/simd.hpp: DeviceScalar, one float per GPU thread, so that the
// kernels written once over simd::Vec<T> (runtime/transcendental_impl.hpp: exp, log, tanh, erf,
// sinpi, cospi, GELU) compile for the GPU from the CPU's source. Every member is LOCKSTEP_HD;
// compiled by the host compiler it is the Scalar trait once more (the host tests,
// tests/unit/test_cuda_math_host.cpp, hold the two to the same bits).
// Determinism contract: each member is the one IEEE operation the Scalar trait performs, spelled
// with runtime/hd.hpp's correctly rounded fma / div / sqrt on the device (nvcc --fmad=false keeps
// + - * unfused), comparisons ordered except != (unordered), selections by bits, int32 lanes
// unsigned inside (wrap-around defined) with an arithmetic right shift.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/hd.hpp"
#include "runtime/simd.hpp"

namespace lockstep::simd {

struct DeviceScalar {
  static constexpr int W = 1;
  static constexpr bool masked = false;
  using reg = float;
  using ireg = std::uint32_t;
  using mask = bool;

  LOCKSTEP_HD static reg set1(float x) { return x; }
  LOCKSTEP_HD static reg loadu(const float* p) { return *p; }
  LOCKSTEP_HD static void storeu(float* p, reg x) { *p = x; }
  LOCKSTEP_HD static reg add(reg a, reg b) { return a + b; }
  LOCKSTEP_HD static reg sub(reg a, reg b) { return a - b; }
  LOCKSTEP_HD static reg mul(reg a, reg b) { return a * b; }
  LOCKSTEP_HD static reg div(reg a, reg b) { return hd::div(a, b); }
  LOCKSTEP_HD static reg sqrt(reg a) { return hd::sqrt(a); }
  LOCKSTEP_HD static reg neg(reg a) { return -a; }
  LOCKSTEP_HD static reg fma(reg a, reg b, reg c) { return hd::fma(a, b, c); }
  LOCKSTEP_HD static mask lt(reg a, reg b) { return a < b; }
  LOCKSTEP_HD static mask le(reg a, reg b) { return a <= b; }
  LOCKSTEP_HD static mask gt(reg a, reg b) { return a > b; }
  LOCKSTEP_HD static mask ge(reg a, reg b) { return a >= b; }
  LOCKSTEP_HD static mask eq(reg a, reg b) { return a == b; }
  LOCKSTEP_HD static mask ne(reg a, reg b) { return a != b; }
  LOCKSTEP_HD static ireg iset1(std::int32_t x) { return std::uint32_t(x); }
  LOCKSTEP_HD static ireg iadd(ireg a, ireg b) { return a + b; }
  LOCKSTEP_HD static ireg isub(ireg a, ireg b) { return a - b; }
  LOCKSTEP_HD static ireg iand(ireg a, ireg b) { return a & b; }
  LOCKSTEP_HD static ireg ior(ireg a, ireg b) { return a | b; }
  LOCKSTEP_HD static ireg ixor(ireg a, ireg b) { return a ^ b; }
  LOCKSTEP_HD static mask ieq(ireg a, ireg b) { return a == b; }
  template <int N>
  LOCKSTEP_HD static ireg shl(ireg a) {
    return a << N;
  }
  template <int N>
  LOCKSTEP_HD static ireg sra(ireg a) {
    return std::uint32_t(std::int32_t(a) >> N);  // arithmetic shift (C++20; PTX shr.s32)
  }
  LOCKSTEP_HD static ireg as_int(reg a) {
#if defined(__CUDA_ARCH__)
    return __float_as_uint(a);
#else
    std::uint32_t u;
    std::memcpy(&u, &a, 4);
    return u;
#endif
  }
  LOCKSTEP_HD static reg as_float(ireg a) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(a);
#else
    float f;
    std::memcpy(&f, &a, 4);
    return f;
#endif
  }
  // int32 -> float, round to nearest (the kernels convert only small, exact integers).
  LOCKSTEP_HD static reg to_float(ireg a) {
    return float(std::int32_t(a));
  }
  LOCKSTEP_HD static reg sel(mask m, reg a, reg b) {
    return as_float(m ? as_int(a) : as_int(b));
  }
  LOCKSTEP_HD static mask mand(mask a, mask b) {
    return a && b;
  }
  LOCKSTEP_HD static mask mor(mask a, mask b) {
    return a || b;
  }
};

}  // namespace lockstep::simd
