// AVX2 path of the canonical and chain GEMMs: a 6 x 16 register tile (12 ymm accumulators)
// driven by runtime/gemm_kernel.hpp. Compiled with the AVX2+FMA flags (CMake, *_avx2.cpp).
// Determinism contract: the same FMAs in the same order as every other path (one
// _mm256_fmadd_ps lane per C element, k increasing), merged by the same canonical tree, so the
// bits equal the scalar reference.
#include <immintrin.h>

#include "runtime/gemm_kernel.hpp"

namespace lockstep::gemm_detail {
namespace {

struct V256 {
  using reg = __m256;
  static constexpr int W = 8;
  static __m256i mask(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static reg neg_zero() { return _mm256_set1_ps(-0.0f); }
  static reg load(const float* p) { return _mm256_load_ps(p); }
  static reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static void store(float* p, reg x) { _mm256_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm256_storeu_ps(p, x); }
  static reg load_partial(const float* p, int n) {
    const __m256i m = mask(n);
    return _mm256_blendv_ps(neg_zero(), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static void store_partial(float* p, reg x, int n) { _mm256_maskstore_ps(p, mask(n), x); }
};

using K256 = Kernel<V256, 6, 2>;

}  // namespace

void canonical_avx2(const GemmArgs& g, const GemmTuning& t) {
  Driver<K256>::run(g, t, true);
}
void chain_avx2(const GemmArgs& g, const GemmTuning& t) {
  Driver<K256>::run(g, t, false);
}

}  // namespace lockstep::gemm_detail
