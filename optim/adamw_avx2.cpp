// AVX2 path of the AdamW kernel (compiled with -mavx2 -mfma): 8 lanes doing exactly the
// operations of detail::adamw_element, which handles the tail.
#include <immintrin.h>

#include "optim/adamw_kernel.hpp"

namespace lockstep::detail {

void adamw_range_avx2(const AdamWScalars& s, float* p, const float* g, float* m, float* v,
                      std::int64_t n) {
  const __m256 decay = _mm256_set1_ps(s.decay_factor), b1 = _mm256_set1_ps(s.beta1),
               omb1 = _mm256_set1_ps(s.one_minus_beta1), b2 = _mm256_set1_ps(s.beta2),
               omb2 = _mm256_set1_ps(s.one_minus_beta2), bc2 = _mm256_set1_ps(s.bc2_sqrt),
               eps = _mm256_set1_ps(s.eps), step = _mm256_set1_ps(s.step_size);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    const __m256 gi = _mm256_loadu_ps(g + i);
    if (s.decay) pi = _mm256_mul_ps(pi, decay);
    __m256 mi = _mm256_mul_ps(_mm256_loadu_ps(m + i), b1);
    mi = _mm256_fmadd_ps(gi, omb1, mi);
    __m256 vi = _mm256_mul_ps(_mm256_loadu_ps(v + i), b2);
    vi = _mm256_add_ps(vi, _mm256_mul_ps(_mm256_mul_ps(omb2, gi), gi));
    __m256 denom = _mm256_div_ps(_mm256_sqrt_ps(vi), bc2);
    denom = _mm256_add_ps(denom, eps);
    pi = _mm256_sub_ps(pi, _mm256_div_ps(_mm256_mul_ps(step, mi), denom));
    _mm256_storeu_ps(p + i, pi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
  }
  for (; i < n; ++i) adamw_element(s, p[i], g[i], m[i], v[i]);
}

}  // namespace lockstep::detail
