// Tests of the exact, order-free gradient norm (optim/grad_norm.hpp) and of clipping
// (optim/clip.hpp): the superaccumulator's sum equals an independent big-integer sum
// bit for bit and rounds correctly; any permutation or chunking gives the same bits;
// Inf/NaN propagate; the clip coefficient follows torch's float operations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "optim/clip.hpp"
#include "optim/grad_norm.hpp"
#include "runtime/error.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::from_bits;
using lockstep::testing::splitmix64;

namespace {

// An independent exact reference: the sum of squares as a plain little-endian bit array in
// units of 2^-400, built with frexp (not bit fields) and ripple-carry addition.
struct BitSum {
  static constexpr int kLsb = -400;
  std::vector<std::uint8_t> bit = std::vector<std::uint8_t>(1200, 0);
  void add_square(float x) {
    if (x == 0.0f) return;
    int e;
    const double f = std::frexp(static_cast<double>(std::fabs(x)), &e);  // |x| = f 2^e
    const auto m = static_cast<std::uint64_t>(std::ldexp(f, 24));        // exact: 24-bit integer
    const std::uint64_t sq = m * m;                                      // x^2 = sq 2^(2e-48)
    const int off = 2 * (e - 24) - kLsb;
    int carry = 0;
    for (int k = 0; k < 1200 - off; ++k) {
      const int add = k < 64 ? static_cast<int>((sq >> k) & 1) : 0;
      const int s = bit[off + k] + add + carry;
      bit[off + k] = static_cast<std::uint8_t>(s & 1);
      carry = s >> 1;
      if (k >= 64 && carry == 0) break;
    }
  }
  int top() const {
    for (int k = 1199; k >= 0; --k)
      if (bit[k]) return k;
    return -1;
  }
  // Round to nearest even double, written directly from the definition.
  double to_double() const {
    const int t = top();
    if (t < 0) return 0.0;
    const int lo = std::max(0, t - 52);  // the kept bits are [lo, t]
    double mant = 0.0;
    for (int k = t; k >= lo; --k) mant = mant * 2.0 + bit[k];
    if (lo > 0) {
      const bool half = bit[lo - 1];
      bool rest = false;
      for (int k = 0; k < lo - 1; ++k) rest = rest || bit[k];
      const bool odd = bit[lo];
      if (half && (rest || odd)) mant += 1.0;
    }
    return std::ldexp(mant, lo + kLsb);
  }
  // Hex of the integer in units of 2^-298 (the accumulator's unit); the low 102 bits must
  // be zero.
  std::string hex298() const {
    for (int k = 0; k < 102; ++k)
      if (bit[k]) return "not a multiple of 2^-298";
    std::string out;
    const int t = top();
    if (t < 102) return "0";
    const int n = t - 102 + 1;
    const int digits = (n + 3) / 4;
    for (int d = digits - 1; d >= 0; --d) {
      int v = 0;
      for (int b = 3; b >= 0; --b) {
        const int k = 102 + d * 4 + b;
        v = v * 2 + (k < 1200 ? bit[k] : 0);
      }
      out += "0123456789abcdef"[v];
    }
    return out;
  }
};

// Adversarial values: random bit patterns over the whole finite range (subnormals, huge,
// tiny), signed zeros, FLT_MAX, the smallest subnormal, powers of two.
std::vector<float> adversarial(std::size_t n, std::uint64_t seed) {
  std::vector<float> v;
  std::uint64_t s = seed;
  const float specials[] = {
      0.0f, -0.0f, FLT_MAX,  -FLT_MAX, FLT_MIN, from_bits(1), from_bits(0x807fffff),
      1.0f, -1.0f, 0x1p-27f, 0x1p+100f};
  for (float f : specials) v.push_back(f);
  while (v.size() < n) {
    std::uint32_t u = static_cast<std::uint32_t>(splitmix64(s) >> 32);
    if (((u >> 23) & 0xffu) == 0xffu) continue;  // no Inf/NaN here
    const int kind = static_cast<int>(splitmix64(s) % 4);
    if (kind == 0) u &= 0x807fffffu;  // subnormal
    v.push_back(from_bits(u));
  }
  return v;
}

std::uint64_t dbits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
std::uint32_t fbits(float f) {
  return lockstep::testing::bits(f);
}

}  // namespace

TEST_CASE("exact sum of squares equals a big-integer reference and rounds correctly") {
  for (std::uint64_t seed : {1, 2, 3, 4}) {
    const auto x = adversarial(seed == 1 ? 20 : 3000, seed);
    SquareSumAccumulator acc;
    acc.add(x);
    BitSum ref;
    for (float f : x) ref.add_square(f);
    CHECK(acc.exact_hex() == ref.hex298());
    CHECK(dbits(acc.sum_as_double()) == dbits(ref.to_double()));
    CHECK(fbits(acc.norm()) == fbits(static_cast<float>(std::sqrt(ref.to_double()))));
  }
  // Small magnitudes only (where the sum's bits would otherwise be lost under big ones).
  std::vector<float> tiny;
  for (std::uint32_t u = 1; u < 5000; u += 7) tiny.push_back(from_bits(u));
  SquareSumAccumulator a;
  a.add(tiny);
  BitSum r;
  for (float f : tiny) r.add_square(f);
  CHECK(a.exact_hex() == r.hex298());
  CHECK(dbits(a.sum_as_double()) == dbits(r.to_double()));
}

