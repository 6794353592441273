// The scalar path, the scalar API and the ISA dispatch of the array API
// (runtime/transcendental.hpp): runtime/transcendental_impl.hpp over simd::Vec<simd::Scalar>,
// one element at a time. This file is compiled for baseline x86-64: std::fma is the correctly
// rounded fma (hardware FMA through glibc's ifunc where present, exact software emulation
// otherwise), so the scalar path computes the same bits as the AVX2 / AVX-512 paths, which use
// the FMA instruction (docs/design.md section 2).
#include "runtime/transcendental.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/error.hpp"
#include "runtime/transcendental_impl.hpp"

namespace lockstep::math {
namespace detail {
namespace {

// The scalar lane type: one float (runtime/simd.hpp's Scalar trait).
using SF = simd::Vec<simd::Scalar>;

// The argument checks of the array API. Every message is built only on failure: these kernels
// run per softmax / cross-entropy row (~10^5 calls per training step), and building the
// strings eagerly cost several heap allocations per call.
void check_args(const KernelCtx& ctx, const float* x, const float* y, int64_t n, const char* name) {
  validate(ctx);
  if (n < 0)
    fail(std::string("math::") + name + ": negative length " + std::to_string(n),
         "pass the element count of the arrays");
  if (n > 0 && (x == nullptr || y == nullptr))
    fail(std::string("math::") + name + ": null array", "pass valid input and output pointers");
}

// body(b, e) over [0, n) in chunks spread over ctx.threads (one call when one thread or one
// chunk). Element-wise work: chunking and threads never change bits.
template <class Body>
void in_chunks(const KernelCtx& ctx, int64_t n, const Body& body) {
  constexpr int64_t kChunk = 16384;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (ctx.threads <= 1 || chunks <= 1) {
    body(0, n);
    return;
  }
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (int64_t c = 0; c < chunks; ++c) body(c * kChunk, std::min(n, (c + 1) * kChunk));
}

void run_scalar(Fn fn, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = apply_(fn, SF(x[i])).v;
}

void run(const KernelCtx& ctx, Fn fn, const float* x, float* y, int64_t n, const char* name) {
  check_args(ctx, x, y, n, name);
  if (n == 0) return;
  auto body = [&](int64_t b, int64_t e) {
    switch (ctx.isa) {
      case Isa::scalar:
        run_scalar(fn, x + b, y + b, e - b);
        break;
      case Isa::avx2:
        run_avx2(fn, x + b, y + b, e - b);
        break;
      case Isa::avx512:
        run_avx512(fn, x + b, y + b, e - b);
        break;
    }
  };
  in_chunks(ctx, n, body);
}

void run_gelu_pair(const KernelCtx& ctx, const float* x, float* y, float* g, int64_t n) {
  check_args(ctx, x, y, n, "gelu_tanh_and_grad");
  if (n == 0) return;
  if (g == nullptr) fail("math::gelu_tanh_and_grad: null array", "pass valid output pointers");
  if (y == x || y == g)
    fail("math::gelu_tanh_and_grad: y aliases x or g", "only g may be computed in place over x");
  auto body = [&](int64_t b, int64_t e) {
    switch (ctx.isa) {
      case Isa::scalar:
        for (int64_t i = b; i < e; ++i) {
          SF a, d;
          gelu_pair_k(SF(x[i]), a, d);
          y[i] = a.v;
          g[i] = d.v;
        }
        break;
      case Isa::avx2:
        run_gelu_pair_avx2(x + b, y + b, g + b, e - b);
        break;
      case Isa::avx512:
        run_gelu_pair_avx512(x + b, y + b, g + b, e - b);
        break;
    }
  };
  in_chunks(ctx, n, body);
}

void run_exp_shift(const KernelCtx& ctx, const float* x, float shift, float* y, int64_t n) {
  check_args(ctx, x, y, n, "exp_shifted");
  if (n == 0) return;
  auto body = [&](int64_t b, int64_t e) {
    switch (ctx.isa) {
      case Isa::scalar:
        for (int64_t i = b; i < e; ++i) y[i] = exp_k(SF(x[i]) - SF(shift)).v;
        break;
      case Isa::avx2:
        run_exp_shift_avx2(x + b, shift, y + b, e - b);
        break;
      case Isa::avx512:
        run_exp_shift_avx512(x + b, shift, y + b, e - b);
        break;
    }
  };
  in_chunks(ctx, n, body);
}

}  // namespace
}  // namespace detail

float ls_exp(float x) {
  return detail::exp_k(detail::SF(x)).v;
}
float ls_log(float x) {
  return detail::log_k(detail::SF(x)).v;
}
float ls_tanh(float x) {
  return detail::tanh_k(detail::SF(x)).v;
}
float ls_erf(float x) {
  return detail::erf_k(detail::SF(x)).v;
}
float ls_sinpi(float x) {
  return detail::sinpi_k(detail::SF(x)).v;
}
float ls_cospi(float x) {
  return detail::cospi_k(detail::SF(x)).v;
}
float ls_gelu_tanh(float x) {
  return detail::gelu_tanh_k(detail::SF(x)).v;
}
float ls_gelu_tanh_grad(float x) {
  return detail::gelu_tanh_grad_k(detail::SF(x)).v;
}

#define LOCKSTEP_MATH_ARRAY(NAME)                                        \
  void NAME(const KernelCtx& ctx, const float* x, float* y, int64_t n) { \
    detail::run(ctx, detail::Fn::NAME, x, y, n, #NAME);                  \
  }
LOCKSTEP_MATH_ARRAY(exp)
LOCKSTEP_MATH_ARRAY(log)
LOCKSTEP_MATH_ARRAY(tanh)
LOCKSTEP_MATH_ARRAY(erf)
LOCKSTEP_MATH_ARRAY(sinpi)
LOCKSTEP_MATH_ARRAY(cospi)
LOCKSTEP_MATH_ARRAY(gelu_tanh)
LOCKSTEP_MATH_ARRAY(gelu_tanh_grad)
#undef LOCKSTEP_MATH_ARRAY

void gelu_tanh_and_grad(const KernelCtx& ctx, const float* x, float* y, float* g, int64_t n) {
  detail::run_gelu_pair(ctx, x, y, g, n);
}

void exp_shifted(const KernelCtx& ctx, const float* x, float shift, float* y, int64_t n) {
  detail::run_exp_shift(ctx, x, shift, y, n);
}

}  // namespace lockstep::math
