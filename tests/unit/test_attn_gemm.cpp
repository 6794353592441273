// The fused causal attention GEMMs (model/attn_gemm.hpp) against the canonical and chain GEMMs
// of runtime/gemm.hpp on full-size operands: scores bit for bit on the causal part; prefix and
// suffix bit for bit on every nonzero element and zero where the GEMM gives a zero (the
// caller's row fix-up then makes those rows exact; gpt.cpp's CausalGemms, tested end to end in
// test_model.cpp). Shapes: C from 16 to 256 (C a multiple of B or not, C < B; C 112 and 208
// with B 16 give 7 and 13 leaves, whose trees end in a fold over two and three levels),
// head_dim 16-64, blocks 16-64 and 128, tree (invariant) and chain (deterministic), padded
// leading dimensions, inputs with signed zeros, and zero columns that force zero outputs.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <vector>

#include "../support/test_data.hpp"
#include "model/attn_gemm.hpp"
#include "runtime/gemm.hpp"

using namespace lockstep;
using lockstep::testing::mixed_floats;

namespace {

bool bits_equal(float a, float b) {
  return std::memcmp(&a, &b, 4) == 0;
}

// A causal [C, C] matrix (ld C): mixed values for j <= i, +0.0 above the diagonal.
std::vector<float> causal_matrix(std::int64_t C, std::uint64_t seed) {
  std::vector<float> p = mixed_floats(static_cast<std::size_t>(C * C), seed);
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = i + 1; j < C; ++j) p[i * C + j] = 0.0f;
  return p;
}

// Elements equal bit for bit, or both zeros (of any sign); counts the zeros seen.
void check_rows(const std::vector<float>& got, const std::vector<float>& want, std::int64_t C,
                std::int64_t hd, std::int64_t ld, int& zeros) {
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t c = 0; c < hd; ++c) {
      const float g = got[i * ld + c], w = want[i * ld + c];
      if (w == 0.0f) {
        ++zeros;
        CHECK(g == 0.0f);
      } else if (!bits_equal(g, w)) {
        FAIL_CHECK("row " << i << " col " << c << ": got " << g << " want " << w);
      }
    }
}

}  // namespace

TEST_CASE("fused causal attention GEMMs == the canonical / chain GEMM") {
  const KernelCtx probe = KernelCtx::best(1, 64);
  if (probe.isa != Isa::avx512) {
    WARN("no AVX-512 on this CPU: the fused attention kernels are not used here; skipped");
    return;
  }
  int cases = 0, zeros = 0;
  for (std::int64_t C : {16, 48, 64, 80, 112, 208, 256}) {
    for (std::int64_t hd : {16, 32, 64}) {
      for (int B : {16, 32, 64, 128}) {
        for (bool tree : {true, false}) {
          const KernelCtx ctx{Isa::avx512, 1, B};
          if (!attn_gemm_supported(ctx, C, hd, tree)) continue;
          ++cases;
          INFO("C " << C << " hd " << hd << " B " << B << " tree " << tree);
          const GemmImpl impl = tree ? GemmImpl::canonical : GemmImpl::chain;
          const std::int64_t ld = hd + 16;  // padded rows
          std::vector<float> q = mixed_floats(static_cast<std::size_t>(C * ld), 1 + C + hd);
          std::vector<float> x = mixed_floats(static_cast<std::size_t>(C * ld), 2 + C * hd);
          for (std::int64_t i = 0; i < C; ++i) x[i * ld + 3] = 0.0f;  // a zero output column
          const std::vector<float> p = causal_matrix(C, 3 + B);
          std::vector<float> scratch(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B)));

          // scores: S[i, j] for j <= i.
          std::vector<float> s(static_cast<std::size_t>(C * C), 7.0f), s_ref(s.size());
          causal_scores(C, hd, q.data(), ld, x.data(), ld, s.data(), scratch.data());
          gemm(ctx, impl, Trans::N, Trans::T, C, C, hd, q.data(), ld, x.data(), ld, s_ref.data(),
               C);
          bool scores_ok = true;
          for (std::int64_t i = 0; i < C; ++i)
            for (std::int64_t j = 0; j <= i; ++j)
              scores_ok = scores_ok && bits_equal(s[i * C + j], s_ref[i * C + j]);
          CHECK(scores_ok);

          // prefix: Y = P X.
          std::vector<float> y(static_cast<std::size_t>(C * ld), 7.0f), y_ref(y);
          causal_prefix(C, hd, B, tree, p.data(), x.data(), ld, y.data(), ld, scratch.data());
          gemm(ctx, impl, Trans::N, Trans::N, C, hd, C, p.data(), C, x.data(), ld, y_ref.data(),
               ld);
          check_rows(y, y_ref, C, hd, ld, zeros);

          // suffix: Y = P^T X.
          std::vector<float> z(static_cast<std::size_t>(C * ld), 7.0f), z_ref(z);
          causal_suffix(C, hd, B, tree, p.data(), x.data(), ld, z.data(), ld, scratch.data());
          gemm(ctx, impl, Trans::T, Trans::N, C, hd, C, p.data(), C, x.data(), ld, z_ref.data(),
               ld);
          check_rows(z, z_ref, C, hd, ld, zeros);
          // The padding between rows is untouched.
          bool pad_ok = true;
          for (std::int64_t i = 0; i < C; ++i)
            for (std::int64_t c = hd; c < ld; ++c)
              pad_ok = pad_ok && y[i * ld + c] == 7.0f && z[i * ld + c] == 7.0f;
          CHECK(pad_ok);
        }
      }
    }
  }
  CHECK(cases > 40);
  CHECK(zeros > 0);
}

TEST_CASE("fused causal attention GEMMs: the test can fail (tree vs chain differ)") {
  if (KernelCtx::best(1, 64).isa != Isa::avx512) return;
  const std::int64_t C = 256, hd = 32, ld = 32;
  const int B = 64;
  const std::vector<float> x = mixed_floats(static_cast<std::size_t>(C * ld), 5);
  const std::vector<float> p = causal_matrix(C, 6);
  std::vector<float> scratch(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B)));
  std::vector<float> tree(static_cast<std::size_t>(C * ld)), chain(tree.size());
  causal_suffix(C, hd, B, true, p.data(), x.data(), ld, tree.data(), ld, scratch.data());
  causal_suffix(C, hd, B, false, p.data(), x.data(), ld, chain.data(), ld, scratch.data());
  int diff = 0;
  for (std::size_t e = 0; e < tree.size(); ++e) diff += !bits_equal(tree[e], chain[e]);
  CHECK(diff > 0);
}

TEST_CASE("attn_gemm_supported: the shapes the kernels take") {
  const KernelCtx a512{Isa::avx512, 1, 64}, a2{Isa::avx2, 1, 64};
  CHECK(attn_gemm_supported(a512, 256, 32, true));
  CHECK_FALSE(attn_gemm_supported(a2, 256, 32, true));
  CHECK_FALSE(attn_gemm_supported(a512, 250, 32, true));    // C not a multiple of 16
  CHECK_FALSE(attn_gemm_supported(a512, 256, 24, true));    // head_dim not a multiple of 16
  CHECK_FALSE(attn_gemm_supported(a512, 256, 128, false));  // head_dim > 64
  CHECK_FALSE(attn_gemm_supported(KernelCtx{Isa::avx512, 1, 16}, 256, 32, true));  // hd > B
  CHECK(attn_gemm_supported(KernelCtx{Isa::avx512, 1, 16}, 256, 32, false));
}
