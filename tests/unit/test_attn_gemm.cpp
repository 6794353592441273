// The fused causal attention GEMMs (model/kernels/attn_gemm.hpp) against the canonical and chain
// GEMMs of runtime/gemm.hpp on full-size operands: scores bit for bit on the causal part; prefix
// and suffix bit for bit on every nonzero element and zero where the GEMM gives a zero (the
// caller's row fix-up then makes those rows exact; the model's CausalGemms, tested end to end in
// test_model.cpp). Shapes: C from 16 to 256 (C a multiple of B or not, C < B; C 112 and 208
// with B 16 give 7 and 13 leaves, whose trees end in a fold over two and three levels),
// head_dim 16-64 (64 in both AttnTile forms, which are also compared with each other), blocks
// 16-64 and 128, tree (invariant) and chain (deterministic), padded leading dimensions, inputs
// with signed zeros, and zero columns that force zero outputs.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../support/test_data.hpp"
#include "model/kernels/attn_gemm.hpp"
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

// Runs the prefix and suffix products with one AttnTile setting, back to by_cpu at scope end.
struct TileSetting {
  explicit TileSetting(AttnTile t) { set_attn_tile(t); }
  ~TileSetting() { set_attn_tile(AttnTile::by_cpu); }
  TileSetting(const TileSetting&) = delete;
  TileSetting& operator=(const TileSetting&) = delete;
};

}  // namespace

