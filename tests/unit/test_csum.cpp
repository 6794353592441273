// Bitwise tests of the canonical sum (docs/design.md section 2) against an independent, literal
// recursive definition, and of its shard/thread/ISA independence.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::bits;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;

namespace {
// Literal T(lo, hi) over block indices, each block a chain from -0.0 (written from the
// contract's text, sharing no code with runtime/csum.cpp).
float block_chain(const std::vector<float>& x, std::int64_t b, int B) {
  float acc = -0.0f;
  for (std::int64_t k = b * B; k < std::min<std::int64_t>(x.size(), (b + 1) * B); ++k) acc += x[k];
  return acc;
}
float T(const std::vector<float>& x, std::int64_t lo, std::int64_t hi, int B) {
  if (hi - lo == 1) return block_chain(x, lo, B);
  std::int64_t p = 1;
  while (p * 2 < hi - lo) p *= 2;
  return T(x, lo, lo + p, B) + T(x, lo + p, hi, B);
}
float literal_csum(const std::vector<float>& x, int B) {
  const std::int64_t nb = (static_cast<std::int64_t>(x.size()) + B - 1) / B;
  return nb == 0 ? -0.0f : T(x, 0, nb, B);
}
}  // namespace

TEST_CASE("csum equals the literal contract for many lengths and block sizes") {
  for (int B : {1, 2, 7, 16, 64, 100}) {
    for (std::size_t n : {0, 1, 2, 3, 63, 64, 65, 127, 128, 129, 1000, 4096, 5000}) {
      auto x = mixed_floats(n, 1000 + n * 7 + B);
      INFO("B=" << B << " n=" << n);
      REQUIRE(bits(csum(x.data(), n, B)) == bits(literal_csum(x, B)));
    }
  }
}

TEST_CASE("csum is accurate against a float64 sum") {
  auto x = mixed_floats(100000, 5);
  double ref = 0, mag = 0;
  for (float v : x) ref += v, mag += std::fabs(v);
  REQUIRE(std::fabs(csum(x.data(), x.size(), 64) - ref) <= 1e-6 * mag);
}

TEST_CASE("csum keeps IEEE's additive identity: empty sums and zeros keep their sign") {
  REQUIRE(bits(csum(nullptr, 0, 64)) == bits(-0.0f));
  std::vector<float> negz(200, -0.0f);
  REQUIRE(bits(csum(negz.data(), negz.size(), 64)) == bits(-0.0f));
  std::vector<float> mixed = {-0.0f, 0.0f};
  REQUIRE(bits(csum(mixed.data(), 2, 1)) == bits(0.0f));
  float one = 1.0f, mone = -1.0f;
  REQUIRE(bits(cdot(&one, &mone, 1, 64)) == bits(-1.0f));
}

TEST_CASE("aligned power-of-two shards combined by the tree equal the unsplit csum") {
  const int B = 64;
  for (std::int64_t blocks : {8, 16, 13}) {  // 13: the last shard is short
    auto x = mixed_floats(blocks * B - (blocks == 13 ? 17 : 0), 42 + blocks);
    const float whole = csum(x.data(), x.size(), B);
    for (int shards : {2, 4, 8}) {
      const std::int64_t per = (blocks == 13 ? 16 : blocks) / shards * B;
      std::vector<float> parts;
      for (int s = 0; s < shards; ++s) {
        const std::int64_t lo = std::min<std::int64_t>(x.size(), s * per);
        const std::int64_t hi = std::min<std::int64_t>(x.size(), lo + per);
        if (hi > lo) parts.push_back(csum(x.data() + lo, hi - lo, B));
      }
      INFO("blocks=" << blocks << " shards=" << shards);
      float combined =
          tree_fold(std::span<const float>(parts), [](float a, float b) { return a + b; });
      REQUIRE(bits(combined) == bits(whole));
    }
  }
}

