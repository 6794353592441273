// DP gradient reduction: microbatch subtrees merged by the binary counter, then the tree
// over DP ranks, equal the single-process canonical sum over all tokens, bit for bit, for
// every microbatch size and DP size (np 1, 2, 4).
#include <catch2/catch.hpp>

#include <mpi.h>

#include <vector>

#include "parallel/dp_grad.hpp"
#include "parallel/microbatch_plan.hpp"
#include "runtime/csum.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;

TEST_CASE("microbatch counter + DP tree == single-process csum over the global batch") {
  const Communicator world = Communicator::world();
  const int dp = world.size(), r = world.rank();
  const int B = 16, ctx = 32, G = 16, len = 77;  // 16 sequences of 32 tokens; 77 grad values
  // Per-token gradient contributions: tokens x len, the same logical data on every rank.
  const auto contrib = mixed_floats(static_cast<std::size_t>(G) * ctx * len, 2024);
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
  for (int mb : {1, 2, 3, 4}) {
    const int seqs = G / dp;
    if (tree == TreeShape::pow2 && seqs % mb != 0) continue;  // pow2: equal microbatches only
    if (mb > seqs) continue;
    const KernelCtx kctx = KernelCtx{Isa::scalar, 1, B, tree}.over_sequences(ctx);
    std::vector<float> single(len);
    csum_rows(kctx, contrib.data(), G * ctx, len, len, single.data());
    const MicrobatchPlan plan = plan_microbatches(tree, seqs, mb);
    GradReducer red(len, Determinism::invariant, tree, plan.leaves);
    for (const Microbatch& m : plan.passes) {
      std::vector<float> sub(len);
      const float* first = contrib.data() + static_cast<std::size_t>(r * seqs + m.first) * ctx * len;
      csum_rows(kctx, first, m.count * ctx, len, len, sub.data());
      red.push_microbatch(sub.data(), m.width);
    }
    std::vector<float> out(len);
    red.allreduce(world, out);
    INFO("dp=" << dp << " microbatch=" << mb << " tree=" << enum_name(tree));
    CHECK(same_bits(out.data(), single.data(), len));

    // Reduce-scatter over a padded buffer gives this rank's segment of the same bits.
    const int padded = (len + dp - 1) / dp * dp;
    GradReducer red2(padded, Determinism::invariant, tree, plan.leaves);
    for (const Microbatch& m : plan.passes) {
      std::vector<float> sub(padded, -0.0f);
      const float* first = contrib.data() + static_cast<std::size_t>(r * seqs + m.first) * ctx * len;
      csum_rows(kctx, first, m.count * ctx, len, len, sub.data());
      red2.push_microbatch(sub.data(), m.width);
    }
    std::vector<float> seg(padded / dp);
    red2.reduce_scatter(world, seg);
    const int lo = r * (padded / dp), n = std::max(0, std::min(padded / dp, len - lo));
    CHECK(same_bits(seg.data(), single.data() + lo, n));
  }
}

TEST_CASE("GradReducer refuses a reduction with no microbatch") {
  GradReducer red(4, Determinism::invariant, TreeShape::pow2, 1);
  std::vector<float> out(4);
  REQUIRE_THROWS_AS(red.allreduce(Communicator::world(), out), Error);
}

TEST_CASE("deferred pushes give the bits of copying pushes, also reduced in place") {
  // push_microbatch_deferred keeps only the pointer; the caller flushes before reusing the
  // buffer (as GradSync does: pack into one buffer, reduce in place when it is the only one).
  const Communicator world = Communicator::world();
  const int dp = world.size(), r = world.rank();
  const int len = 1000 * dp + 24 * dp;  // a multiple of dp: reduce_scatter needs no padding
  for (Determinism mode : {Determinism::invariant, Determinism::deterministic}) {
    for (int n_mb : {1, 2, 3, 4}) {
      std::vector<std::vector<float>> leaves;
      for (int m = 0; m < n_mb; ++m)
        leaves.push_back(mixed_floats(static_cast<std::size_t>(len), 500 + 10 * r + m));
      INFO("dp=" << dp << " microbatches=" << n_mb << " mode=" << static_cast<int>(mode));
      GradReducer copying(len, mode, TreeShape::pow2, n_mb), deferred(len, mode, TreeShape::pow2, n_mb);
      for (const auto& l : leaves) copying.push_microbatch(l.data());
      std::vector<float> want(len), got(len);
      copying.allreduce(world, want);
      // One buffer reused for every microbatch, reduced in place.
      for (const auto& l : leaves) {
        deferred.flush_deferred();
        std::copy(l.begin(), l.end(), got.begin());
        deferred.push_microbatch_deferred(got.data());
      }
      CHECK(deferred.microbatches() == n_mb);
      deferred.allreduce(world, got);
      CHECK(same_bits(got.data(), want.data(), len));
      // Reduce-scatter straight from the deferred buffer, and after a reset.
      for (int again = 0; again < 2; ++again) {
        std::vector<float> buf(len), seg(len / dp), seg_want(len / dp);
        copying.reset();
        deferred.reset();
        for (const auto& l : leaves) {
          copying.push_microbatch(l.data());
          deferred.flush_deferred();
          std::copy(l.begin(), l.end(), buf.begin());
          deferred.push_microbatch_deferred(buf.data());
        }
        copying.reduce_scatter(world, seg_want);
        deferred.reduce_scatter(world, seg);
        CHECK(same_bits(seg.data(), seg_want.data(), len / dp));
      }
    }
  }
}