TEST_CASE("fused causal attention GEMMs == the canonical / chain GEMM") {
  const KernelCtx probe = KernelCtx::best(1, 64);
  if (probe.isa != Isa::avx512) {
    WARN("no AVX-512 on this CPU: the fused attention kernels are not used here; skipped");
    return;
  }
  int cases = 0, zeros = 0, halves = 0;
  for (std::int64_t C : {16, 48, 64, 80, 112, 208, 256}) {
    for (std::int64_t hd : {16, 32, 64}) {
      for (int B : {16, 32, 64, 128}) {
        for (bool tree : {true, false})
        for (AttnTile tile : {AttnTile::whole, AttnTile::halves}) {
          // Halves change how head_dim 64 runs only (attn_tile_halves).
          if (tile == AttnTile::halves && hd != 64) continue;
          const TileSetting setting(tile);
          // The fused kernels evaluate the pow2 tree (the model uses them under halving only
          // where the two trees agree: model/gpt_causal_gemms.cpp), so they are checked
          // against the pow2 canonical GEMM.
          const KernelCtx ctx{Isa::avx512, 1, B, TreeShape::pow2};
          if (!attn_gemm_supported(ctx, C, hd, tree)) continue;
          ++cases;
          halves += attn_tile_halves(hd);
          INFO("C " << C << " hd " << hd << " B " << B << " tree " << tree << " halves "
                    << attn_tile_halves(hd));
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
  CHECK(halves > 10);
}

// The two ways of running head_dim 64 (AttnTile: one 8 x 64 tile, or two 8 x 32 passes with the
// suffix's operand copied to a strip) against each other: the same bits everywhere, zeros'
// signs included, and the same AttnChecks, at lengths up to GPT-2's context (long strips) with
// zero columns and padded rows.
TEST_CASE("fused causal attention GEMMs: the 8 x 64 tile and its halves give the same bits") {
  if (KernelCtx::best(1, 64).isa != Isa::avx512) return;
  const std::int64_t hd = 64, ld = 80;
  int compared = 0;
  for (std::int64_t C : {16, 208, 1024}) {
    for (int B : {64, 128}) {
      std::vector<float> x = mixed_floats(static_cast<std::size_t>(C * ld), 31 + C);
      for (std::int64_t i = 0; i < C; ++i) x[i * ld + 40] = 0.0f;  // a zero output column
      const std::vector<float> p = causal_matrix(C, 32 + B);
      std::vector<float> scratch(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B)));
      for (bool tree : {true, false})
        for (int kernel = 0; kernel < 2; ++kernel) {
          INFO("C " << C << " B " << B << " tree " << tree << " kernel " << kernel);
          std::vector<float> out[2];
          AttnChecks chk[2];
          for (int h = 0; h < 2; ++h) {
            const TileSetting setting(h ? AttnTile::halves : AttnTile::whole);
            REQUIRE(attn_tile_halves(hd) == (h == 1));
            out[h].assign(static_cast<std::size_t>(C * ld), 7.0f);
            if (kernel == 0)
              causal_prefix(C, hd, B, tree, p.data(), x.data(), ld, out[h].data(), ld,
                            scratch.data(), &chk[h]);
            else
              causal_suffix(C, hd, B, tree, p.data(), x.data(), ld, out[h].data(), ld,
                            scratch.data(), &chk[h]);
          }
          CHECK(testing::same_bits(out[0].data(), out[1].data(), out[0].size()));
          CHECK(chk[0].x_finite == chk[1].x_finite);
          CHECK(chk[0].y_zero == chk[1].y_zero);
          CHECK(chk[1].y_zero);
          ++compared;
        }
    }
  }
  CHECK(compared == 24);
}

// The checks the exact modes' fix-ups read (AttnChecks): X finite over its C x hd part only
// (a NaN in the row padding is no concern), Y holding a zero exactly when an output element is
// +-0.0; the outputs themselves are the same as without checks.
TEST_CASE("fused causal attention GEMMs report non-finite X and zero outputs") {
  if (KernelCtx::best(1, 64).isa != Isa::avx512) return;
  const int B = 64;
  int seen_inf = 0, seen_zero = 0, seen_clean = 0;
  for (std::int64_t C : {48, 256}) {
    for (std::int64_t ld : {32, 48}) {  // contiguous X (read in place) and padded rows (copied)
      const std::int64_t hd = 32;
      for (int variant = 0; variant < 4; ++variant) {
        INFO("C " << C << " ld " << ld << " variant " << variant);
        std::vector<float> x = mixed_floats(static_cast<std::size_t>(C * ld), 11 + variant);
        for (float& v : x)
          if (v == 0.0f) v = 1.5f;  // no zeros in X or P: zero outputs only where placed
        const std::vector<float> p = [&] {
          std::vector<float> m = causal_matrix(C, 12);
          for (std::int64_t i = 0; i < C; ++i)
            for (std::int64_t j = 0; j <= i; ++j)
              if (m[i * C + j] == 0.0f) m[i * C + j] = 0.25f;
          return m;
        }();
        if (variant == 1) x[(C / 2) * ld + 5] = std::numeric_limits<float>::infinity();
        if (variant == 2) x[(C - 1) * ld + hd - 1] = std::numeric_limits<float>::quiet_NaN();
        if (variant == 3) {  // a zero column of X: that output column is zero
          for (std::int64_t i = 0; i < C; ++i) x[i * ld + 7] = 0.0f;
          if (ld > hd) x[3 * ld + hd] = std::numeric_limits<float>::quiet_NaN();  // padding
        }
        bool finite = true;
        for (std::int64_t i = 0; i < C; ++i)
          for (std::int64_t c = 0; c < hd; ++c) finite = finite && std::isfinite(x[i * ld + c]);
        std::vector<float> scratch(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B)));
        for (bool tree : {true, false}) {
          for (int kernel = 0; kernel < 2; ++kernel) {
            std::vector<float> y(static_cast<std::size_t>(C * ld)), y_plain(y.size());
            AttnChecks chk;
            chk.x_finite = !finite;  // the kernel must set both fields
            chk.y_zero = true;
            auto call = [&](float* out, AttnChecks* c) {
              if (kernel == 0)
                causal_prefix(C, hd, B, tree, p.data(), x.data(), ld, out, ld, scratch.data(), c);
              else
                causal_suffix(C, hd, B, tree, p.data(), x.data(), ld, out, ld, scratch.data(), c);
            };
            call(y.data(), &chk);
            call(y_plain.data(), nullptr);
            bool zero = false;
            for (std::int64_t i = 0; i < C; ++i)
              for (std::int64_t c = 0; c < hd; ++c) zero = zero || y[i * ld + c] == 0.0f;
            CHECK(chk.x_finite == finite);
            if (finite) CHECK(chk.y_zero == zero);  // (non-finite X: Y is recomputed anyway)
            CHECK(testing::same_bits(y.data(), y_plain.data(), y.size()));
            seen_inf += !finite;
            seen_zero += finite && zero;
            seen_clean += finite && !zero;
          }
        }
      }
    }
  }
  CHECK(seen_inf > 0);
  CHECK(seen_zero > 0);
  CHECK(seen_clean > 0);
}

