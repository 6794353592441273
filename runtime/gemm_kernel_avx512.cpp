// The avx512 path of the canonical and chain GEMMs: runtime/gemm_kernel.hpp over simd::Avx512
// with a 12 x 32 or an 8 x 48 register tile (24 zmm accumulators either way; which one,
// avx512_tile_rows in runtime/gemm.hpp), compiled with the avx512 flags and reached only
// through runtime/gemm.cpp's dispatch. The same FMAs in the same order as every other path,
// merged by the same canonical tree, so the bits equal the scalar reference whatever the tile
// (docs/design.md section 2). Also Eigen's GEMM, built for AVX-512.
#include <Eigen/Core>

#include "runtime/gemm_kernel.hpp"
#include "runtime/simd_avx512.hpp"

namespace lockstep::gemm_detail {

namespace {
using Tile12x32 = Driver<Kernel<simd::Avx512, 12, 2>>;
using Tile8x48 = Driver<Kernel<simd::Avx512, 8, 3>>;
bool wide(const GemmArgs& g, const GemmTuning& t) {
  return avx512_tile_rows(t, g.N) == 8;
}
}  // namespace

void canonical_avx512(const GemmArgs& g, const GemmTuning& t) {
  wide(g, t) ? Tile8x48::run(g, t, true) : Tile12x32::run(g, t, true);
}
void chain_avx512(const GemmArgs& g, const GemmTuning& t) {
  wide(g, t) ? Tile8x48::run(g, t, false) : Tile12x32::run(g, t, false);
}
std::vector<GemmScratch> scratch_avx512(const GemmArgs& g, const GemmTuning& t, bool canonical) {
  return wide(g, t) ? Tile8x48::scratch(g, t, canonical) : Tile12x32::scratch(g, t, canonical);
}

// Eigen's GEMM (fast mode and the tests), instantiated in this TU only: Eigen templates
// compiled with different ISA flags in several TUs would collide at link time.
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

// Plain values only: a std::string built here would instantiate string members with AVX-512
// flags, and the linker may keep that copy for every caller (SIGILL on AVX2 CPUs).
EigenInfo eigen_info_avx512() {
  return {EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION,
          Eigen::SimdInstructionSetsInUse()};
}

}  // namespace lockstep::gemm_detail
