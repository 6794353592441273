// Multi-rank tests of the tree collectives (runtime/collectives.hpp): a tree allreduce of
// per-rank canonical subtrees equals the single-process canonical sum bit for bit, through
// every algorithm, piece size and uneven length; and a measured record of where the
// vendor MPI_Allreduce differs. Runs at np 1, 2, 4; every rank takes every branch.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/watchdog.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::same_bits;

namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Deterministic value of logical element `i` of stream `seed`: mixed signs, magnitudes
// over ~2^-20..2^20, and some signed zeros.
float value(std::uint64_t seed, std::uint64_t i) {
  const std::uint64_t h = splitmix64(seed * 0x2545f4914f6cdd1dull ^ splitmix64(i));
  const float sign = (h >> 63) ? -1.0f : 1.0f;
  if ((h & 31) == 0) return sign * 0.0f;
  const float mant = 1.0f + static_cast<float>((h >> 8) & 0xffffff) / 16777216.0f;
  const int exp = static_cast<int>((h >> 40) % 41) - 20;
  return sign * std::ldexp(mant, exp);
}

std::vector<float> make(std::uint64_t seed, std::size_t n, std::size_t offset = 0) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(seed, offset + i);
  return v;
}

// Expected result of a tree allreduce where rank j contributes make(seed + j, n).
std::vector<float> expected_tree(int P, std::uint64_t seed, std::size_t n) {
  std::vector<std::vector<float>> parts;
  std::vector<const float*> ptrs;
  for (int j = 0; j < P; ++j) parts.push_back(make(seed + static_cast<std::uint64_t>(j), n));
  for (auto& p : parts) ptrs.push_back(p.data());
  std::vector<float> out(n);
  tree_sum(TreeShape::pow2, ptrs, static_cast<std::int64_t>(n), out.data());
  return out;
}

const TreeAlgorithm kAlgorithms[] = {TreeAlgorithm::doubling, TreeAlgorithm::halving,
                                     TreeAlgorithm::automatic};
const char* algo_name(TreeAlgorithm a) {
  return a == TreeAlgorithm::doubling  ? "doubling"
         : a == TreeAlgorithm::halving ? "halving"
                                       : "auto";
}

}  // namespace

TEST_CASE("tree allreduce of csum_rows subtrees equals the single-process csum_rows") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  if (!world.power_of_two()) {  // same decision on every rank; ctest runs np 1, 2, 4
    WARN("np=" << P << " is not a power of two: rank shards are not aligned subtrees");
    return;
  }
  const std::int64_t N = 6007;  // columns: not a multiple of the group size
  for (int B : {64, 4}) {
    // K rows = 8 blocks; at np <= 8 each rank owns a power-of-two number of whole blocks.
    const std::int64_t K = 8 * B, rows = K / P;
    const auto X = make(1000 + static_cast<std::uint64_t>(B), static_cast<std::size_t>(K * N));
    const KernelCtx kctx = KernelCtx::best(1, B);
    std::vector<float> want(static_cast<std::size_t>(N));
    csum_rows(kctx, X.data(), K, N, N, want.data());
    std::vector<float> partial(static_cast<std::size_t>(N));
    csum_rows(kctx, X.data() + r * rows * N, rows, N, N, partial.data());
    const TreeOptions tiny_pieces{.halving_min_bytes = 4096, .piece_bytes = 4096};
    for (TreeAlgorithm algo : kAlgorithms) {
      for (const TreeOptions& opt : {TreeOptions{}, tiny_pieces}) {
        auto got = partial;
        tree_allreduce(world, got, algo, opt);
        INFO("B=" << B << " algorithm=" << algo_name(algo) << " piece=" << opt.piece_bytes);
        CHECK(same_bits(got, want));
      }
    }
    // The same through reduce-scatter + allgather (length padded to a multiple of P with
    // -0.0, the additive identity, which leaves every sum's bits unchanged).
    const std::size_t seg = (static_cast<std::size_t>(N) + 3) / 4 * 4 / static_cast<std::size_t>(P);
    std::vector<float> padded(seg * static_cast<std::size_t>(P), -0.0f);
    std::copy(partial.begin(), partial.end(), padded.begin());
    for (const TreeOptions& opt : {TreeOptions{}, tiny_pieces}) {
      std::vector<float> mine(seg), all(padded.size());
      tree_reduce_scatter(world, padded, mine, opt);
      const float* ref = want.data() + seg * static_cast<std::size_t>(r);
      const std::size_t start = std::min(static_cast<std::size_t>(N), seg * r);
      const std::size_t valid = std::min(seg, static_cast<std::size_t>(N) - start);
      INFO("B=" << B << " reduce-scatter segment of rank " << r);
      CHECK(std::memcmp(mine.data(), ref, valid * sizeof(float)) == 0);
      allgather(world, mine, all);
      all.resize(static_cast<std::size_t>(N));
      CHECK(same_bits(all, want));
    }
  }
}

