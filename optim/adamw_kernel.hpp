// Internal: the elementwise AdamW kernel, written once over a vector trait T of
// runtime/simd.hpp and instantiated per ISA path by LOCKSTEP_ADAMW_DEFINE (optim/adamw.cpp:
// Scalar; adamw_avx2.cpp: Avx2; adamw_avx512.cpp: Avx512).
// Determinism contract (docs/design.md section 2): every lane performs the same IEEE operations
// in the same order (optim/adamw.hpp; one fma, where the moment update has it), and the tail of
// a vector path runs the same operations on one-float lanes, so every path's bits are identical.
#pragma once

#include <cstdint>

#include "optim/adamw.hpp"
#include "runtime/simd.hpp"

namespace lockstep::detail {

void adamw_range_scalar(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                        std::int64_t n);
void adamw_range_avx2(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                      std::int64_t n);
void adamw_range_avx512(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                        std::int64_t n);

// Anonymous: one private copy per TU, so the copies compiled with AVX flags never replace the
// scalar one.
namespace {

// The scalars of AdamWScalars broadcast to F's lanes, once per call (held in registers across
// the loop).
template <class F>
struct AdamWLanes {
  bool decay;
  F decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, step_size;
  explicit AdamWLanes(const AdamWScalars& s)
      : decay(s.decay),
        decay_factor(s.decay_factor),
        beta1(s.beta1),
        one_minus_beta1(s.one_minus_beta1),
        beta2(s.beta2),
        one_minus_beta2(s.one_minus_beta2),
        bc2_sqrt(s.bc2_sqrt),
        eps(s.eps),
        step_size(s.step_size) {}
};

// F::W elements at p, g, m, v: the reference order of operations.
template <class F>
inline void adamw_lanes(const AdamWLanes<F>& c, float* p, const float* g, float* m, float* v) {
  F pi = F::loadu(p);
  const F gi = F::loadu(g);
  if (c.decay) pi = pi * c.decay_factor;
  F mi = F::loadu(m) * c.beta1;
  mi = fma(gi, c.one_minus_beta1, mi);
  F vi = F::loadu(v) * c.beta2;
  vi = vi + (c.one_minus_beta2 * gi) * gi;
  F denom = sqrt(vi) / c.bc2_sqrt;
  denom = denom + c.eps;
  pi = pi - (c.step_size * mi) / denom;
  storeu(p, pi);
  storeu(m, mi);
  storeu(v, vi);
}

// Elements [0, n): whole vectors of T, then the tail one element at a time (Scalar lanes).
template <class T>
inline void adamw_range(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                        std::int64_t n) {
  using F = simd::Vec<T>;
  using F1 = simd::Vec<simd::Scalar>;
  const AdamWLanes<F> c(s);
  std::int64_t i = 0;
  for (; i + F::W <= n; i += F::W) adamw_lanes(c, p + i, g + i, m + i, v + i);
  const AdamWLanes<F1> c1(s);
  for (; i < n; ++i) adamw_lanes(c1, p + i, g + i, m + i, v + i);
}

}  // namespace
}  // namespace lockstep::detail

// Defines adamw_range_SUFFIX over trait T (used once per adamw*.cpp, inside lockstep::detail).
#define LOCKSTEP_ADAMW_DEFINE(SUFFIX, T)                                                         \
  void adamw_range_##SUFFIX(const AdamWScalars& s, float* p, const float* g, float* m, float* v, \
                            std::int64_t n) {                                                    \
    adamw_range<T>(s, p, g, m, v, n);                                                            \
  }
