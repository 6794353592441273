// Private to runtime/transcendental*.cpp: every transcendental written ONCE, as a template over a
// lane type F = simd::Vec<T> of runtime/simd.hpp (T = Scalar in transcendental.cpp, Avx2 /
// Avx512 in the *_avx2.cpp / *_avx512.cpp files, one LOCKSTEP_MATH_DEFINE each).
// Determinism contract (docs/design.md section 2): each kernel is one fixed sequence of IEEE
// operations (+ - * / sqrt, fma, bit manipulation, compare-and-select); no branches on data, no
// libm. Every trait maps each operation to exactly one IEEE-rounded instruction (scalar fma is
// std::fma, correctly rounded), so scalar, AVX2 and AVX-512 produce the same bits for every
// input, NaN payloads included.
//
// Everything below the ISA-dispatch declarations lives in an anonymous namespace on purpose: each
// translation unit (compiled with its own -m flags) gets a private copy, so the linker can never
// fold an AVX-512-compiled helper into the scalar path (an ODR trap with per-file ISA flags).
//
// What the kernels use of F: F(float) broadcast; + - * / ; fma(a,b,c); typename F::I (int32
// lanes) and typename F::M (lane mask); as_int / as_float bit casts; I + - & | ^, shl<n>,
// sra<n>, I(int32) broadcast, to_float(I) (exact for the small ints used here); comparisons
// < <= > >= == on F (ordered: false on NaN), != (unordered: true on NaN) and == on I; mask & |;
// sel(m, a, b) = m ? a : b per lane; F::loadu, F::load_n, storeu, store_n for the array loops.
// The kernels (exp_k ... gelu_pair_k and their helpers) are LOCKSTEP_HD: over simd::Scalar
// (also LOCKSTEP_HD) nvcc compiles this same source for the GPU, one float per thread
// (runtime/cuda/math_device.hpp), which is how the GPU gets the CPU's bits (G5).
#pragma once

#include <cstdint>

#include "runtime/hd.hpp"
#include "runtime/simd.hpp"