TEST_CASE("tree allreduce equals tree_sum over ranks for any length, identical on all ranks") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  const TreeOptions small{.halving_min_bytes = 64, .piece_bytes = 4096};
  for (std::size_t n :
       {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{37},
        std::size_t{1001}, std::size_t{4096}, std::size_t{70001}, std::size_t{300000}}) {
    const auto want = expected_tree(P, 77, n);
    std::vector<float> results[3];
    int i = 0;
    for (TreeAlgorithm algo : kAlgorithms) {
      auto got = make(77 + static_cast<std::uint64_t>(r), n);
      tree_allreduce(world, got, algo, small);
      INFO("n=" << n << " algorithm=" << algo_name(algo));
      CHECK(same_bits(got, want));
      CHECK(identical_across_ranks(world, got));
      results[i++] = std::move(got);
    }
    CHECK(same_bits(results[0], results[1]));  // doubling == halving, bit for bit
  }
}

TEST_CASE("tree reduce-scatter gives rank r segment r of the tree allreduce") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  for (std::size_t seg : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{65536}}) {
    const std::size_t n = seg * static_cast<std::size_t>(P);
    const auto want = expected_tree(P, 500, n);
    const auto send = make(500 + static_cast<std::uint64_t>(r), n);
    std::vector<float> got(seg);
    tree_reduce_scatter(world, send, got);
    INFO("segment length " << seg);
    CHECK(std::memcmp(got.data(), want.data() + seg * static_cast<std::size_t>(r),
                      seg * sizeof(float)) == 0);
    std::vector<float> got_mode(seg);
    reduce_scatter_sum(Determinism::invariant, world, send, got_mode);
    CHECK(std::memcmp(got_mode.data(), got.data(), seg * sizeof(float)) == 0);
  }
  // A send buffer that is not P equal segments is a lockstep::Error on every rank.
  std::vector<float> send(static_cast<std::size_t>(P) * 4 + 1), recv(4);
  CHECK_THROWS_AS(tree_reduce_scatter(world, send, recv), Error);
}

TEST_CASE("the tree collectives' scratch is what tree_*_scratch predict") {
  const int P = Communicator::world().size(), r = Communicator::world().rank();
  const TreeOptions small{.halving_min_bytes = 64, .piece_bytes = 4096};
  for (const TreeOptions& o : {TreeOptions{}, small})
    for (std::size_t n : {std::size_t{1}, std::size_t{1000}, std::size_t{70001},
                          std::size_t{3000000}}) {
      INFO("n=" << n << " piece_bytes=" << o.piece_bytes);
      const Communicator fresh = Communicator::world();  // its own scratch, none yet
      auto buf = make(9 + static_cast<std::uint64_t>(r), n);
      tree_allreduce(fresh, buf, TreeAlgorithm::automatic, o);
      CHECK(fresh.scratch_floats() == tree_allreduce_scratch(P, n, o));
      tree_allreduce(fresh, buf, TreeAlgorithm::automatic, o);  // grow-only: no more
      CHECK(fresh.scratch_floats() == tree_allreduce_scratch(P, n, o));

      const Communicator fresh_rs = Communicator::world();
      const std::size_t seg = (n + static_cast<std::size_t>(P) - 1) / static_cast<std::size_t>(P);
      const auto send = make(10 + static_cast<std::uint64_t>(r), seg * static_cast<std::size_t>(P));
      std::vector<float> recv(seg);
      tree_reduce_scatter(fresh_rs, send, recv, o);
      CHECK(fresh_rs.scratch_floats() == tree_reduce_scatter_scratch(P, send.size(), o));
    }
  // The prediction for a power-of-two group is not zero (so the equality above is no tautology
  // where this test runs on 2 or 4 ranks): one piece in and one out, plus the work copy.
  CHECK(tree_allreduce_scratch(2, 3000000) > 0);
  CHECK(tree_reduce_scatter_scratch(4, 4000) > 4000);
  CHECK(tree_allreduce_scratch(3, 3000000) == 0);
}

