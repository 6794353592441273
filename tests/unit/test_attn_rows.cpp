// The causal softmax row kernels (model/kernels/attn_rows.hpp) against their literal per-row
// definition, bit for bit, on every ISA path: scale, sequential max, ls_exp, csum with block
// B, division, +0.0 past the diagonal; the backward's cdot and update. Shapes cover the
// AVX-512 path's 16 rows in vector lanes (B a multiple of 16, row groups at multiples of 16,
// including a last leaf that starts inside a group) and its fallbacks (B not a multiple of 16,
// row ranges not aligned to 16, tails of fewer than 8 rows). Entries past the diagonal hold
// NaN and Inf on input, to show they are never read into a result.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "model/kernels/attn_rows.hpp"
#include "runtime/csum.hpp"
#include "runtime/transcendental.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;

namespace {

// Scores / dP: mixed values (signed zeros included) for j <= i, NaN / Inf above the diagonal.
std::vector<float> causal_input(std::int64_t C, std::uint64_t seed) {
  std::vector<float> s = mixed_floats(static_cast<std::size_t>(C * C), seed);
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = i + 1; j < C; ++j)
      s[i * C + j] = (i + j) % 2 ? std::numeric_limits<float>::quiet_NaN()
                                 : std::numeric_limits<float>::infinity();
  return s;
}

// The definition of model/kernels/attn_rows.hpp, one row at a time.
void softmax_literal(std::vector<float>& S, std::int64_t C, std::int64_t r0, std::int64_t r1,
                     float scale, int B) {
  for (std::int64_t i = r0; i < r1; ++i) {
    float* s = S.data() + i * C;
    const std::int64_t n = i + 1;
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
    float m = s[0];
    for (std::int64_t j = 1; j < n; ++j) m = s[j] > m ? s[j] : m;
    for (std::int64_t j = 0; j < n; ++j) s[j] = math::ls_exp(s[j] - m);
    const float sum = csum(s, n, SumRule{B});
    for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] / sum;
    for (std::int64_t j = n; j < C; ++j) s[j] = 0.0f;
  }
}

void softmax_backward_literal(const std::vector<float>& P, std::vector<float>& G, std::int64_t C,
                              std::int64_t r0, std::int64_t r1, float scale, int B) {
  for (std::int64_t i = r0; i < r1; ++i) {
    const float* p = P.data() + i * C;
    float* g = G.data() + i * C;
    const std::int64_t n = i + 1;
    const float dot = cdot(p, g, n, SumRule{B});
    for (std::int64_t j = 0; j < n; ++j) g[j] = (p[j] * (g[j] - dot)) * scale;
    for (std::int64_t j = n; j < C; ++j) g[j] = 0.0f;
  }
}

}  // namespace

TEST_CASE("softmax rows == the literal per-row definition, every ISA path", "[model][attn]") {
  const float scale = 0.1767766952966369f;  // 1/sqrt(32)
  for (Isa isa : supported_isas())
    for (int B : {16, 32, 48, 64, 7, 1})
      for (std::int64_t C : {16, 48, 64, 80, 144}) {
        struct Range {
          std::int64_t r0, r1;
        };
        for (Range rg : {Range{0, C}, Range{3, C - 2}, Range{C / 2, C}, Range{0, 5}}) {
          CAPTURE(isa_name(isa), B, C, rg.r0, rg.r1);
          const KernelCtx ctx{isa, 1, B};
          std::vector<float> S = causal_input(C, 11 + C + B), S_ref = S;
          softmax_causal_rows(ctx, S.data(), C, rg.r0, rg.r1, scale);
          softmax_literal(S_ref, C, rg.r0, rg.r1, scale, B);
          REQUIRE(same_bits(S, S_ref));

          // Backward on the probabilities just computed (rows outside the range: zeros).
          std::vector<float> P = S;
          std::vector<float> G = causal_input(C, 29 + C * B), G_ref = G;
          softmax_backward_rows(ctx, P.data(), G.data(), C, rg.r0, rg.r1, scale);
          softmax_backward_literal(P, G_ref, C, rg.r0, rg.r1, scale, B);
          REQUIRE(same_bits(G, G_ref));
        }
      }
}

TEST_CASE("exact-mode scans == their literal definition, every ISA path", "[model][attn]") {
  // Rows of n floats, ld apart; the floats past n in each row (and past the last row) hold
  // zeros, Inf and NaN that the scans must never see.
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (Isa isa : supported_isas())
    for (std::int64_t n : {1, 5, 15, 16, 17, 31, 32, 33, 48, 70})
      for (std::uint64_t seed = 1; seed <= 6; ++seed) {
        const std::int64_t rows = 9, ld = n + 7;
        std::vector<float> x(static_cast<std::size_t>(rows * ld + 16));
        std::uint64_t r = seed * 0x9e3779b97f4a7c15ull;
        auto next = [&r] {
          r ^= r << 13, r ^= r >> 7, r ^= r << 17;
          return r;
        };
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t c = 0; c < ld; ++c)
            x[i * ld + c] = c < n ? 0.5f + static_cast<float>(next() % 1000) : (c % 2 ? nan : 0.0f);
        for (std::size_t k = static_cast<std::size_t>(rows * ld); k < x.size(); ++k) x[k] = -0.0f;
        // Plant a few zeros (+0, -0, a subnormal that is not zero) and non-finite values.
        const float plant[] = {0.0f, -0.0f, 1e-45f, -inf, inf, nan, 3.0f};
        for (int p = 0; p < 3; ++p) {
          const auto i = static_cast<std::int64_t>(next() % rows),
                     c = static_cast<std::int64_t>(next() % n);
          x[i * ld + c] = plant[next() % 7];
        }
        CAPTURE(isa_name(isa), n, seed);
        const KernelCtx ctx{isa, 1, 64};
        bool finite = true;
        for (std::int64_t i = 0; i < rows; ++i)
          for (std::int64_t c = 0; c < n; ++c) finite = finite && std::isfinite(x[i * ld + c]);
        REQUIRE(rows_all_finite(ctx, x.data(), rows, n, ld) == finite);
        for (std::int64_t r0 = 0; r0 <= rows; r0 += 2) {
          std::int64_t want = rows;
          for (std::int64_t i = r0; i < rows && want == rows; ++i)
            for (std::int64_t c = 0; c < n; ++c)
              if (x[i * ld + c] == 0.0f) want = i;
          REQUIRE(first_row_with_zero(ctx, x.data(), r0, rows, n, ld) == want);
        }
      }
}