namespace lockstep::math::detail {

// The kernels of the array API, one id per function.
enum class Fn { exp, log, tanh, erf, sinpi, cospi, gelu_tanh, gelu_tanh_grad };

// Per-ISA loops (runtime/transcendental_avx2.cpp, runtime/transcendental_avx512.cpp); call only
// after isa_supported() said yes.
void run_avx2(Fn fn, const float* x, float* y, int64_t n);
void run_avx512(Fn fn, const float* x, float* y, int64_t n);
// gelu_tanh and gelu_tanh_grad of x[0..n) in one pass (math::gelu_tanh_and_grad).
void run_gelu_pair_avx2(const float* x, float* y, float* g, int64_t n);
void run_gelu_pair_avx512(const float* x, float* y, float* g, int64_t n);
// y[i] = exp(x[i] - shift) (math::exp_shifted).
void run_exp_shift_avx2(const float* x, float shift, float* y, int64_t n);
void run_exp_shift_avx512(const float* x, float shift, float* y, int64_t n);

namespace {

// ---- constants (hex floats, so every path reads the same bits) ---------------------------------
constexpr float kInf = __builtin_huge_valf();
constexpr float kMagic = 0x1.8p23f;  // 1.5 * 2^23: (t + kMagic) - kMagic rounds t to an integer
constexpr float kLog2e = 0x1.715476p+0f;
constexpr float kLn2Hi = 0x1.62e430p-1f;    // float(ln 2)
constexpr float kLn2Lo = -0x1.05c610p-29f;  // ln 2 - kLn2Hi
constexpr float kPiHi = 0x1.921fb6p+1f;     // float(pi)
constexpr float kPiLo = -0x1.777a5cp-24f;   // pi - kPiHi
constexpr float kGeluCHi = 0x1.6e4e26p-5f;  // 0.044715 = kGeluCHi + kGeluCLo
constexpr float kGeluCLo = 0x1.a9003ep-30f;
constexpr float kGeluKHi = 0x1.988454p+0f;  // 2*sqrt(2/pi) = kGeluKHi + kGeluKLo
constexpr float kGeluKLo = -0x1.857936p-25f;
constexpr float kGelu3C = 1.341450065e-01f;  // float(3 * 0.044715)

// ---- small helpers -----------------------------------------------------------------------------
template <class F>
LOCKSTEP_HD inline F fabs_(F x) {
  using I = typename F::I;
  return as_float(as_int(x) & I(0x7fffffff));
}
// |mag| with the sign bit of sgn.
template <class F>
LOCKSTEP_HD inline F copysign_(F mag, F sgn) {
  using I = typename F::I;
  return as_float((as_int(mag) & I(0x7fffffff)) | (as_int(sgn) & I(int32_t(0x80000000u))));
}
// x with its sign flipped where sgn is negative.
template <class F>
LOCKSTEP_HD inline F xorsign_(F x, F sgn) {
  using I = typename F::I;
  return as_float(as_int(x) ^ (as_int(sgn) & I(int32_t(0x80000000u))));
}
// 2^n for integer lanes n in [-126, 127].
template <class F>
LOCKSTEP_HD inline F pow2i_(typename F::I n) {
  using I = typename F::I;
  return as_float(shl<23>(n + I(127)));
}
template <class F>
LOCKSTEP_HD inline typename F::M isnan_(F x) {
  return x != x;  // != is unordered-or-unequal: true exactly for NaN here
}
// ---- Twin<F>: two vectors per operation ---------------------------------------------------------
// A lane type over two F vectors whose every operation is F's operation on each half, issued
// back to back. The array loops run the kernels on it so the two halves' instructions come
// interleaved: the GELU and exp kernels are bound by their dependency chains (the scheduler
// holds about one vector's chain at a time), not by the execution ports, so two independent
// chains in each window run faster (GELU 6-8% on this machine's AVX-512 and AVX2, bench_math).
// Each lane still gets exactly F's sequence of operations, so the bits are F's.
template <class F>
struct TwinM {
  typename F::M a, b;
  friend TwinM operator&(TwinM x, TwinM y) { return {x.a & y.a, x.b & y.b}; }
  friend TwinM operator|(TwinM x, TwinM y) { return {x.a | y.a, x.b | y.b}; }
};
template <class F>
struct TwinI {
  typename F::I a, b;
  TwinI() = default;
  TwinI(typename F::I x, typename F::I y) : a(x), b(y) {}
  explicit TwinI(int32_t x) : a(x), b(x) {}
  friend TwinI operator+(TwinI x, TwinI y) { return {x.a + y.a, x.b + y.b}; }
  friend TwinI operator-(TwinI x, TwinI y) { return {x.a - y.a, x.b - y.b}; }
  friend TwinI operator&(TwinI x, TwinI y) { return {x.a & y.a, x.b & y.b}; }
  friend TwinI operator|(TwinI x, TwinI y) { return {x.a | y.a, x.b | y.b}; }
  friend TwinI operator^(TwinI x, TwinI y) { return {x.a ^ y.a, x.b ^ y.b}; }
  friend TwinM<F> operator==(TwinI x, TwinI y) { return {x.a == y.a, x.b == y.b}; }
};
template <int N, class F>
inline TwinI<F> shl(TwinI<F> x) {
  return {shl<N>(x.a), shl<N>(x.b)};
}
template <int N, class F>
inline TwinI<F> sra(TwinI<F> x) {
  return {sra<N>(x.a), sra<N>(x.b)};
}
template <class F>
struct Twin {
  using I = TwinI<F>;
  using M = TwinM<F>;
  F a, b;
  Twin() = default;
  Twin(F x, F y) : a(x), b(y) {}
  Twin(float x) : a(x), b(x) {}  // NOLINT: broadcast
  friend Twin operator+(Twin x, Twin y) { return {x.a + y.a, x.b + y.b}; }
  friend Twin operator-(Twin x, Twin y) { return {x.a - y.a, x.b - y.b}; }
  friend Twin operator-(Twin x) { return {-x.a, -x.b}; }
  friend Twin operator*(Twin x, Twin y) { return {x.a * y.a, x.b * y.b}; }
  friend Twin operator/(Twin x, Twin y) { return {x.a / y.a, x.b / y.b}; }
  friend M operator<(Twin x, Twin y) { return {x.a < y.a, x.b < y.b}; }
  friend M operator<=(Twin x, Twin y) { return {x.a <= y.a, x.b <= y.b}; }
  friend M operator>(Twin x, Twin y) { return {x.a > y.a, x.b > y.b}; }
  friend M operator>=(Twin x, Twin y) { return {x.a >= y.a, x.b >= y.b}; }
  friend M operator==(Twin x, Twin y) { return {x.a == y.a, x.b == y.b}; }
  friend M operator!=(Twin x, Twin y) { return {x.a != y.a, x.b != y.b}; }
};
template <class F>
inline Twin<F> fma(Twin<F> x, Twin<F> y, Twin<F> z) {
  return {fma(x.a, y.a, z.a), fma(x.b, y.b, z.b)};
}
template <class F>
inline TwinI<F> as_int(Twin<F> x) {
  return {as_int(x.a), as_int(x.b)};
}
template <class F>
inline Twin<F> as_float(TwinI<F> x) {
  return {as_float(x.a), as_float(x.b)};
}
template <class F>
inline Twin<F> to_float(TwinI<F> x) {
  return {to_float(x.a), to_float(x.b)};
}
template <class F>
inline Twin<F> sel(TwinM<F> m, Twin<F> x, Twin<F> y) {
  return {sel(m.a, x.a, y.a), sel(m.b, x.b, y.b)};
}

// ---- exp ---------------------------------------------------------------------------------------
// x = n ln2 + r, |r| <= ln2/2 (Cody-Waite with FMA), exp(r) = 1 + (r + r^2 P(r)) with P a degree-5
// Chebyshev fit (|error| 1.4e-9), result scaled by 2^n in two exact-then-once-rounded steps so
// subnormal results are rounded once. Inputs are clamped to [-120, 89], which keeps n in
// [-174, 128]: overflow and underflow then round to Inf and 0 by themselves; NaN passes through.
template <class F>
LOCKSTEP_HD inline F exp_parts_(F x, F& s1, F& s2) {
  using I = typename F::I;
  F xc = sel(x > F(89.0f), F(89.0f), x);
  xc = sel(xc < F(-120.0f), F(-120.0f), xc);
  F km = xc * F(kLog2e) + F(kMagic);
  F n = km - F(kMagic);
  I ni = as_int(km) - as_int(F(kMagic));
  F r = fma(n, F(-kLn2Hi), xc);
  r = fma(n, F(-kLn2Lo), r);
  F p = F(1.989098091e-04f);
  p = fma(p, r, F(1.393364160e-03f));
  p = fma(p, r, F(8.333310485e-03f));
  p = fma(p, r, F(4.166646674e-02f));
  p = fma(p, r, F(1.666666716e-01f));
  p = fma(p, r, F(5.000000000e-01f));
  F q = fma(r * r, p, r);
  I n1 = sra<1>(ni);
  s1 = pow2i_<F>(n1);
  s2 = pow2i_<F>(ni - n1);
  return F(1.0f) + q;
}
// exp(x) = (e * s1) * s2 with e = exp_parts_(x, s1, s2): the first product is exact (normal),
// the second rounds once.
template <class F>
LOCKSTEP_HD inline F exp_k(F x) {
  F s1, s2;
  F e = exp_parts_(x, s1, s2);
  return (e * s1) * s2;
}

// ---- log ---------------------------------------------------------------------------------------
// fdlibm/musl logf: x = 2^k m, m in [sqrt(2)/2, sqrt(2)), f = m - 1, s = f/(2+f),
// log(m) = f - f^2/2 + s (f^2/2 + R(s^2)), k ln2 added in two parts. Subnormals are scaled by
// 2^25 first. log(+-0) = -Inf, log(x<0) = NaN, log(+Inf) = +Inf, NaN passes through.
template <class F>
LOCKSTEP_HD inline F log_k(F x) {
  using I = typename F::I;
  using M = typename F::M;
  M sub = x < F(0x1p-126f);
  F xs = sel(sub, x * F(0x1p25f), x);
  I ix = as_int(xs) + I(0x3f800000 - 0x3f3504f3);
  I k = sra<23>(ix) - I(0x7f);
  k = k - as_int(sel(sub, as_float(I(25)), F(0.0f)));  // undo the 2^25 scaling (bit select)
  ix = (ix & I(0x007fffff)) + I(0x3f3504f3);
  F f = as_float(ix) - F(1.0f);
  F s = f / (F(2.0f) + f);
  F z = s * s;
  F w = z * z;
  F t1 = w * (F(0x1.99c26ap-2f) + w * F(0x1.f13c4cp-3f));  // Lg2, Lg4
  F t2 = z * (F(0x1.555554p-1f) + w * F(0x1.23d3dcp-2f));  // Lg1, Lg3
  F rr = t2 + t1;
  F hfsq = F(0.5f) * f * f;
  F dk = to_float(k);
  F res = s * (hfsq + rr) + dk * F(9.0580006145e-06f) - hfsq + f + dk * F(6.9313812256e-01f);
  res = sel(x == F(kInf), x, res);
  res = sel(x < F(0.0f), as_float(I(0x7fc00000)), res);
  res = sel(x == F(0.0f), F(-kInf), res);
  return sel(isnan_(x), x + x, res);
}

// ---- tanh --------------------------------------------------------------------------------------
// |x| < 0.625: tanh = a + a^3 P(a^2), P a degree-5 fit (|error| 1.6e-9); otherwise
// tanh = 1 - 2/(exp(2a) + 1) (saturates to 1 by itself). Sign restored last, so tanh(-0) = -0.
template <class F>
LOCKSTEP_HD inline F tanh_k(F x) {
  F a = fabs_(x);
  F z = a * a;
  F p = F(2.292744815e-03f);
  p = fma(p, z, F(-8.343945257e-03f));
  p = fma(p, z, F(2.176891826e-02f));
  p = fma(p, z, F(-5.395925790e-02f));
  p = fma(p, z, F(1.333330423e-01f));
  p = fma(p, z, F(-3.333333433e-01f));
  F ys = fma(a * z, p, a);
  F e = exp_k(a + a);
  F yl = F(1.0f) - F(2.0f) / (e + F(1.0f));
  return copysign_(sel(a < F(0.625f), ys, yl), x);
}

// ---- erf ---------------------------------------------------------------------------------------
// |x| < 1: erf = a + a Q(a^2), Q a degree-6 fit (|error| 1.2e-9). 1 <= |x| < 3.9375:
// erf = 1 - exp(L(a)), L a degree-8 erfc-weighted fit of log(erfc(a)). Beyond: +-1.
template <class F>
LOCKSTEP_HD inline F erf_k(F x) {
  F a = fabs_(x);
  F z = a * a;
  F q = F(7.875874871e-05f);
  q = fma(q, z, F(-8.016864303e-04f));
  q = fma(q, z, F(5.189087242e-03f));
  q = fma(q, z, F(-2.685421146e-02f));
  q = fma(q, z, F(1.128359437e-01f));
  q = fma(q, z, F(-3.761262596e-01f));
  q = fma(q, z, F(1.283791661e-01f));
  F ys = fma(a, q, a);
  F l = F(2.514383368e-07f);
  l = fma(l, a, F(-2.531637620e-05f));
  l = fma(l, a, F(4.637974489e-04f));
  l = fma(l, a, F(-4.282414448e-03f));
  l = fma(l, a, F(2.537362091e-02f));
  l = fma(l, a, F(-1.086390838e-01f));
  l = fma(l, a, F(-6.330395341e-01f));
  l = fma(l, a, F(-1.129661202e+00f));
  l = fma(l, a, F(2.043655404e-04f));
  F yl = F(1.0f) - exp_k(l);
  F y = sel(a < F(1.0f), ys, yl);
  y = sel(a >= F(3.9375f), F(1.0f), y);
  return copysign_(y, x);
}

// ---- sinpi / cospi -----------------------------------------------------------------------------
// Exact reduction: xs = x mod 2 in [-1, 1] (x - 2 round(x/2); |x| >= 2^23 is an integer, so only
// its parity matters), then xs = j/2 + r, |r| <= 1/4, quadrant j mod 4.
// sin(pi r) = pi_hi r + r (pi_lo + r^2 S(r^2)), cos(pi r) = 1 + r^2 C(r^2) (degree-3 fits).
// sinpi(n) = +-0 with the sign of n, cospi(n + 1/2) = +0 (IEEE 754-2008); Inf and NaN give NaN.
template <class F>
LOCKSTEP_HD inline void sincospi_k(F x, F& sin_out, F& cos_out) {
  using I = typename F::I;
  using M = typename F::M;
  F a = fabs_(x);
  F h = x * F(0.5f);
  F k = (h + F(kMagic)) - F(kMagic);
  F xs = x - (k + k);
  M odd = (as_int(x) & I(1)) == I(1);
  F big = sel(odd & (a < F(0x1p24f)), F(1.0f), F(0.0f));
  xs = sel(a >= F(0x1p23f), big, xs);
  F jm = xs + xs + F(kMagic);
  I q = as_int(jm) & I(3);
  F j = jm - F(kMagic);
  F r = xs - j * F(0.5f);
  F r2 = r * r;
  F s = F(8.122957498e-02f);
  s = fma(s, r2, F(-5.992287993e-01f));
  s = fma(s, r2, F(2.550163507e+00f));
  s = fma(s, r2, F(-5.167712688e+00f));
  F t = fma(r2, s, F(kPiLo));
  F sv = fma(F(kPiHi), r, r * t);
  F c = F(2.321254164e-01f);
  c = fma(c, r2, F(-1.335137844e+00f));
  c = fma(c, r2, F(4.058710575e+00f));
  c = fma(c, r2, F(-4.934802055e+00f));
  F cv = fma(r2, c, F(1.0f));
  M swap = (q & I(1)) == I(1);
  F sb = sel(swap, cv, sv);
  F cb = sel(swap, sv, cv);
  I sgn_s = shl<30>(q & I(2));           // quadrants 2, 3: -sin base
  I sgn_c = shl<30>((q + I(1)) & I(2));  // quadrants 1, 2: -cos base
  F so = as_float(as_int(sb) ^ sgn_s);
  F co = as_float(as_int(cb) ^ sgn_c);
  so = sel(so == F(0.0f), x * F(0.0f), so);
  co = co + F(0.0f);
  F nan_in = x - x;  // NaN for +-Inf and NaN, 0 otherwise
  M bad = isnan_(nan_in);
  sin_out = sel(bad, nan_in, so);
  cos_out = sel(bad, nan_in, co);
}
template <class F>
LOCKSTEP_HD inline F sinpi_k(F x) {
  F s, c;
  sincospi_k(x, s, c);
  return s;
}
template <class F>
LOCKSTEP_HD inline F cospi_k(F x) {
  F s, c;
  sincospi_k(x, s, c);
  return c;
}

// ---- GELU (tanh approximation) -----------------------------------------------------------------
// gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3), evaluated in the equivalent,
// cancellation-free form x * sigmoid(w), w = 2u = K x (1 + c x^2), K = 2 sqrt(2/pi):
// w is carried as a float pair (hi + lo, about 44 bits) because exp(-|w|) amplifies w's relative
// error by |w| (up to ~100 in the left tail). m = exp(-|w|) <= 1 never overflows;
// x >= 0: x / (1 + m);  x < 0: x m / (1 + m). |x| is clamped at 20 (the result is then x or -0).
// Shared by gelu_tanh and its gradient: xc = x clamped to [-20, 20], z = xc^2 (rounded),
// m = exp(-|w|) = em * s2 (em = m / s2 is a normal number, so results below 2^-126 are
// rounded once, at the final multiplication by s2), d = 1 + m = dh + dl exactly.
template <class F>
LOCKSTEP_HD inline void gelu_parts_(F x, F& xc, F& z, F& em, F& s2, F& m, F& dh, F& dl) {
  F a = fabs_(x);
  xc = sel(a > F(20.0f), copysign_(F(20.0f), x), x);
  // x^2 = zh + zl exactly
  F zh = xc * xc;
  F zl = fma(xc, xc, -zh);
  z = zh;
  // c x^2 = ah + al
  F ah = F(kGeluCHi) * zh;
  F al = fma(F(kGeluCHi), zh, -ah) + (F(kGeluCHi) * zl + F(kGeluCLo) * zh);
  // 1 + c x^2 = bh + bl (two-sum)
  F bh = F(1.0f) + ah;
  F bv = bh - ah;
  F bl = ((F(1.0f) - bv) + (ah - (bh - bv))) + al;
  // x (1 + c x^2) = dh + dl
  F xh = xc * bh;
  F xl = fma(xc, bh, -xh) + xc * bl;
  // w = K x (1 + c x^2) = wh + wl
  F wh = F(kGeluKHi) * xh;
  F wl = fma(F(kGeluKHi), xh, -wh) + (F(kGeluKHi) * xl + F(kGeluKLo) * xh);
  // exp(-|w|) = exp(-|wh|) (1 - sign(wh) wl)
  F s1;
  F e = exp_parts_(-fabs_(wh), s1, s2);
  e = fma(e, -xorsign_(wl, wh), e);
  em = sel(fabs_(wh) > F(120.0f), F(0.0f), e * s1);  // exp_parts_ clamps its input at -120
  m = em * s2;
  dh = F(1.0f) + m;  // m <= 1: fast two-sum
  dl = m - (dh - F(1.0f));
}
// (nh + nl) / (dh + dl), rounded once at the end (plus a few 2^-40 relative), from r = 1 / dh
// (rounded): q = nh r is within ~2 ulp, the residual nh + nl - q (dh + dl) is exact to ~2^-47 q
// (FMA), and one correction by it, scaled by r, lands at the quotient. Every quotient by d shares
// the one division r, so GELU and its derivative cost one division per lane, not six.
template <class F>
LOCKSTEP_HD inline F div_dd_(F nh, F nl, F dh, F dl, F r) {
  F q = nh * r;
  F rem = (fma(-q, dh, nh) + nl) - q * dl;
  return sel(q == F(0.0f), q, q + rem * r);  // keeps the sign of a zero quotient
}
// The value from gelu_parts_: x >= 0: x / (1 + m) (x itself past 20); x < 0: x m / (1 + m).
// One quotient per lane, its numerator chosen by the sign first: every lane does exactly the
// operations of its own branch (the quotient of the other branch was never used).
template <class F>
LOCKSTEP_HD inline F gelu_value_(F x, F xc, F em, F s2, F dh, F dl, F r) {
  auto pos = x >= F(0.0f);
  F nh = xc * em;
  F nl = fma(xc, em, -nh);
  F q = div_dd_(sel(pos, xc, nh), sel(pos, F(0.0f), nl), dh, dl, r);
  F y = sel(pos, sel(x > F(20.0f), x, q), q * s2);
  return sel(isnan_(x), x + x, y);
}
template <class F>
LOCKSTEP_HD inline F gelu_tanh_k(F x) {
  F xc, z, em, s2, m, dh, dl;
  gelu_parts_(x, xc, z, em, s2, m, dh, dl);
  return gelu_value_(x, xc, em, s2, dh, dl, F(1.0f) / dh);
}
// d/dx gelu = s (1 + x (1 - s) w'(x)), s = sigmoid(w), w' = K (1 + 3 c x^2).
template <class F>
LOCKSTEP_HD inline F gelu_tanh_grad_k(F x) {
  F xc, z, em, s2, m, dh, dl;
  gelu_parts_(x, xc, z, em, s2, m, dh, dl);
  auto pos = x >= F(0.0f);
  F r = F(1.0f) / dh;
  F inv = div_dd_(F(1.0f), F(0.0f), dh, dl, r);
  F emd = div_dd_(em, F(0.0f), dh, dl, r);  // sigmoid(-|w|) / s2
  F oms = sel(pos, emd * s2, inv);
  F wp = F(kGeluKHi) * fma(F(kGelu3C), z, F(1.0f));
  F br = fma(xc * oms, wp, F(1.0f));
  F g = sel(pos, inv * br, (emd * br) * s2);
  return sel(isnan_(x), x + x, g);
}

// Both of the above from one evaluation of gelu_parts_: each result is computed by exactly the
// operations of gelu_tanh_k / gelu_tanh_grad_k on the same intermediate values, so the bits are
// theirs (only the shared prefix is not repeated).
template <class F>
LOCKSTEP_HD inline void gelu_pair_k(F x, F& y_out, F& g_out) {
  F xc, z, em, s2, m, dh, dl;
  gelu_parts_(x, xc, z, em, s2, m, dh, dl);
  F r = F(1.0f) / dh;
  y_out = gelu_value_(x, xc, em, s2, dh, dl, r);
  auto pos = x >= F(0.0f);
  F inv = div_dd_(F(1.0f), F(0.0f), dh, dl, r);
  F emd = div_dd_(em, F(0.0f), dh, dl, r);
  F oms = sel(pos, emd * s2, inv);
  F wp = F(kGeluKHi) * fma(F(kGelu3C), z, F(1.0f));
  F br = fma(xc * oms, wp, F(1.0f));
  F g = sel(pos, inv * br, (emd * br) * s2);
  g_out = sel(isnan_(x), x + x, g);
}

template <class F>
inline F apply_(Fn fn, F x) {
  switch (fn) {
    case Fn::exp:
      return exp_k(x);
    case Fn::log:
      return log_k(x);
    case Fn::tanh:
      return tanh_k(x);
    case Fn::erf:
      return erf_k(x);
    case Fn::sinpi:
      return sinpi_k(x);
    case Fn::cospi:
      return cospi_k(x);
    case Fn::gelu_tanh:
      return gelu_tanh_k(x);
    case Fn::gelu_tanh_grad:
      return gelu_tanh_grad_k(x);
  }
  return x;
}

// Runs fn over x[0..n) with lane type F of width W, two vectors at a time through Twin<F>, then
// one vector (y == x is allowed: every vector is loaded before it is stored); the tail goes
// through one partial vector (the trait's load_n / store_n: same lanes, same bits), never through
// scalar code compiled with this file's ISA flags.
template <class F>
inline void run_lanes_(Fn fn, const float* x, float* y, int64_t n) {
  constexpr int W = F::W;
  int64_t i = 0;
  switch (fn) {
#define LOCKSTEP_MATH_CASE(NAME)                                                 \
  case Fn::NAME:                                                                 \
    for (; i + 2 * W <= n; i += 2 * W) {                                         \
      const Twin<F> r = NAME##_k(Twin<F>(F::loadu(x + i), F::loadu(x + i + W))); \
      storeu(y + i, r.a);                                                        \
      storeu(y + i + W, r.b);                                                    \
    }                                                                            \
    for (; i + W <= n; i += W) storeu(y + i, NAME##_k(F::loadu(x + i)));         \
    break;
    LOCKSTEP_MATH_CASE(exp)
    LOCKSTEP_MATH_CASE(log)
    LOCKSTEP_MATH_CASE(tanh)
    LOCKSTEP_MATH_CASE(erf)
    LOCKSTEP_MATH_CASE(sinpi)
    LOCKSTEP_MATH_CASE(cospi)
    LOCKSTEP_MATH_CASE(gelu_tanh)
    LOCKSTEP_MATH_CASE(gelu_tanh_grad)
#undef LOCKSTEP_MATH_CASE
  }
  if (i < n) store_n(y + i, apply_(fn, F::load_n(x + i, n - i)), n - i);
}

// y[i] = exp(x[i] - shift) over [0, n): exactly exp_k of the rounded difference, i.e. the bits
// of subtracting and then calling the exp array kernel, in one pass (the softmax's rows).
// y == x is allowed. Loop structure as in run_lanes_.
template <class F>
inline void run_exp_shift_lanes_(const float* x, float shift, float* y, int64_t n) {
  constexpr int W = F::W;
  int64_t i = 0;
  const F sh(shift);
  const Twin<F> sh2(sh, sh);
  for (; i + 2 * W <= n; i += 2 * W) {
    const Twin<F> r = exp_k(Twin<F>(F::loadu(x + i), F::loadu(x + i + W)) - sh2);
    storeu(y + i, r.a);
    storeu(y + i + W, r.b);
  }
  for (; i + W <= n; i += W) storeu(y + i, exp_k(F::loadu(x + i) - sh));
  if (i < n) store_n(y + i, exp_k(F::load_n(x + i, n - i) - sh), n - i);
}

// gelu_pair_k over x[0..n): y = gelu, g = gelu'; g may alias x (each vector is loaded before
// either store). Two vectors at a time through Twin<F>, then one, then the tail through one
// padded vector, as in run_lanes_.
template <class F>
inline void run_gelu_pair_lanes_(const float* x, float* y, float* g, int64_t n) {
  constexpr int W = F::W;
  int64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    Twin<F> a, b;
    gelu_pair_k(Twin<F>(F::loadu(x + i), F::loadu(x + i + W)), a, b);
    storeu(y + i, a.a);
    storeu(y + i + W, a.b);
    storeu(g + i, b.a);
    storeu(g + i + W, b.b);
  }
  for (; i + W <= n; i += W) {
    F a, b;
    gelu_pair_k(F::loadu(x + i), a, b);
    storeu(y + i, a);
    storeu(g + i, b);
  }
  if (i < n) {
    F a, b;
    gelu_pair_k(F::load_n(x + i, n - i), a, b);
    store_n(y + i, a, n - i);
    store_n(g + i, b, n - i);
  }
}

}  // namespace
}  // namespace lockstep::math::detail

// Defines the array loops of one ISA path over trait T (used once per *_avx2.cpp /
// *_avx512.cpp, inside namespace lockstep::math::detail).
#define LOCKSTEP_MATH_DEFINE(SUFFIX, T)                                           \
  void run_##SUFFIX(Fn fn, const float* x, float* y, int64_t n) {                 \
    run_lanes_<simd::Vec<T>>(fn, x, y, n);                                        \
  }                                                                               \
  void run_gelu_pair_##SUFFIX(const float* x, float* y, float* g, int64_t n) {    \
    run_gelu_pair_lanes_<simd::Vec<T>>(x, y, g, n);                               \
  }                                                                               \
  void run_exp_shift_##SUFFIX(const float* x, float shift, float* y, int64_t n) { \
    run_exp_shift_lanes_<simd::Vec<T>>(x, shift, y, n);                           \
  }
