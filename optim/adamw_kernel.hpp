// Internal: the elementwise AdamW kernel shared by the scalar, AVX2 and AVX-512 paths of
// optim/adamw.cpp. Every path performs the same IEEE operations per element (see
// optim/adamw.hpp), so their bits are identical.
#pragma once

#include <cmath>
#include <cstdint>

#include "optim/adamw.hpp"

namespace lockstep::detail {

// One element, the reference order of operations; the vector paths mirror it lane-wise and
// use it for their tails.
// static: internal linkage, so the copies compiled with AVX flags never replace the scalar one.
static inline void adamw_element(const AdamWScalars& s, float& p, float g, float& m, float& v) {
  float pi = p;
  if (s.decay) pi = pi * s.decay_factor;
  float mi = m * s.beta1;
  mi = std::fma(g, s.one_minus_beta1, mi);
  float vi = v * s.beta2;
  vi = vi + (s.one_minus_beta2 * g) * g;
  float denom = std::sqrt(vi) / s.bc2_sqrt;
  denom = denom + s.eps;
  pi = pi - (s.step_size * mi) / denom;
  p = pi;
  m = mi;
  v = vi;
}

void adamw_range_scalar(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                        std::int64_t n);
void adamw_range_avx2(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                      std::int64_t n);
void adamw_range_avx512(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                        std::int64_t n);

}  // namespace lockstep::detail
