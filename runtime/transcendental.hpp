// Lockstep's own float32 transcendentals: exp, log, tanh, erf, sinpi, cospi, gelu_tanh and its
// derivative, as scalar functions and as array kernels dispatched on KernelCtx::isa.
// Determinism contract (docs/design.md section 2): built only from IEEE basic operations (+ - * /,
// fma, bit manipulation, compare-and-select); no libm, so the bits never depend on the libm
// version. Each function is one algorithm (runtime/transcendental_impl.hpp) instantiated for
// scalar, AVX2 and AVX-512 lanes; all three return the same bits for every input, and the array
// results do not depend on n, alignment, position in the array or ctx.threads.
//
// Accuracy (max error vs long double references; measured values in
// tests/unit/test_transcendental.cpp, which asserts the bounds given here): exp, sinpi,
// cospi <= 1.25 ulp, tanh / erf <= 1.5 ulp, log <= 2 ulp, gelu_tanh <= 2.5 ulp (normal results; 3
// subnormal ulps below 2^-126), gelu_tanh_grad <= 8 ulp outside x in (-1.5, -0.3) and <= 2^-22
// absolute everywhere (it crosses zero at x = -0.7518, where ulp error is unbounded).
// Special values follow libm:
// NaN in -> NaN out, exp overflows to +Inf and underflows to (subnormal or) +0, log(+-0) = -Inf,
// log(x < 0) = NaN, tanh(+-Inf) = +-1, erf(+-Inf) = +-1, signed zeros kept where libm keeps them.
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep::math {

// ---- scalar API (always the scalar path; bit-identical to every array path) ---------------------
float ls_exp(float x);
float ls_log(float x);  // natural logarithm
float ls_tanh(float x);
float ls_erf(float x);
float ls_sinpi(float x);  // sin(pi x), exact argument reduction for every float
float ls_cospi(float x);  // cos(pi x)
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the GPT-2 / Megatron "gelu" (tanh form).
float ls_gelu_tanh(float x);
// d/dx of ls_gelu_tanh.
float ls_gelu_tanh_grad(float x);

// ---- array API: y[i] = f(x[i]) for i in [0, n); x == y (in place) is allowed, partial overlap
// is not. Throws lockstep::Error on an invalid ctx (validate()) or n < 0. ----------------------
void exp(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void log(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void tanh(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void erf(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void sinpi(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void cospi(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void gelu_tanh(const KernelCtx& ctx, const float* x, float* y, int64_t n);
void gelu_tanh_grad(const KernelCtx& ctx, const float* x, float* y, int64_t n);
// y[i] = gelu_tanh(x[i]) and g[i] = gelu_tanh_grad(x[i]) in one pass (the shared part is
// evaluated once): the same bits as the two calls above. g == x (in place) is allowed; y must
// not alias x or g.
void gelu_tanh_and_grad(const KernelCtx& ctx, const float* x, float* y, float* g, int64_t n);
// y[i] = exp(x[i] - shift): the difference rounded to float, then ls_exp (the bits of a
// subtraction pass followed by exp), in one pass; the softmax's rows. x == y is allowed.
void exp_shifted(const KernelCtx& ctx, const float* x, float shift, float* y, int64_t n);

}  // namespace lockstep::math
