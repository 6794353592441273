// Philox4x32-10 known answers, the CounterRng mapping, and the uniform / normal fills of
// runtime/random.hpp: statistics, shard independence (a shard == the matching slice of the full
// tensor, bit for bit) and ISA independence.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/philox.hpp"
#include "runtime/random.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::bits;
using lockstep::testing::same_bits;

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors", "[philox]") {
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) ==
        PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                      {0xa4093822u, 0x299f31d0u}) ==
        PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("CounterRng maps (seed, stream, index) to key and counter as documented", "[philox]") {
  const uint64_t seed = 0x0123456789abcdefull, stream = 0xfedcba9876543210ull;
  CounterRng rng(seed, stream);
  CHECK(rng.key().k0 == 0x89abcdefu);
  CHECK(rng.key().k1 == 0x01234567u);
  const uint64_t b = 0x1122334455667788ull;
  CHECK(rng.block(b) == philox4x32_10({0x55667788u, 0x11223344u, 0x76543210u, 0xfedcba98u},
                                      {0x89abcdefu, 0x01234567u}));
  for (uint64_t i = 0; i < 16; ++i) CHECK(rng.word(4 * b + i % 4) == rng.block(b)[i % 4]);
  // Different streams and seeds give different words.
  CHECK(CounterRng(seed, stream + 1).word(0) != rng.word(0));
  CHECK(CounterRng(seed + 1, stream).word(0) != rng.word(0));
}

TEST_CASE("uniform floats are exact, in range and statistically sane", "[random]") {
  CHECK(uniform01(0u) == 0.0f);
  CHECK(uniform01(0xffffffffu) == 1.0f - 0x1p-24f);
  CHECK(uniform01(0x80000000u) == 0.5f);
  CHECK(uniform01c(0u) == 0x1p-24f);
  CHECK(uniform01c(0xffffffffu) == 1.0f);
  const int64_t n = 1000000;
  std::vector<float> u(n);
  fill_uniform(42, 7, 0, u.data(), n);
  double s = 0, s2 = 0;
  for (float v : u) {
    REQUIRE(v >= 0.0f);
    REQUIRE(v < 1.0f);
    s += v;
    s2 += double(v) * v;
  }
  double mean = s / n, var = s2 / n - mean * mean;
  CHECK(std::abs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  CHECK(std::abs(var - 1.0 / 12) < 1e-3);
  for (int64_t i : {int64_t(0), int64_t(1), int64_t(5), int64_t(999999)})
    CHECK(bits(uniform_at(42, 7, i)) == bits(u[i]));
  std::vector<float> r(1000);
  fill_uniform(42, 7, 0, r.data(), 1000, -2.0f, 3.0f);
  for (float v : r) CHECK((v >= -2.0f && v < 3.0f));
}

TEST_CASE("normal floats have mean 0, variance 1 and sane tails", "[random]") {
  const int64_t n = 1000000;
  std::vector<float> z(n);
  fill_normal(1234, 99, 0, z.data(), n);
  double s = 0, s2 = 0, s4 = 0;
  int64_t beyond3 = 0;
  for (float v : z) {
    REQUIRE(std::isfinite(v));
    REQUIRE(std::abs(v) < 5.8f);
    s += v;
    s2 += double(v) * v;
    s4 += double(v) * v * v * v;
    beyond3 += std::abs(v) > 3.0f;
  }
  double mean = s / n, var = s2 / n - mean * mean, kurt = s4 / n;
  CHECK(std::abs(mean) < 5.0 / std::sqrt(double(n)));
  CHECK(std::abs(var - 1.0) < 5.0 * std::sqrt(2.0 / n));
  CHECK(std::abs(kurt - 3.0) < 0.05);
  CHECK(std::abs(double(beyond3) / n - 0.0026998) < 0.0006);
  // mean / std scaling is fma(std, z, mean).
  std::vector<float> w(1000);
  fill_normal(1234, 99, 0, w.data(), 1000, 0.5f, 0.02f);
  for (int i = 0; i < 1000; ++i) CHECK(bits(w[i]) == bits(std::fma(0.02f, z[i], 0.5f)));
}

TEST_CASE("a 1-D shard equals the matching slice of the full tensor, bitwise", "[random]") {
  const int64_t n = 10007;
  std::vector<float> full(n), fullu(n);
  fill_normal(5, 3, 0, full.data(), n, 0.0f, 0.02f);
  fill_uniform(5, 3, 0, fullu.data(), n);
  for (int64_t first : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), int64_t(4), int64_t(1023),
                        int64_t(2049), int64_t(9999)}) {
    for (int64_t len : {int64_t(1), int64_t(3), int64_t(8), int64_t(2051)}) {
      if (first + len > n) continue;
      std::vector<float> part(len), partu(len);
      fill_normal(5, 3, first, part.data(), len, 0.0f, 0.02f);
      fill_uniform(5, 3, first, partu.data(), len);
      std::vector<float> want(full.begin() + first, full.begin() + first + len);
      std::vector<float> wantu(fullu.begin() + first, fullu.begin() + first + len);
      CHECK(same_bits(part, want));
      CHECK(same_bits(partu, wantu));
    }
  }
  for (int64_t i : {int64_t(0), int64_t(1), int64_t(2), int64_t(3), int64_t(10006)})
    CHECK(bits(normal_at(5, 3, i, 0.0f, 0.02f)) == bits(full[i]));
}

