// The device Philox (runtime/cuda/philox_core.hpp), compiled here by the host compiler, against
// the CPU Philox (runtime/philox.hpp, runtime/random.hpp, model/ops.hpp dropout masks): the same
// bits for the same logical coordinates, plus Random123's known answers. Needs no GPU and no
// CUDA toolkit (the header is plain C++ outside nvcc).
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "model/ops.hpp"
#include "runtime/cuda/philox_core.hpp"
#include "runtime/philox.hpp"
#include "runtime/random.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::bits;

TEST_CASE("device Philox core: Random123 known answers", "[cuda][philox]") {
  struct Kat {
    std::uint32_t ctr[4], key[2], out[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const hd::Philox4 r = hd::philox4x32_10(hd::Philox4{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}},
                                            k.key[0], k.key[1]);
    for (int i = 0; i < 4; ++i) CHECK(r.w[i] == k.out[i]);
  }
}

TEST_CASE("device Philox core == CPU Philox bit for bit", "[cuda][philox]") {
  std::uint64_t s = 12345;
  int mismatches = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::uint64_t a = testing::splitmix64(s), b = testing::splitmix64(s);
    const std::uint64_t c = testing::splitmix64(s);
    const PhiloxCounter ctr{std::uint32_t(a), std::uint32_t(a >> 32), std::uint32_t(b),
                            std::uint32_t(b >> 32)};
    const PhiloxKey key{std::uint32_t(c), std::uint32_t(c >> 32)};
    const PhiloxCounter want = philox4x32_10(ctr, key);
    const hd::Philox4 got =
        hd::philox4x32_10(hd::Philox4{{ctr[0], ctr[1], ctr[2], ctr[3]}}, key.k0, key.k1);
    for (int i = 0; i < 4; ++i) mismatches += got.w[i] != want[i];
  }
  CHECK(mismatches == 0);
}

TEST_CASE("device CounterRng words and uniforms == runtime/random.hpp", "[cuda][philox]") {
  const std::uint64_t seeds[] = {0, 1, 1234, 0xdeadbeefcafef00dull};
  const std::uint64_t streams[] = {0, 7, 1ull << 40, dropout_stream(3, 2, kDropAttn)};
  for (std::uint64_t seed : seeds)
    for (std::uint64_t stream : streams) {
      CounterRng rng(seed, stream);
      // Indices near 0, across a 2^32 word boundary and far out.
      for (std::uint64_t base :
           {std::uint64_t{0}, (std::uint64_t{1} << 34) - 5, std::uint64_t{1} << 50})
        for (std::uint64_t i = base; i < base + 37; ++i) {
          REQUIRE(hd::philox_word(seed, stream, i) == rng.word(i));
          REQUIRE(bits(hd::uniform_at(seed, stream, i)) ==
                  bits(uniform_at(seed, stream, std::int64_t(i))));
        }
      // fill_uniform with a range (one fma per element).
      std::vector<float> want(301);
      fill_uniform(seed, stream, 1001, want.data(), std::int64_t(want.size()), -0.25f, 3.5f);
      for (std::size_t k = 0; k < want.size(); ++k)
        REQUIRE(bits(hd::uniform_in(seed, stream, 1001 + k, -0.25f, 3.5f)) == bits(want[k]));
    }
}

TEST_CASE("device dropout masks == dropout_keep_row on every ISA path", "[cuda][philox]") {
  for (Isa isa : supported_isas()) {
    const KernelCtx ctx{isa, 1, 64};
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
      const std::uint64_t seed = 77, stream = dropout_stream(11, 3, kDropFc2);
      const std::int64_t first = 123457, n = 1000;
      std::vector<std::uint8_t> want(n);
      dropout_keep_row(ctx, seed, stream, first, n, p, want.data());
      int kept = 0;
      for (std::int64_t k = 0; k < n; ++k) {
        const bool got = hd::dropout_keep(seed, stream, std::uint64_t(first + k), p);
        REQUIRE(got == (want[k] != 0));
        kept += got;
      }
      if (p == 0.0f) CHECK(kept == n);
      if (p == 0.5f) CHECK((kept > 400 && kept < 600));
    }
  }
}
