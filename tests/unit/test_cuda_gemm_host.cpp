// The per-thread body of the CUDA invariant-mode GEMM (runtime/cuda/gemm_canonical_core.hpp),
// compiled here by the host compiler and run over an emulated launch grid, against
// lockstep::gemm canonical and reference: the same bits for shapes, blocks, transpositions,
// leading dimensions and micro-tile shapes. Needs no GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/cuda/gemm_canonical_core.hpp"
#include "runtime/gemm.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::same_bits;

namespace {

struct Case {
  std::int64_t M, N, K;
  Trans ta, tb;
  int block;
  std::int64_t pad;  // extra leading-dimension elements
};

// Runs canonical_gemm_tile<TM, TN> for every tile, like the CUDA grid does.
template <int TM, int TN>
void emulate(const hd::GemmView& g) {
  for (std::int64_t i0 = 0; i0 < g.M; i0 += TM)
    for (std::int64_t j0 = 0; j0 < g.N; j0 += TN) hd::canonical_gemm_tile<TM, TN>(g, i0, j0);
}

}  // namespace

TEST_CASE("CUDA canonical GEMM body == lockstep::gemm canonical bit for bit", "[cuda][gemm]") {
  const Case cases[] = {
      {1, 1, 1, Trans::N, Trans::N, 64, 0},      {5, 7, 0, Trans::N, Trans::N, 64, 0},
      {13, 9, 64, Trans::N, Trans::N, 64, 3},    {13, 9, 65, Trans::T, Trans::N, 64, 0},
      {33, 17, 300, Trans::N, Trans::T, 64, 1},  {8, 70, 257, Trans::T, Trans::T, 7, 2},
      {64, 64, 1000, Trans::N, Trans::N, 64, 0}, {3, 130, 129, Trans::N, Trans::T, 1, 0},
      {19, 5, 777, Trans::T, Trans::N, 32, 5},
  };
  std::uint64_t seed = 1;
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
  for (std::int64_t seq : {0, 3, 100})
  for (const Case& c : cases) {
    if (seq > 0 && (tree == TreeShape::pow2 || c.K % seq != 0)) continue;  // token axis: halving
    INFO("tree=" << enum_name(tree) << " seq=" << seq << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << int(c.ta) << " tb=" << int(c.tb)
              << " block=" << c.block << " pad=" << c.pad);
    const std::int64_t a_rows = c.ta == Trans::N ? c.M : c.K, a_cols = c.ta == Trans::N ? c.K : c.M;
    const std::int64_t b_rows = c.tb == Trans::N ? c.K : c.N, b_cols = c.tb == Trans::N ? c.N : c.K;
    // lockstep::gemm wants leading dimensions >= 1 even when K == 0.
    const std::int64_t lda = std::max<std::int64_t>(1, a_cols + c.pad);
    const std::int64_t ldb = std::max<std::int64_t>(1, b_cols + c.pad), ldc = c.N + c.pad;
    const auto A =
        testing::mixed_floats(std::size_t(std::max<std::int64_t>(1, a_rows * lda)), seed++);
    const auto B =
        testing::mixed_floats(std::size_t(std::max<std::int64_t>(1, b_rows * ldb)), seed++);
    const std::size_t csize = std::size_t(c.M * ldc);
    std::vector<float> want(csize, 42.0f), ref(csize, 42.0f), got44(csize, 42.0f),
        got11(csize, 42.0f), got35(csize, 42.0f);
    for (Isa isa : supported_isas()) {
      KernelCtx ctx{isa, 2, c.block, tree};
      ctx.sequence = seq;
      gemm(ctx, GemmImpl::canonical, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb,
           want.data(), ldc);
      gemm(ctx, GemmImpl::reference, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb,
           ref.data(), ldc);
      REQUIRE(same_bits(want, ref));
    }
    const hd::GemmView g44{c.M,
                           c.N,
                           c.K,
                           A.data(),
                           c.ta == Trans::N ? lda : 1,
                           c.ta == Trans::N ? 1 : lda,
                           B.data(),
                           c.tb == Trans::N ? ldb : 1,
                           c.tb == Trans::N ? 1 : ldb,
                           got44.data(),
                           ldc,
                           hd_rule(SumRule{c.block, tree, seq})};
    emulate<4, 4>(g44);
    hd::GemmView g11 = g44;
    g11.C = got11.data();
    emulate<1, 1>(g11);
    hd::GemmView g35 = g44;
    g35.C = got35.data();
    emulate<3, 5>(g35);
    CHECK(same_bits(got44, want));
    CHECK(same_bits(got11, want));
    CHECK(same_bits(got35, want));
    if (c.K == 0)
      for (std::int64_t i = 0; i < c.M; ++i)
        for (std::int64_t j = 0; j < c.N; ++j) CHECK(std::signbit(got44[std::size_t(i * ldc + j)]));
  }
}

TEST_CASE("the GEMM comparison can fail: canonical differs from one long chain", "[cuda][gemm]") {
  // With K spanning many blocks, the tree of block chains rounds differently from a single
  // chain somewhere in a 32 x 32 output, so an emulation that ignored the blocks would fail.
  const std::int64_t M = 32, N = 32, K = 2048;
  const auto A = testing::mixed_floats(std::size_t(M * K), 91);
  const auto B = testing::mixed_floats(std::size_t(K * N), 92);
  std::vector<float> canon(std::size_t(M * N)), chain(std::size_t(M * N));
  const hd::GemmView g{M, N, K, A.data(), K, 1, B.data(), N, 1, canon.data(), N,
                       hd_rule(SumRule{64})};
  emulate<4, 4>(g);
  gemm(KernelCtx{Isa::scalar, 1, 64}, GemmImpl::chain, Trans::N, Trans::N, M, N, K, A.data(), K,
       B.data(), N, chain.data(), N);
  CHECK_FALSE(same_bits(canon, chain));
}
