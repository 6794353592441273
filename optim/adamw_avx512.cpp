// AVX-512 path of the AdamW kernel (compiled with -mavx512f): 16 lanes doing exactly the
// operations of detail::adamw_element, which handles the tail.
#include <immintrin.h>

#include "optim/adamw_kernel.hpp"

namespace lockstep::detail {

void adamw_range_avx512(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                        std::int64_t n) {
  const __m512 decay = _mm512_set1_ps(s.decay_factor), b1 = _mm512_set1_ps(s.beta1),
               omb1 = _mm512_set1_ps(s.one_minus_beta1), b2 = _mm512_set1_ps(s.beta2),
               omb2 = _mm512_set1_ps(s.one_minus_beta2), bc2 = _mm512_set1_ps(s.bc2_sqrt),
               eps = _mm512_set1_ps(s.eps), step = _mm512_set1_ps(s.step_size);
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 pi = _mm512_loadu_ps(p + i);
    const __m512 gi = _mm512_loadu_ps(g + i);
    if (s.decay) pi = _mm512_mul_ps(pi, decay);
    __m512 mi = _mm512_mul_ps(_mm512_loadu_ps(m + i), b1);
    mi = _mm512_fmadd_ps(gi, omb1, mi);
    __m512 vi = _mm512_mul_ps(_mm512_loadu_ps(v + i), b2);
    vi = _mm512_add_ps(vi, _mm512_mul_ps(_mm512_mul_ps(omb2, gi), gi));
    __m512 denom = _mm512_div_ps(_mm512_sqrt_ps(vi), bc2);
    denom = _mm512_add_ps(denom, eps);
    pi = _mm512_sub_ps(pi, _mm512_div_ps(_mm512_mul_ps(step, mi), denom));
    _mm512_storeu_ps(p + i, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
  }
  for (; i < n; ++i) adamw_element(s, p[i], g[i], m[i], v[i]);
}

}  // namespace lockstep::detail