TEST_CASE("bucketed square sum: several 2^16-element batches, full buckets, Inf/NaN counts") {
  // add() sums squared significands per exponent in batches of 2^16 elements: cross batch
  // boundaries at uneven offsets, fill one exponent's buckets to the maximum (2^16 x
  // FLT_MAX^2's significand), and compare with the big-integer reference.
  std::vector<float> x = adversarial((std::size_t{1} << 17) + 12345, 9);
  x.insert(x.begin() + 70000, std::size_t{1} << 16, FLT_MAX);
  x.insert(x.begin() + 5, std::size_t{1} << 16, -0x1.fffffep+0f);
  BitSum ref;
  for (float f : x) ref.add_square(f);
  SquareSumAccumulator whole;
  whole.add(x);
  CHECK(whole.exact_hex() == ref.hex298());
  CHECK(dbits(whole.sum_as_double()) == dbits(ref.to_double()));
  SquareSumAccumulator pieces;  // odd-sized calls, one element at a time in between
  for (std::size_t a = 0; a < x.size();) {
    const std::size_t len = std::min<std::size_t>(x.size() - a, a % 3 == 0 ? 1 : 40009);
    pieces.add(std::span<const float>(x.data() + a, len));
    a += len;
  }
  CHECK(pieces == whole);
  // Non-finite values are counted in whichever batch and table they fall.
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> y(std::size_t{1} << 17, 1.0f);
  y[3] = inf;
  y[70001] = -inf;
  SquareSumAccumulator c;
  c.add(y);
  CHECK(c.has_inf());
  CHECK(!c.has_nan());
  CHECK(c.norm() == inf);
  y[100000] = std::numeric_limits<float>::quiet_NaN();
  SquareSumAccumulator d;
  d.add(y);
  CHECK(d.has_nan());
  CHECK(std::isnan(d.norm()));
  y[3] = y[70001] = y[100000] = 1.0f;
  SquareSumAccumulator e;
  e.add(y);
  CHECK(e.sum_as_double() == 131072.0);
}

TEST_CASE("moderate ranges: equals an exact __float128 sum rounded to double") {
  // Squares within 2^-32..2^32 of 48 bits each, 10^4 of them: < 113 bits, exact in binary128.
  std::uint64_t s = 99;
  std::vector<float> x(10000);
  for (auto& f : x) {
    const std::uint64_t r = splitmix64(s);
    const float mant = 1.0f + static_cast<float>(r & 0x7fffff) / 8388608.0f;
    f = std::ldexp(mant, static_cast<int>((r >> 32) % 33) - 16) * ((r >> 63) ? -1.0f : 1.0f);
  }
  __float128 q = 0;
  for (float f : x) q += static_cast<__float128>(f) * static_cast<__float128>(f);
  SquareSumAccumulator acc;
  acc.add(x);
  CHECK(dbits(acc.sum_as_double()) == dbits(static_cast<double>(q)));
}

TEST_CASE("rounding corner cases: ties to even and sticky bits") {
  SquareSumAccumulator a;
  a.add(1.0f);
  a.add(0x1p-27f);  // 2^-54
  a.add(0x1p-27f);  // 1 + 2^-53: exactly half an ulp -> ties to even: 1.0
  CHECK(a.sum_as_double() == 1.0);
  a.add(from_bits(1));  // + 2^-298: now above half -> 1 + 2^-52
  CHECK(a.sum_as_double() == std::nextafter(1.0, 2.0));
  SquareSumAccumulator b;
  b.add(0x1p-149f);
  CHECK(b.sum_as_double() == std::ldexp(1.0, -298));
  SquareSumAccumulator z;
  z.add(std::vector<float>{0.0f, -0.0f, 0.0f});
  CHECK(z.is_zero());
  CHECK(fbits(z.norm()) == fbits(0.0f));
  // 2^20 copies of FLT_MAX: the double sum is finite, the float norm overflows to +inf.
  SquareSumAccumulator big;
  big.add(std::vector<float>(1 << 20, FLT_MAX));
  const double fm = FLT_MAX;
  CHECK(big.sum_as_double() == fm * fm * 1048576.0);
  CHECK(big.norm() == std::numeric_limits<float>::infinity());
}

