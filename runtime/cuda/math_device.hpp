// Lockstep's transcendentals and GELU for one float, as host/device functions: the kernels of
// runtime/transcendental_impl.hpp (the source every CPU path runs) instantiated over the Scalar
// trait of runtime/simd.hpp (LOCKSTEP_HD: one float per GPU thread). Used by the device kernels
// (runtime/cuda/kernels.cu: math_apply) and held to lockstep::math's scalar API by
// tests/unit/test_cuda_math_host.cpp. Determinism contract: hd::math::F(x) performs exactly the
// IEEE operations of lockstep::math::F on the CPU, in the same order, each rounded once (G5: the
// same bits on the GPU and the CPU, given nvcc's --fmad=false -prec-div=true -prec-sqrt=true
// -ftz=false).
#pragma once

#include "runtime/hd.hpp"
#include "runtime/simd.hpp"
#include "runtime/transcendental_impl.hpp"

namespace lockstep::hd::math {

using Lane = simd::Vec<simd::Scalar>;

LOCKSTEP_HD inline float exp(float x) {
  return lockstep::math::detail::exp_k(Lane(x)).v;
}
LOCKSTEP_HD inline float log(float x) {
  return lockstep::math::detail::log_k(Lane(x)).v;
}
LOCKSTEP_HD inline float tanh(float x) {
  return lockstep::math::detail::tanh_k(Lane(x)).v;
}
LOCKSTEP_HD inline float erf(float x) {
  return lockstep::math::detail::erf_k(Lane(x)).v;
}
LOCKSTEP_HD inline float sinpi(float x) {
  return lockstep::math::detail::sinpi_k(Lane(x)).v;
}
LOCKSTEP_HD inline float cospi(float x) {
  return lockstep::math::detail::cospi_k(Lane(x)).v;
}
LOCKSTEP_HD inline float gelu_tanh(float x) {
  return lockstep::math::detail::gelu_tanh_k(Lane(x)).v;
}
LOCKSTEP_HD inline float gelu_tanh_grad(float x) {
  return lockstep::math::detail::gelu_tanh_grad_k(Lane(x)).v;
}
// gelu_tanh and its derivative in one evaluation (lockstep::math::gelu_tanh_and_grad).
LOCKSTEP_HD inline void gelu_tanh_and_grad(float x, float& y, float& g) {
  Lane a, b;
  lockstep::math::detail::gelu_pair_k(Lane(x), a, b);
  y = a.v;
  g = b.v;
}
// exp(x - shift), the difference rounded first (lockstep::math::exp_shifted; softmax rows).
LOCKSTEP_HD inline float exp_shifted(float x, float shift) {
  return lockstep::math::detail::exp_k(Lane(x) - Lane(shift)).v;
}

}  // namespace lockstep::hd::math
