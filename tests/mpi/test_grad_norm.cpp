// Multi-rank test of the exact gradient norm (optim/grad_norm.hpp): each rank accumulates
// its slice of the gradients (uneven, non-power-of-two sizes, several tensors), the limbs
// are combined with allreduce_u64, and the norm equals the single-process norm bit for
// bit at np 1, 2, 4. Every rank takes every branch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "optim/clip.hpp"
#include "optim/grad_norm.hpp"
#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;

namespace {

// Gradients of three "tensors" with wide magnitudes and subnormals.
std::vector<std::vector<float>> model_grads() {
  std::vector<std::vector<float>> g;
  for (std::size_t n : {1000003u, 4099u, 17u}) {
    auto v = lockstep::testing::mixed_floats(n, 77 + n);
    std::uint64_t s = n;
    for (auto& x : v) {
      const std::uint64_t r = lockstep::testing::splitmix64(s);
      if (r % 97 == 0) x = std::ldexp(x, -140);  // subnormal or tiny
      if (r % 89 == 0) x = std::ldexp(x, 100);   // huge
    }
    g.push_back(std::move(v));
  }
  return g;
}

std::uint32_t fbits(float f) {
  return lockstep::testing::bits(f);
}

}  // namespace

TEST_CASE("rank slices + allreduce_u64 of limbs == single-process norm, bitwise") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  const auto g = model_grads();

  SquareSumAccumulator single;
  for (const auto& t : g) single.add(t);

  // Uneven slices: rank r takes [n*r/P + r%2, n*(r+1)/P + (r+1)%2) clipped, so boundaries
  // are not aligned to anything.
  SquareSumAccumulator mine;
  for (const auto& t : g) {
    const std::size_t n = t.size();
    auto bound = [&](int k) -> std::size_t {
      if (k == 0) return 0;
      if (k == P) return n;
      return std::min(n, n * static_cast<std::size_t>(k) / static_cast<std::size_t>(P) +
                             static_cast<std::size_t>(k % 2));
    };
    mine.add(std::span<const float>(t.data() + bound(r), bound(r + 1) - bound(r)));
  }
  SquareSumAccumulator viaspan = mine;
  allreduce_u64(world, viaspan.limbs(), IntOp::sum);
  viaspan.normalize();
  allreduce_square_sum(world, mine);

  CHECK(mine == single);
  CHECK(viaspan == single);
  CHECK(mine.exact_hex() == single.exact_hex());
  CHECK(fbits(mine.norm()) == fbits(single.norm()));
  const float n0 = mine.norm();
  // Every rank holds the same bits.
  std::uint64_t b = fbits(n0);
  CHECK(allreduce_u64(world, b, IntOp::max) == allreduce_u64(world, b, IntOp::min));
  // And the clip decision is identical everywhere.
  const ClipResult c = clip_coefficient(n0, 1.0f);
  CHECK(fbits(c.coef) == fbits(clip_coefficient(single.norm(), 1.0f).coef));
}

TEST_CASE("a NaN or Inf on one rank reaches every rank") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  SquareSumAccumulator acc;
  acc.add(1.0f);
  if (r == P - 1) acc.add(std::numeric_limits<float>::infinity());
  allreduce_square_sum(world, acc);
  CHECK(acc.norm() == std::numeric_limits<float>::infinity());
  SquareSumAccumulator acc2;
  if (r == 0) acc2.add(std::numeric_limits<float>::quiet_NaN());
  allreduce_square_sum(world, acc2);
  CHECK(std::isnan(acc2.norm()));
  SquareSumAccumulator ones;  // each rank adds 1: norm sqrt(P)
  ones.add(1.0f);
  allreduce_square_sum(world, ones);
  CHECK(ones.sum_as_double() == static_cast<double>(P));
}