TEST_CASE("the sum is bitwise independent of order and chunking") {
  const auto x = adversarial(5000, 7);
  SquareSumAccumulator whole;
  whole.add(x);
  std::uint64_t s = 5;
  for (int trial = 0; trial < 20; ++trial) {
    auto y = x;
    for (std::size_t i = y.size() - 1; i > 0; --i) std::swap(y[i], y[splitmix64(s) % (i + 1)]);
    // Arbitrary chunks, each in its own accumulator, merged in a scrambled order.
    std::vector<SquareSumAccumulator> parts;
    for (std::size_t i = 0; i < y.size();) {
      const std::size_t len = std::min<std::size_t>(y.size() - i, 1 + splitmix64(s) % 777);
      parts.emplace_back();
      parts.back().add(std::span<const float>(y.data() + i, len));
      i += len;
    }
    SquareSumAccumulator merged2;  // merged in reverse chunk order
    for (std::size_t k = parts.size(); k-- > 0;) merged2.merge(parts[k]);
    CHECK(merged2 == whole);
    CHECK(merged2.exact_hex() == whole.exact_hex());
    CHECK(fbits(merged2.norm()) == fbits(whole.norm()));
    // Limb-wise addition (what allreduce_u64 does) equals merge.
    SquareSumAccumulator by_limbs;
    for (auto& p : parts) {
      auto src = p.limbs();
      auto dst = by_limbs.limbs();
      for (std::size_t k = 0; k < dst.size(); ++k) dst[k] += src[k];
    }
    by_limbs.normalize();
    CHECK(by_limbs == whole);
  }
}

TEST_CASE("Inf and NaN propagate through the sum and the merge") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SquareSumAccumulator a;
  a.add(std::vector<float>{1.0f, -inf, 2.0f});
  CHECK(a.has_inf());
  CHECK(a.norm() == inf);
  SquareSumAccumulator b;
  b.add(std::vector<float>{nan, 3.0f});
  CHECK(std::isnan(b.norm()));
  a.merge(b);
  CHECK(std::isnan(a.norm()));
  SquareSumAccumulator c;
  c.add(from_bits(0xff800001u));  // a signaling-NaN pattern counts as NaN
  CHECK(c.has_nan());
  CHECK(!c.has_inf());
}

TEST_CASE("l2_norm_exact of simple vectors") {
  CHECK(l2_norm_exact(std::vector<float>{3.0f, 4.0f}) == 5.0f);
  CHECK(l2_norm_exact(std::vector<float>{}) == 0.0f);
  std::vector<float> ones(1 << 16, 1.0f);
  CHECK(l2_norm_exact(ones) == 256.0f);
}

TEST_CASE("clip coefficient follows torch's float operations") {
  const ClipResult r = clip_coefficient(2.0f, 1.0f);
  const float denom = 2.0f + static_cast<float>(1e-6);
  CHECK(fbits(r.coef) == fbits((1.0f / denom) * 1.0f));
  CHECK(r.clipped);
  CHECK(r.norm == 2.0f);
  std::vector<float> g{1.0f, -2.0f, 0.5f, -0.0f};
  apply_clip(r, g);
  CHECK(fbits(g[0]) == fbits(1.0f * r.coef));
  CHECK(fbits(g[1]) == fbits(-2.0f * r.coef));
  CHECK(fbits(g[3]) == fbits(-0.0f));

  const ClipResult small = clip_coefficient(0.5f, 1.0f);
  CHECK(!small.clipped);
  std::vector<float> h{1.0f, 2.0f};
  apply_clip(small, h);
  CHECK(h == std::vector<float>{1.0f, 2.0f});

  // norm == max_norm: coef = 1/(1 + 1e-6) < 1, clipped (as in torch and Megatron).
  CHECK(clip_coefficient(1.0f, 1.0f).clipped);
  // A NaN norm never clips (the caller sees the NaN); an infinite one scales by 0.
  const ClipResult n = clip_coefficient(std::numeric_limits<float>::quiet_NaN(), 1.0f);
  CHECK(!n.clipped);
  const ClipResult i = clip_coefficient(std::numeric_limits<float>::infinity(), 1.0f);
  CHECK(i.clipped);
  CHECK(i.coef == 0.0f);
  CHECK_THROWS_AS(clip_coefficient(1.0f, 0.0f), lockstep::Error);
  CHECK_THROWS_AS(clip_coefficient(1.0f, -1.0f), lockstep::Error);
}

TEST_CASE("clipping shards equals clipping the whole, bitwise") {
  auto g = lockstep::testing::mixed_floats(1001, 3);
  auto whole = g;
  const ClipResult r = clip_coefficient(l2_norm_exact(g), 0.25f);
  REQUIRE(r.clipped);
  apply_clip(r, whole);
  apply_clip(r, std::span<float>(g.data(), 333));
  apply_clip(r, std::span<float>(g.data() + 333, 668));
  CHECK(lockstep::testing::same_bits(g.data(), whole.data(), g.size()));
}