TEST_CASE("allreduce_sum dispatches by determinism mode") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  const std::size_t n = 50000;
  const auto mine = make(900 + static_cast<std::uint64_t>(r), n);
  auto inv = mine;
  allreduce_sum(Determinism::invariant, world, inv);
  CHECK(same_bits(inv, expected_tree(P, 900, n)));
  // deterministic: the vendor call, same bits run to run at the same layout and size.
  auto det1 = mine, det2 = mine, vend = mine;
  allreduce_sum(Determinism::deterministic, world, det1);
  allreduce_sum(Determinism::deterministic, world, det2);
  vendor_allreduce(world, vend);
  CHECK(same_bits(det1, det2));
  CHECK(same_bits(det1, vend));
  CHECK(identical_across_ranks(world, det1));
  auto fast = mine;
  allreduce_sum(Determinism::fast, world, fast);
  CHECK(identical_across_ranks(world, fast));
}

TEST_CASE("record where vendor MPI_Allreduce differs from the canonical tree") {
  // Not an assertion that they must differ: a measured reason for the tree. At np 1 and 2
  // every algorithm adds the same two operands, so they agree; from np 4 the vendor's
  // algorithm (chosen by size and rank count) associates differently.
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  for (std::size_t n : {std::size_t{3}, std::size_t{1024}, std::size_t{4099}, std::size_t{65536},
                        std::size_t{1} << 20, std::size_t{1} << 22}) {
    auto tree = make(31 + static_cast<std::uint64_t>(r), n), vendor = tree;
    tree_allreduce(world, tree);
    vendor_allreduce(world, vendor);
    const BitDiff d = bit_diff(tree, vendor);
    if (r == 0) {
      std::printf(
          "{\"record\":\"vendor_vs_tree\",\"np\":%d,\"elements\":%zu,\"bytes\":%zu,"
          "\"differing\":%lld,\"max_ulp\":%llu}\n",
          P, n, n * sizeof(float), static_cast<long long>(d.differing),
          static_cast<unsigned long long>(d.max_ulp));
      std::fflush(stdout);
    }
    if (P <= 2) CHECK(d.differing == 0);
    CHECK(identical_across_ranks(world, vendor));  // both are consistent across ranks
  }
}

TEST_CASE("watched waits (watchdog armed) give the same bits as plain waits") {
  // Every collective's wait is watchdog::watched_wait; armed, it polls MPI_Testall and
  // answers probes instead of blocking in MPI_Waitall. Nothing else may change.
  const Communicator world = Communicator::world();
  const int r = world.rank();
  const std::size_t n = 70001;
  const auto mine = make(4242 + static_cast<std::uint64_t>(r), n);
  auto run_all = [&] {
    std::vector<float> out;
    for (TreeAlgorithm algo : kAlgorithms) {
      auto buf = mine;
      tree_allreduce(world, buf, algo, TreeOptions{});
      out.insert(out.end(), buf.begin(), buf.end());
    }
    for (Determinism mode : {Determinism::invariant, Determinism::deterministic}) {
      auto buf = mine;
      allreduce_sum(mode, world, buf);
      out.insert(out.end(), buf.begin(), buf.end());
      std::vector<float> seg(n / static_cast<std::size_t>(world.size()));
      reduce_scatter_sum(mode, world, std::span<const float>(mine).first(seg.size() * world.size()),
                         seg);
      out.insert(out.end(), seg.begin(), seg.end());
    }
    std::vector<float> all(mine.size() * static_cast<std::size_t>(world.size()));
    allgather(world, mine, all);
    out.insert(out.end(), all.begin(), all.end());
    auto b = mine;
    broadcast(world, b, world.size() - 1);
    out.insert(out.end(), b.begin(), b.end());
    out.push_back(
        static_cast<float>(allreduce_u64(world, static_cast<std::uint64_t>(r) + 1, IntOp::sum)));
    world.barrier();
    return out;
  };
  const auto plain = run_all();
  std::vector<float> watched;
  {
    watchdog::Session session(world, "test", {false, 600.0}, 5);
    CHECK(watchdog::timeout_seconds() == 600.0);
    watched = run_all();
  }
  CHECK(watchdog::timeout_seconds() == 0.0);
  CHECK(same_bits(plain, watched));
}

TEST_CASE("bit_diff counts differing elements and ulp distance") {
  const std::vector<float> a{1.0f, 0.0f, -2.0f, 3.0f};
  const std::vector<float> b{1.0f, -0.0f, std::nextafter(-2.0f, -4.0f), 3.0f};
  const BitDiff d = bit_diff(a, b);
  CHECK(d.differing == 2);
  CHECK(d.max_ulp == 1);
  CHECK(d.first == 1);
  CHECK(bit_diff(a, a).differing == 0);
  CHECK_THROWS_AS(bit_diff(a, std::vector<float>(3)), Error);
}
