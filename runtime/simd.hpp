// Vector traits: the one mechanism by which a kernel is written once and compiled per ISA path
// (docs/design.md section 2, "ISA dispatch must not change bits").
//
// A trait T names one ISA path's registers and maps every operation to the single instruction
// (or, on the scalar path, the single C++ operation) of that path. This header holds the
// baseline traits (Scalar: one float, std::fma; Sse2: four floats, baseline x86-64) and the
// lane types built on any trait; runtime/simd_avx2.hpp (Avx2) and runtime/simd_avx512.hpp
// (Avx512) hold the wide ones. Those two include <immintrin.h> and refuse to compile without
// their ISA flags: include them only from *_avx2.cpp / *_avx512.cpp (the files CMake's
// lockstep_module gives those flags), so that no AVX instruction reaches a baseline TU.
//
// The pattern, the same for every per-ISA kernel (AdamW, transcendentals, LayerNorm rows,
// softmax rows, GEMM): the kernel is a template over T in a private *_impl.hpp / *_kernel.hpp
// header that ends with a LOCKSTEP_<KERNEL>_DEFINE(SUFFIX, T) macro defining the exported entry
// points NAME_SUFFIX, and each file_avx2.cpp / file_avx512.cpp is nothing but
//   #include "<the kernel's header>"
//   #include "runtime/simd_avx2.hpp"
//   LOCKSTEP_<KERNEL>_DEFINE(avx2, simd::Avx2)  // inside the kernel's namespace
// (include order free: the kernel's names are looked up at the instantiation). The baseline
// file dispatches on ctx.isa, and its own path is the same template over Scalar (Sse2 for the
// LayerNorm rows): through the same macro, except the transcendentals, whose scalar path runs
// the kernels one element at a time (the scalar API's reference loops).
//
// Trait members (T::...; a kernel uses the ones it needs, a missing one is a compile error,
// never a silent fallback):
//   W                      lanes; reg / ireg / mask: float lanes, int32 lanes, lane mask
//                          (mask{} selects no lane)
//   masked                 true when the trait also has the masked members listed last
//                          (AVX-512); kernels take their masked code under if constexpr
//   set1(x), zero(), neg_zero(), bcast(p): broadcast x, +0.0, -0.0, *p
//   load / store (aligned), loadu / storeu (unaligned)
//   load_n(p, n) / store_n(p, x, n): the first n lanes (0 < n < W), +0.0 in the others; nothing
//     past p[n - 1] is read or written (the transcendentals' tails)
//   load_partial(p, n) / store_partial(p, x, n): the same with -0.0 in the other lanes, the
//     additive identity (the GEMM's C tiles)
//   add sub mul div sqrt neg, fma(a, b, c) = a*b + c rounded once
//   lt le gt ge eq (ordered: false on NaN), ne (unordered: true on NaN) -> mask; sel(m, a, b)
//   iset1 iadd isub iand ior ixor ieq, shl<N> sra<N> (int32 lanes), as_int / as_float (bit
//   casts), to_float (int32 -> float); mand / mor (mask and / or)
//   transpose(src, lds, dst, ldd): dst[k*ldd + c] = src[c*lds + k] for c, k < W (pure moves;
//     dst rows W-float aligned)
//   masked traits also: all(), lanes(n) (lanes [0, n), 0 <= n < W), any(m), iota(), ige,
//     maskz_loadu / mask_storeu / maskz_iloadu, max (a > b ? a : b), mask_max, mask_add,
//     mask3_fma, maskz_mul, maskz_div, mask_ieq (the intrinsics of the same names)
//
// Lane types: Vec<T> (float lanes; + - * / and unary -, comparisons giving Mask<T>, fma, sqrt,
// sel, as_int, to_float, loads and stores), Int<T> (int32 lanes; + - & | ^ ==, shl<N>, sra<N>,
// as_float) and Mask<T> (& |): operator syntax over T for the kernels written as formulas
// (optim/adamw_kernel.hpp, runtime/transcendental_impl.hpp). Kernels that move registers
// around (the GEMM, the masked softmax rows) call T's members directly. GnuVec<W> is GCC's
// generic vector of W floats for kernels that let the compiler pick the instructions
// (model/kernels/ln_rows_impl.hpp: one row per lane).
//
// Scalar and the lane types' operations are LOCKSTEP_HD (runtime/hd.hpp: empty for the host
// compiler; fma / div / sqrt are hd::'s correctly rounded spellings, std:: on the host), so a
// kernel over Vec<Scalar> also compiles for the GPU, one float per thread
// (runtime/cuda/math_device.hpp).
//
// Determinism contract: every trait operation is one IEEE-rounded operation per lane (fma: one
// rounding; Scalar's fma is std::fma, correctly rounded) and a selection moves bits (never a
// float move that could quiet a NaN), so a kernel written once over T performs the same IEEE
// operations in the same order per lane on every path: the paths' bits are identical.
// Everything lives in an anonymous namespace: each TU (compiled with its own -m flags) gets a
// private copy, so the linker never folds an AVX-compiled helper into a baseline TU.
#pragma once