TEST_CASE("BinaryCounter equals tree_fold for every leaf count and checks alignment") {
  for (int n = 0; n <= 70; ++n) {
    auto leaves = mixed_floats(n * 3, 77 + n);
    BinaryCounter counter(3);
    for (int i = 0; i < n; ++i) counter.push(&leaves[i * 3]);
    float got[3];
    counter.result(got);
    for (int e = 0; e < 3; ++e) {
      std::vector<float> col;
      for (int i = 0; i < n; ++i) col.push_back(leaves[i * 3 + e]);
      float want = tree_fold(std::span<const float>(col), [](float a, float b) { return a + b; });
      INFO("n=" << n << " e=" << e);
      REQUIRE(bits(got[e]) == bits(want));
    }
  }
  BinaryCounter c(1);
  float v = 1.0f;
  c.push(&v);
  REQUIRE_THROWS_AS(c.push_subtree(&v, 2), Error);
  REQUIRE_THROWS_AS(c.push_subtree(&v, 3), Error);
}

TEST_CASE("subtrees pushed into a BinaryCounter equal leaf-by-leaf pushes") {
  const int B = 16, len = 5;
  auto x = mixed_floats(12 * B * len, 9);  // 12 blocks of B rows, len columns
  KernelCtx ctx{Isa::scalar, 1, B};
  std::vector<float> whole(len), piece(len), got(len);
  csum_rows(ctx, x.data(), 12 * B, len, len, whole.data());
  BinaryCounter counter(len);
  for (int mb : {0, 4}) {  // two microbatches of 4 blocks, then four of 1 block
    csum_rows(ctx, x.data() + mb * B * len, 4 * B, len, len, piece.data());
    counter.push_subtree(piece.data(), 4);
  }
  for (int b = 8; b < 12; ++b) {
    csum_rows(ctx, x.data() + b * B * len, B, len, len, piece.data());
    counter.push(piece.data());
  }
  counter.result(got.data());
  REQUIRE(same_bits(got.data(), whole.data(), len));
}

TEST_CASE("csum_rows equals per-column csum, for any thread count and ISA setting") {
  for (int B : {1, 7, 64}) {
    for (auto [rows, cols] : {std::pair{1, 1}, {3, 300}, {200, 17}, {640, 513}}) {
      auto x = mixed_floats(static_cast<std::size_t>(rows) * (cols + 3), rows * 31 + cols);
      std::vector<float> want(cols);
      for (int j = 0; j < cols; ++j) want[j] = csum(x.data() + j, rows, B, cols + 3);
      for (Isa isa : supported_isas()) {
        for (int threads : {1, 2, 3}) {
          std::vector<float> got(cols, 123.0f);
          csum_rows(KernelCtx{isa, threads, B}, x.data(), rows, cols, cols + 3, got.data());
          INFO("B=" << B << " rows=" << rows << " cols=" << cols << " threads=" << threads);
          REQUIRE(same_bits(got.data(), want.data(), cols));
        }
      }
    }
  }
}

TEST_CASE("tree_sum over parts equals tree_fold per element") {
  for (int P : {1, 2, 3, 4, 5, 8}) {
    std::vector<std::vector<float>> data;
    std::vector<const float*> ptrs;
    for (int p = 0; p < P; ++p) data.push_back(mixed_floats(33, 500 + p));
    for (auto& d : data) ptrs.push_back(d.data());
    std::vector<float> out(33);
    tree_sum(ptrs, 33, out.data());
    for (int e = 0; e < 33; ++e) {
      std::vector<float> leaves;
      for (int p = 0; p < P; ++p) leaves.push_back(data[p][e]);
      REQUIRE(bits(out[e]) == bits(tree_fold(std::span<const float>(leaves),
                                             [](float a, float b) { return a + b; })));
    }
  }
}

TEST_CASE("a bad block size is refused with a hint") {
  float x = 1.0f;
  REQUIRE_THROWS_WITH(csum(&x, 1, 0), Catch::Contains("reduce_block"));
}
