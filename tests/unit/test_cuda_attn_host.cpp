// The attention products on the device path, checked without a GPU: the CUDA invariant-mode
// GEMM body (runtime/cuda/gemm_canonical_core.hpp), compiled here by the host compiler and run
// over an emulated launch grid on the full-size products of the definition (S = Q K^T over all
// keys; O = P V and dV = P^T dO over all C keys / queries, the masked entries of P being +0.0),
// gives the bits of the CPU's causal products (model/gpt_causal_gemms.hpp: causal blocks only,
// pruned trees, zero-row fix-ups). So a device forward / backward may run attention with the
// one canonical GEMM kernel and keep G3 against the CPU; the causal skip on the device is a
// speed-up still to come, and must keep these bits. Both trees, block counts that are and are
// not powers of two, the fused CPU kernels on and off, and a causal row that sums to an exact
// zero.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "model/gpt_causal_gemms.hpp"
#include "model/kernels/attn_gemm.hpp"
#include "runtime/cuda/gemm_canonical_core.hpp"
#include "runtime/reduce_tree.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::same_bits;

namespace {

// C = op(A) op(B), row-major, by the device body over an emulated grid of 4 x 4 micro-tiles.
std::vector<float> device_gemm(const SumRule& rule, bool a_t, std::int64_t M, std::int64_t N,
                               std::int64_t K, const float* A, std::int64_t lda, bool b_t,
                               const float* B, std::int64_t ldb) {
  std::vector<float> C(std::size_t(M * N), 42.0f);
  const hd::GemmView g{M,
                       N,
                       K,
                       A,
                       a_t ? 1 : lda,
                       a_t ? lda : 1,
                       B,
                       b_t ? 1 : ldb,
                       b_t ? ldb : 1,
                       C.data(),
                       N,
                       hd_rule(rule)};
  for (std::int64_t i0 = 0; i0 < M; i0 += 4)
    for (std::int64_t j0 = 0; j0 < N; j0 += 4) hd::canonical_gemm_tile<4, 4>(g, i0, j0);
  return C;
}

// A causal probability-like matrix: row i has C - 1 - i masked +0.0 entries; row `zero_row`
// holds +0.5 and -0.5 pairs so that its product with a column of ones is an exact zero.
std::vector<float> causal(std::int64_t C, std::uint64_t seed, std::int64_t zero_row) {
  std::vector<float> P = testing::mixed_floats(std::size_t(C * C), seed);
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = i + 1; j < C; ++j) P[std::size_t(i * C + j)] = 0.0f;
  if (zero_row > 0) {
    for (std::int64_t j = 0; j <= zero_row; ++j)
      P[std::size_t(zero_row * C + j)] = j % 2 == 0 ? 0.5f : -0.5f;
    if (zero_row % 2 == 0) P[std::size_t(zero_row * C + zero_row)] = 0.0f;
  }
  return P;
}

}  // namespace

TEST_CASE("device attention products (full-size canonical GEMM body) == the CPU's causal ones",
          "[cuda][attn]") {
  const int B = 16;
  const std::int64_t hd = 8;
  std::uint64_t seed = 7;
  for (Isa isa : supported_isas())
    for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
      for (std::int64_t C :
           {std::int64_t(64), std::int64_t(96), std::int64_t(48), std::int64_t(37)})
        for (bool fused : {false, true}) {  // fused: model/kernels/attn_gemm.hpp where it applies
          if (tree == TreeShape::pow2 && C != 64) continue;  // pow2 keeps G3 only on 2^j blocks
          INFO("isa=" << enum_name(isa) << " tree=" << enum_name(tree) << " C=" << C
                      << " fused=" << fused);
          const TpContext tp(nullptr, Determinism::invariant, KernelCtx{isa, 1, B, tree});
          const gpt_detail::CausalGemms cg(tp, C, B, /*perturbed=*/false, fused);
          std::vector<float> scratch(std::size_t(
              std::max<std::int64_t>(8 * cg.rows() * hd, attn_gemm_scratch_floats(C, hd, B))));
          const SumRule rule{B, tree, 0};

          const auto Q = testing::mixed_floats(std::size_t(C * hd), seed++);
          const auto K = testing::mixed_floats(std::size_t(C * hd), seed++);
          std::vector<float> S(std::size_t(C * C), 42.0f);
          cg.nt(hd, Q.data(), hd, K.data(), hd, S.data(), scratch.data());
          const auto S_dev = device_gemm(rule, false, C, C, hd, Q.data(), hd, true, K.data(), hd);
          for (std::int64_t i = 0; i < C; ++i)  // the causal entries (j <= i) of each row
            CHECK(
                same_bits(&S[std::size_t(i * C)], &S_dev[std::size_t(i * C)], std::size_t(i + 1)));

          const auto P = causal(C, seed++, C / 2);
          std::vector<float> X = testing::mixed_floats(std::size_t(C * hd), seed++);
          for (std::int64_t j = 0; j < C; ++j)
            X[std::size_t(j * hd)] = 1.0f;  // column 0: exact zero
          std::vector<float> O(std::size_t(C * hd), 42.0f), dV(std::size_t(C * hd), 42.0f);
          cg.prefix(hd, P.data(), C, X.data(), hd, O.data(), hd, scratch.data());
          cg.suffix(hd, P.data(), C, X.data(), hd, dV.data(), hd, scratch.data());
          CHECK(same_bits(O, device_gemm(rule, false, C, hd, C, P.data(), C, false, X.data(), hd)));
          CHECK(same_bits(dV, device_gemm(rule, true, C, hd, C, P.data(), C, false, X.data(), hd)));
        }
}

TEST_CASE("the attention comparison can fail: another block size gives other bits",
          "[cuda][attn]") {
  const std::int64_t C = 96, hd = 8;
  const TpContext tp(nullptr, Determinism::invariant,
                     KernelCtx{Isa::scalar, 1, 16, TreeShape::halving});
  const gpt_detail::CausalGemms cg(tp, C, 16, false, false);
  std::vector<float> scratch(
      std::size_t(std::max<std::int64_t>(8 * cg.rows() * hd, attn_gemm_scratch_floats(C, hd, 16))));
  const auto P = causal(C, 99, 0);
  const auto X = testing::mixed_floats(std::size_t(C * hd), 100);
  std::vector<float> O(std::size_t(C * hd));
  cg.prefix(hd, P.data(), C, X.data(), hd, O.data(), hd, scratch.data());
  const SumRule other{32, TreeShape::halving, 0};
  CHECK_FALSE(same_bits(O, device_gemm(other, false, C, hd, C, P.data(), C, false, X.data(), hd)));
}