#include <emmintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/hd.hpp"

namespace lockstep::simd {
namespace {

// ---- Scalar: one float, the portable path ------------------------------------------------------
struct Scalar {
  static constexpr int W = 1;
  static constexpr bool masked = false;
  using reg = float;
  using ireg = std::uint32_t;  // unsigned inside, so wrap-around is defined
  using mask = bool;

  LOCKSTEP_HD static reg set1(float x) { return x; }
  LOCKSTEP_HD static reg zero() { return 0.0f; }
  LOCKSTEP_HD static reg neg_zero() { return -0.0f; }
  LOCKSTEP_HD static reg bcast(const float* p) { return *p; }
  LOCKSTEP_HD static reg load(const float* p) { return *p; }
  LOCKSTEP_HD static reg loadu(const float* p) { return *p; }
  LOCKSTEP_HD static void store(float* p, reg x) { *p = x; }
  LOCKSTEP_HD static void storeu(float* p, reg x) { *p = x; }
  // With one lane there is no partial vector (0 < n < W is empty); the GEMM's edge code still
  // names these.
  LOCKSTEP_HD static reg load_partial(const float* p, int) { return *p; }
  LOCKSTEP_HD static void store_partial(float* p, reg x, int) { *p = x; }

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
    return std::uint32_t(std::int32_t(a) >> N);  // arithmetic shift (C++20)
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
  LOCKSTEP_HD static reg to_float(ireg a) {
    return float(std::int32_t(a));
  }
  // Selects by bits (never by a float move that could quiet a signaling NaN).
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

// ---- Sse2: four floats, baseline x86-64 (the LayerNorm rows' baseline groups) ------------------
// Only what its kernel needs: the lane count and the 4 x 4 tile transpose.
struct Sse2 {
  static constexpr int W = 4;
  static constexpr bool masked = false;
  using reg = __m128;
  [[gnu::always_inline]] static void transpose(const float* src, std::int64_t lds, float* dst,
                                               std::int64_t ldd) {
    __m128 r0 = _mm_loadu_ps(src), r1 = _mm_loadu_ps(src + lds), r2 = _mm_loadu_ps(src + 2 * lds),
           r3 = _mm_loadu_ps(src + 3 * lds);
    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
    _mm_store_ps(dst, r0);
    _mm_store_ps(dst + ldd, r1);
    _mm_store_ps(dst + 2 * ldd, r2);
    _mm_store_ps(dst + 3 * ldd, r3);
  }
};

// ---- lane types over a trait -------------------------------------------------------------------
template <class T>
struct Mask {
  typename T::mask v;
  friend LOCKSTEP_HD Mask operator&(Mask a, Mask b) { return {T::mand(a.v, b.v)}; }
  friend LOCKSTEP_HD Mask operator|(Mask a, Mask b) { return {T::mor(a.v, b.v)}; }
};

template <class T>
struct Int {
  typename T::ireg v;
  Int() = default;
  LOCKSTEP_HD explicit Int(std::int32_t x) : v(T::iset1(x)) {}
  LOCKSTEP_HD static Int raw(typename T::ireg x) {
    Int r;
    r.v = x;
    return r;
  }
  friend LOCKSTEP_HD Int operator+(Int a, Int b) { return raw(T::iadd(a.v, b.v)); }
  friend LOCKSTEP_HD Int operator-(Int a, Int b) { return raw(T::isub(a.v, b.v)); }
  friend LOCKSTEP_HD Int operator&(Int a, Int b) { return raw(T::iand(a.v, b.v)); }
  friend LOCKSTEP_HD Int operator|(Int a, Int b) { return raw(T::ior(a.v, b.v)); }
  friend LOCKSTEP_HD Int operator^(Int a, Int b) { return raw(T::ixor(a.v, b.v)); }
  friend LOCKSTEP_HD Mask<T> operator==(Int a, Int b) { return {T::ieq(a.v, b.v)}; }
};
template <int N, class T>
LOCKSTEP_HD inline Int<T> shl(Int<T> a) {
  return Int<T>::raw(T::template shl<N>(a.v));
}
template <int N, class T>
LOCKSTEP_HD inline Int<T> sra(Int<T> a) {
  return Int<T>::raw(T::template sra<N>(a.v));
}

template <class T>
struct Vec {
  using I = Int<T>;
  using M = Mask<T>;
  static constexpr int W = T::W;
  typename T::reg v;
  Vec() = default;
  LOCKSTEP_HD Vec(float x) : v(T::set1(x)) {}  // NOLINT: broadcast
  LOCKSTEP_HD static Vec raw(typename T::reg x) {
    Vec r;
    r.v = x;
    return r;
  }
  LOCKSTEP_HD static Vec load(const float* p) { return raw(T::load(p)); }
  LOCKSTEP_HD static Vec loadu(const float* p) { return raw(T::loadu(p)); }
  LOCKSTEP_HD static Vec load_n(const float* p, std::int64_t n) { return raw(T::load_n(p, n)); }
  friend LOCKSTEP_HD Vec operator+(Vec a, Vec b) { return raw(T::add(a.v, b.v)); }
  friend LOCKSTEP_HD Vec operator-(Vec a, Vec b) { return raw(T::sub(a.v, b.v)); }
  friend LOCKSTEP_HD Vec operator-(Vec a) { return raw(T::neg(a.v)); }
  friend LOCKSTEP_HD Vec operator*(Vec a, Vec b) { return raw(T::mul(a.v, b.v)); }
  friend LOCKSTEP_HD Vec operator/(Vec a, Vec b) { return raw(T::div(a.v, b.v)); }
  friend LOCKSTEP_HD M operator<(Vec a, Vec b) { return {T::lt(a.v, b.v)}; }
  friend LOCKSTEP_HD M operator<=(Vec a, Vec b) { return {T::le(a.v, b.v)}; }
  friend LOCKSTEP_HD M operator>(Vec a, Vec b) { return {T::gt(a.v, b.v)}; }
  friend LOCKSTEP_HD M operator>=(Vec a, Vec b) { return {T::ge(a.v, b.v)}; }
  friend LOCKSTEP_HD M operator==(Vec a, Vec b) { return {T::eq(a.v, b.v)}; }
  friend LOCKSTEP_HD M operator!=(Vec a, Vec b) { return {T::ne(a.v, b.v)}; }
};
template <class T>
LOCKSTEP_HD inline Vec<T> fma(Vec<T> a, Vec<T> b, Vec<T> c) {
  return Vec<T>::raw(T::fma(a.v, b.v, c.v));
}
template <class T>
LOCKSTEP_HD inline Vec<T> sqrt(Vec<T> a) {
  return Vec<T>::raw(T::sqrt(a.v));
}
template <class T>
LOCKSTEP_HD inline Int<T> as_int(Vec<T> a) {
  return Int<T>::raw(T::as_int(a.v));
}
template <class T>
LOCKSTEP_HD inline Vec<T> as_float(Int<T> a) {
  return Vec<T>::raw(T::as_float(a.v));
}
template <class T>
LOCKSTEP_HD inline Vec<T> to_float(Int<T> a) {
  return Vec<T>::raw(T::to_float(a.v));
}
template <class T>
LOCKSTEP_HD inline Vec<T> sel(Mask<T> m, Vec<T> a, Vec<T> b) {
  return Vec<T>::raw(T::sel(m.v, a.v, b.v));
}
template <class T>
LOCKSTEP_HD inline void store(float* p, Vec<T> a) {
  T::store(p, a.v);
}
template <class T>
LOCKSTEP_HD inline void storeu(float* p, Vec<T> a) {
  T::storeu(p, a.v);
}
template <class T>
LOCKSTEP_HD inline void store_n(float* p, Vec<T> a, std::int64_t n) {
  T::store_n(p, a.v, n);
}

// GCC's generic vector of W floats: element-wise + - * / and lane access v[l], compiled to the
// TU's ISA (no FMA under -ffp-contract=off).
template <int W>
struct GnuVec {
  typedef float type __attribute__((vector_size(W * sizeof(float))));
};

}  // namespace
}  // namespace lockstep::simd
