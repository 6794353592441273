// AVX-512 path of the canonical and chain GEMMs: a 12 x 32 register tile (24 zmm accumulators)
// driven by runtime/gemm_kernel.hpp. Compiled with the AVX-512 flags (CMake, *_avx512.cpp).
// Determinism contract: the same FMAs in the same order as every other path (one
// _mm512_fmadd_ps lane per C element, k increasing), merged by the same canonical tree, so the
// bits equal the scalar reference.
#include <immintrin.h>

#include <Eigen/Core>

#include "runtime/gemm_kernel.hpp"
#include "runtime/transpose_avx512.hpp"

namespace lockstep::gemm_detail {
namespace {

struct V512 {
  using reg = __m512;
  static constexpr int W = 16;
  static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static reg neg_zero() { return _mm512_set1_ps(-0.0f); }
  static reg load(const float* p) { return _mm512_load_ps(p); }
  static reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static void store(float* p, reg x) { _mm512_store_ps(p, x); }
  static void storeu(float* p, reg x) { _mm512_storeu_ps(p, x); }
  static reg load_partial(const float* p, int n) {
    return _mm512_mask_loadu_ps(neg_zero(), mask(n), p);
  }
  static void store_partial(float* p, reg x, int n) { _mm512_mask_storeu_ps(p, mask(n), x); }
  // Packing helper (optional member, used by the driver when present):
  // dst[k * ldd + c] = src[c * lds + k] for c, k < 16 (a 16 x 16 transpose; pure data moves).
  static void transpose16(const float* src, std::int64_t lds, float* dst, std::int64_t ldd) {
    simd::transpose16_avx512(src, lds, dst, ldd);
  }
};

using K512 = Kernel<V512, 12, 2>;

}  // namespace

void eigen_avx512(const GemmArgs& g) {
  using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
  using MutMap = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;
  if (g.M == 0 || g.N == 0) return;
  Eigen::setNbThreads(g.threads);
  const ConstMap a(g.A, g.ta == Trans::N ? g.M : g.K, g.ta == Trans::N ? g.K : g.M,
                   Eigen::OuterStride<>(g.lda));
  const ConstMap b(g.B, g.tb == Trans::N ? g.K : g.N, g.tb == Trans::N ? g.N : g.K,
                   Eigen::OuterStride<>(g.ldb));
  MutMap c(g.C, g.M, g.N, Eigen::OuterStride<>(g.ldc));
  if (g.ta == Trans::N && g.tb == Trans::N) c.noalias() = a * b;
  if (g.ta == Trans::N && g.tb == Trans::T) c.noalias() = a * b.transpose();
  if (g.ta == Trans::T && g.tb == Trans::N) c.noalias() = a.transpose() * b;
  if (g.ta == Trans::T && g.tb == Trans::T) c.noalias() = a.transpose() * b.transpose();
}

std::string eigen_info_avx512() {
  return "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." +
         std::to_string(EIGEN_MAJOR_VERSION) + "." + std::to_string(EIGEN_MINOR_VERSION) + " (" +
         Eigen::SimdInstructionSetsInUse() + ")";
}

void canonical_avx512(const GemmArgs& g, const GemmTuning& t) {
  Driver<K512>::run(g, t, true);
}
void chain_avx512(const GemmArgs& g, const GemmTuning& t) {
  Driver<K512>::run(g, t, false);
}

}  // namespace lockstep::gemm_detail