// Why the zero flag matters: X's column 5 holds -0.0 in its first C/2 rows and 1.0 below, so
// the prefix rows i < C/2 - 8 sum only -0.0 products over the keys the kernel keeps (-0.0),
// while the full GEMM also adds the masked keys' +0.0 x 1.0 = +0.0 (+0.0); the suffix sees the
// mirror case with the column reversed. The kernels flag the zeros, and recomputing the rows
// holding a zero by the full-K GEMM (what CausalGemms does) gives the full GEMM's bits.
TEST_CASE("fused causal attention GEMMs: the zero flag drives the fix-up to the full GEMM's bits") {
  if (KernelCtx::best(1, 64).isa != Isa::avx512) return;
  const std::int64_t C = 256, hd = 32, ld = 48;
  const int B = 64;
  const KernelCtx ctx{Isa::avx512, 1, B};
  std::vector<float> p = causal_matrix(C, 21);
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = 0; j <= i; ++j) p[i * C + j] = std::abs(p[i * C + j]) + 0.125f;
  std::vector<float> scratch(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B)));
  for (int kernel = 0; kernel < 2; ++kernel) {
    std::vector<float> x = mixed_floats(static_cast<std::size_t>(C * ld), 22);
    for (std::int64_t i = 0; i < C; ++i) {
      const bool first_half = (kernel == 0) == (i < C / 2);
      x[i * ld + 5] = first_half ? -0.0f : 1.0f;
    }
    const Trans ta = kernel == 0 ? Trans::N : Trans::T;
    std::vector<float> y(static_cast<std::size_t>(C * ld)), want(y.size());
    AttnChecks chk;
    if (kernel == 0)
      causal_prefix(C, hd, B, true, p.data(), x.data(), ld, y.data(), ld, scratch.data(), &chk);
    else
      causal_suffix(C, hd, B, true, p.data(), x.data(), ld, y.data(), ld, scratch.data(), &chk);
    gemm(ctx, GemmImpl::canonical, ta, Trans::N, C, hd, C, p.data(), C, x.data(), ld, want.data(),
         ld);
    int sign_diffs = 0;
    for (std::int64_t i = 0; i < C; ++i)
      sign_diffs += !bits_equal(y[i * ld + 5], want[i * ld + 5]) && y[i * ld + 5] == 0.0f;
    CHECK(sign_diffs > 0);  // the case this test is about occurred
    REQUIRE(chk.x_finite);
    REQUIRE(chk.y_zero);
    for (std::int64_t i = 0; i < C; ++i) {
      bool zero = false;
      for (std::int64_t c = 0; c < hd; ++c) zero = zero || y[i * ld + c] == 0.0f;
      if (!zero) continue;
      const float* a = kernel == 0 ? p.data() + i * C : p.data() + i;
      gemm(ctx, GemmImpl::canonical, ta, Trans::N, 1, hd, C, a, C, x.data(), ld, y.data() + i * ld,
           ld);
    }
    bool same = true;
    for (std::int64_t i = 0; i < C; ++i)
      for (std::int64_t c = 0; c < hd; ++c)
        same = same && bits_equal(y[i * ld + c], want[i * ld + c]);
    CHECK(same);
  }
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
