// Multi-rank tests of the process grid and the communicator (runtime/grid.hpp,
// runtime/comm.hpp): coordinates and sub-communicator membership for every tp dividing the
// world size, validation errors, checked MPI calls, and non-power-of-two groups (which
// reduce with identical bits on every rank but report themselves as not layout-invariant).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/grid.hpp"

using namespace lockstep;

namespace {

std::vector<int> members(const Communicator& comm, int world_rank) {
  std::vector<int> all(static_cast<std::size_t>(comm.size()));
  check_mpi(MPI_Allgather(&world_rank, 1, MPI_INT, all.data(), 1, MPI_INT, comm.handle()),
            "MPI_Allgather", comm.handle());
  return all;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

float value(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + i * 0xbf58476d1ce4e5b9ull + 1;
  x = (x ^ (x >> 31)) * 0x94d049bb133111ebull;
  x ^= x >> 29;
  const float mag = static_cast<float>(x >> 40) / static_cast<float>(1u << 24);
  const int e = static_cast<int>((x >> 8) % 30) - 15;
  return ((x & 1) ? -1.0f : 1.0f) * std::ldexp(mag, e);
}

}  // namespace

TEST_CASE("grid coordinates and sub-communicators for every tp dividing the world") {
  const Communicator world = Communicator::world();
  const int np = world.size(), r = world.rank();
  for (int tp : {1, 2, 4}) {
    if (np % tp != 0) continue;  // same decision on every rank
    const Grid g = Grid::create(world, tp);
    INFO("tp=" << tp << " " << g.describe());
    CHECK(g.tp_size() == tp);
    CHECK(g.dp_size() == np / tp);
    CHECK(g.tp_rank() == r % tp);
    CHECK(g.dp_rank() == r / tp);
    CHECK(g.rank_of(g.tp_rank(), g.dp_rank()) == r);
    CHECK(g.tag() == "tp" + std::to_string(r % tp) + "-dp" + std::to_string(r / tp));
    CHECK(g.tp_comm().name() == "tp");
    CHECK(g.dp_comm().name() == "dp");
    CHECK(g.tp_comm().rank() == g.tp_rank());
    CHECK(g.dp_comm().rank() == g.dp_rank());
    std::vector<int> want_tp, want_dp;
    for (int t = 0; t < tp; ++t) want_tp.push_back(g.rank_of(t, g.dp_rank()));
    for (int d = 0; d < np / tp; ++d) want_dp.push_back(g.rank_of(g.tp_rank(), d));
    CHECK(members(g.tp_comm(), r) == want_tp);
    CHECK(members(g.dp_comm(), r) == want_dp);
    auto pow2 = [](int n) { return (n & (n - 1)) == 0; };
    const bool invariant = pow2(tp) && pow2(np / tp);  // true for ctest's np 1, 2, 4
    CHECK(g.layout_invariant() == invariant);
    CHECK(g.invariance_reason().empty() == invariant);
  }
}

TEST_CASE("grid validation errors name the numbers and hint at the fix") {
  const Communicator world = Communicator::world();
  const int np = world.size();
  try {
    (void)Grid::create(world, np + 1);  // throws before any MPI call, on every rank
    FAIL_CHECK("no error for tp > world size");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(contains(msg, std::to_string(np) + " ranks as TP=" + std::to_string(np + 1)));
    CHECK(contains(msg, "not divisible"));
    CHECK(contains(e.hint(), "divisors of " + std::to_string(np)));
  }
  CHECK_THROWS_AS(Grid::create(world, 0), Error);
  CHECK_THROWS_AS(Grid::create(world, -2), Error);
  CHECK_THROWS_AS(Grid::validate(4, 3), Error);
  CHECK_NOTHROW(Grid::validate(6, 3));
}

TEST_CASE("a failed MPI call becomes a lockstep::Error naming the call, communicator and rank") {
  const Communicator world = Communicator::world();
  float x = 0.0f;
  try {
    // An invalid destination rank: Open MPI's parameter check returns MPI_ERR_RANK
    // locally (MPI_ERRORS_RETURN), so no peer is involved and nothing can hang.
    check_mpi(MPI_Send(&x, 1, MPI_FLOAT, world.size() + 5, 0, world.handle()), "MPI_Send",
              world.handle());
    FAIL_CHECK("MPI_Send to an invalid rank did not fail");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(contains(msg, "MPI_Send failed on communicator 'world'"));
    CHECK(contains(msg,
                   "rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size())));
    CHECK(!e.hint().empty());
  }
  std::vector<float> buf(4);
  CHECK_THROWS_AS(broadcast(world, buf, world.size()), Error);
}

TEST_CASE("non-power-of-two groups: identical bits on every rank, reported not invariant") {
  const Communicator world = Communicator::world();
  const int np = world.size(), r = world.rank();
  // At np 4: ranks 0-2 form a group of 3, rank 3 a group of 1. At np 1, 2 the groups are
  // powers of two and the same code checks the general path.
  const int three = np >= 3 ? 3 : np;
  const Communicator sub = world.split(r < three ? 0 : 1, r, r < three ? "three" : "rest");
  const int P = sub.size(), sr = sub.rank();
  if (P == 3) {
    CHECK(!sub.layout_invariant());
    CHECK(contains(sub.invariance_reason(), "3 ranks, not a power of two"));
    const Grid g = Grid::create(sub, 1);  // TP=1 x DP=3
    CHECK(!g.layout_invariant());
    CHECK(contains(g.invariance_reason(), "DP=3 is not a power of two"));
    const Grid g3 = Grid::create(sub, 3);  // TP=3 x DP=1
    CHECK(!g3.tp_power_of_two());
    CHECK(contains(g3.invariance_reason(), "TP=3"));
  } else {
    CHECK(sub.layout_invariant());
    CHECK(sub.invariance_reason().empty());
  }
  for (std::size_t n :
       {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{4099}, std::size_t{200000}}) {
    std::vector<std::vector<float>> parts(static_cast<std::size_t>(P), std::vector<float>(n));
    std::vector<const float*> ptrs;
    for (int j = 0; j < P; ++j) {
      for (std::size_t i = 0; i < n; ++i) parts[j][i] = value(static_cast<std::uint64_t>(j), i);
      ptrs.push_back(parts[j].data());
    }
    std::vector<float> want(n);
    tree_sum(TreeShape::pow2, ptrs, static_cast<std::int64_t>(n), want.data());
    auto got = parts[static_cast<std::size_t>(sr)];
    tree_allreduce(sub, got);
    INFO("group of " << P << ", n=" << n);
    CHECK(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(identical_across_ranks(sub, got));
    // Reduce-scatter on the same group: equal segments of length n.
    std::vector<float> send(n * static_cast<std::size_t>(P));
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = value(100 + sr, i);
    std::vector<float> mine(n);
    tree_reduce_scatter(sub, send, mine);
    std::vector<std::vector<float>> rs(static_cast<std::size_t>(P), std::vector<float>(n));
    std::vector<const float*> rsp;
    for (int j = 0; j < P; ++j) {
      for (std::size_t i = 0; i < n; ++i) rs[j][i] = value(100 + j, n * sr + i);
      rsp.push_back(rs[j].data());
    }
    std::vector<float> rs_want(n);
    tree_sum(TreeShape::pow2, rsp, static_cast<std::int64_t>(n), rs_want.data());
    CHECK(std::memcmp(mine.data(), rs_want.data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("exact collectives: uint64 sum/max/min, broadcast and allgather") {
  const Communicator world = Communicator::world();
  const int np = world.size(), r = world.rank();
  auto fp = [](int rank, int k) -> std::uint64_t {
    return (0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(rank + 1)) ^
           (0xdeadbeefcafef00dull + static_cast<std::uint64_t>(k) * 0x100000001b3ull);
  };
  std::vector<std::uint64_t> sum(5), mx(5), mn(5);
  for (int k = 0; k < 5; ++k) sum[k] = mx[k] = mn[k] = fp(r, k);
  allreduce_u64(world, sum, IntOp::sum);
  allreduce_u64(world, mx, IntOp::max);
  allreduce_u64(world, mn, IntOp::min);
  for (int k = 0; k < 5; ++k) {
    std::uint64_t s = 0, hi = 0, lo = ~std::uint64_t{0};
    for (int j = 0; j < np; ++j) {
      s += fp(j, k);  // wraps modulo 2^64
      hi = std::max(hi, fp(j, k));
      lo = std::min(lo, fp(j, k));
    }
    CHECK(sum[k] == s);
    CHECK(mx[k] == hi);
    CHECK(mn[k] == lo);
  }
  CHECK(allreduce_u64(world, std::uint64_t{1}, IntOp::sum) == static_cast<std::uint64_t>(np));

  // broadcast / allgather move bits exactly, including NaN payloads and signed zeros.
  const std::uint32_t nan_bits = 0x7fc12345u;
  float nan;
  std::memcpy(&nan, &nan_bits, 4);
  std::vector<float> root{-0.0f, nan, 1e-40f, -3.5f};
  std::vector<float> buf = r == np - 1 ? root : std::vector<float>(4, 9.0f);
  broadcast(world, buf, np - 1);
  CHECK(std::memcmp(buf.data(), root.data(), 4 * sizeof(float)) == 0);
  std::vector<float> mine{static_cast<float>(r), -0.0f}, all(2 * static_cast<std::size_t>(np));
  allgather(world, mine, all);
  for (int j = 0; j < np; ++j) {
    CHECK(all[2 * j] == static_cast<float>(j));
    CHECK(std::signbit(all[2 * j + 1]));
  }
  std::vector<float> differs{static_cast<float>(r == np - 1 ? 1 : 0)};
  CHECK(identical_across_ranks(world, differs) == (np == 1));
}