TEST_CASE("a 2-D TP shard equals the matching block of the full matrix, bitwise", "[random]") {
  const int64_t rows = 37, cols = 96;
  std::vector<float> full(rows * cols), fullu(rows * cols);
  fill_normal_2d(11, 2, cols, 0, 0, rows, cols, full.data(), cols, 0.0f, 1.0f);
  fill_uniform_2d(11, 2, cols, 0, 0, rows, cols, fullu.data(), cols);
  // The full matrix is the 1-D tensor in row-major order.
  std::vector<float> flat(rows * cols);
  fill_normal(11, 2, 0, flat.data(), rows * cols);
  CHECK(same_bits(full, flat));
  for (int tp : {2, 4, 3}) {  // column shards (3 gives uneven shards, still exact)
    int64_t c0 = 0;
    for (int r = 0; r < tp; ++r) {
      int64_t c = cols / tp + (r < cols % tp ? 1 : 0);
      const int64_t ld = c + 5;
      std::vector<float> shard(rows * ld, -7.0f), shardu(rows * ld, -7.0f);
      fill_normal_2d(11, 2, cols, 0, c0, rows, c, shard.data(), ld, 0.0f, 1.0f);
      fill_uniform_2d(11, 2, cols, 0, c0, rows, c, shardu.data(), ld);
      bool ok = true;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < ld; ++j) {
          if (j < c) {
            ok &= bits(shard[i * ld + j]) == bits(full[i * cols + c0 + j]);
            ok &= bits(shardu[i * ld + j]) == bits(fullu[i * cols + c0 + j]);
          } else {
            ok &= shard[i * ld + j] == -7.0f;  // padding untouched
          }
        }
      CHECK(ok);
      c0 += c;
    }
  }
  // Row shards and an interior block.
  std::vector<float> blk(5 * 7);
  fill_normal_2d(11, 2, cols, 13, 40, 5, 7, blk.data(), 7, 0.0f, 1.0f);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) CHECK(bits(blk[i * 7 + j]) == bits(full[(13 + i) * cols + 40 + j]));
}

TEST_CASE("normal fills give identical bits on every ISA path and thread count", "[random]") {
  const int64_t n = 4099;
  std::vector<float> ref(n);
  KernelCtx sc;
  sc.isa = Isa::scalar;
  fill_normal(sc, 77, 1, 3, ref.data(), n, 1.0f, 2.0f);
  for (Isa isa : supported_isas()) {
    for (int threads : {1, 2}) {
      KernelCtx ctx;
      ctx.isa = isa;
      ctx.threads = threads;
      std::vector<float> got(n);
      fill_normal(ctx, 77, 1, 3, got.data(), n, 1.0f, 2.0f);
      INFO("isa " << isa_name(isa) << " threads " << threads);
      CHECK(same_bits(got, ref));
    }
  }
}

TEST_CASE("random fills reject bad coordinates", "[random]") {
  float buf[4];
  CHECK_THROWS_AS(fill_uniform(1, 1, -1, buf, 4), Error);
  CHECK_THROWS_AS(fill_normal(1, 1, 0, buf, -1), Error);
  CHECK_THROWS_AS(fill_normal_2d(1, 1, 8, 0, 6, 1, 4, buf, 4), Error);   // col0 + cols > global
  CHECK_THROWS_AS(fill_uniform_2d(1, 1, 8, 0, 0, 1, 4, buf, 3), Error);  // ld < cols
  fill_normal(1, 1, 0, buf, 0);                                          // n == 0 is fine
}
