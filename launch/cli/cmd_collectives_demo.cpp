// `lockstep collectives-demo`: the multi-rank run that `launch/lockstep demo` performs until
// the training loop lands. Every rank builds the same logical data (a function of the
// logical index only), owns an aligned slice of the reduction axis (tokens), reduces its
// slice locally and combines the slices across ranks. It then checks, bit for bit, what
// the numerical contract (docs/design.md section 2) promises and reports what the vendor
// reduction does instead:
//   1. column sums (bias-gradient shape): local csum + tree_allreduce == single-process csum;
//   2. weight gradient dW = dY^T X (canonical GEMM over the local tokens + tree_allreduce)
//      == the single-process canonical GEMM over all tokens;
//   3. the same local subtrees combined by MPI_Allreduce, and deterministic mode (one FMA
//      chain per rank + MPI_Allreduce), compared against the single-process result;
//   4. the tree results are identical on every rank and on a repeat (run-to-run).
// Exit code 0 iff every invariant-mode claim held.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "launch/cli/commands.hpp"
#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/hash.hpp"

namespace lockstep::cli {
namespace {

struct DemoConfig {
  std::int64_t tokens = 8192;  // the reduction axis (global batch x context)
  std::int64_t d_in = 256;     // columns of X (input features)
  std::int64_t d_out = 256;    // columns of dY (output features)
  int block = 64;              // numerics.reduce_block
  int threads = 1;             // OpenMP threads per rank
  std::uint64_t seed = 1234;
};

// A float that depends only on (seed, tensor, logical index): the same on every layout.
float logical_value(std::uint64_t seed, std::uint64_t tensor, std::uint64_t index) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ull + tensor * 0xD1B54A32D192ED03ull + index;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (u - 0.5f) * (1.0f + static_cast<float>((z >> 8) & 7));       // mixed magnitudes
}

std::vector<float> logical_matrix(const DemoConfig& c, std::uint64_t tensor, std::int64_t rows,
                                  std::int64_t cols) {
  std::vector<float> m(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i) m[i] = logical_value(c.seed, tensor, i);
  return m;
}

struct Line {
  std::string what;
  BitDiff diff;
  bool must_match;  // an invariant-mode claim (failure fails the demo)
};

int run_demo(const DemoConfig& c, Context& mpi) {
  const Communicator& world = mpi.world();
  const int P = world.size(), r = world.rank();
  check(c.tokens % P == 0,
        "tokens " + std::to_string(c.tokens) + " not divisible by " + std::to_string(P) + " ranks",
        "choose --tokens as a multiple of the rank count");
  const std::int64_t local = c.tokens / P, lo = r * local;
  const std::int64_t blocks = local / c.block;
  const bool aligned = local % c.block == 0 && (blocks & (blocks - 1)) == 0 && blocks > 0;
  const KernelCtx kctx{best_isa(), c.threads, c.block};

  // Logical data, identical on every rank: X [tokens, d_in], dY [tokens, d_out].
  const auto X = logical_matrix(c, 1, c.tokens, c.d_in);
  const auto dY = logical_matrix(c, 2, c.tokens, c.d_out);
  const std::size_t nsum = c.d_in, ngrad = c.d_out * c.d_in;

  // Single-process references over all tokens.
  std::vector<float> sum_ref(nsum), grad_ref(ngrad), chain_ref(ngrad);
  csum_rows(kctx, X.data(), c.tokens, c.d_in, c.d_in, sum_ref.data());
  gemm(kctx, GemmImpl::canonical, Trans::T, Trans::N, c.d_out, c.d_in, c.tokens, dY.data(), c.d_out,
       X.data(), c.d_in, grad_ref.data(), c.d_in);
  gemm(kctx, GemmImpl::chain, Trans::T, Trans::N, c.d_out, c.d_in, c.tokens, dY.data(), c.d_out,
       X.data(), c.d_in, chain_ref.data(), c.d_in);

  // This rank's subtrees over its token slice.
  std::vector<float> sum_local(nsum), grad_local(ngrad), chain_local(ngrad);
  csum_rows(kctx, X.data() + lo * c.d_in, local, c.d_in, c.d_in, sum_local.data());
  gemm(kctx, GemmImpl::canonical, Trans::T, Trans::N, c.d_out, c.d_in, local,
       dY.data() + lo * c.d_out, c.d_out, X.data() + lo * c.d_in, c.d_in, grad_local.data(),
       c.d_in);
  gemm(kctx, GemmImpl::chain, Trans::T, Trans::N, c.d_out, c.d_in, local, dY.data() + lo * c.d_out,
       c.d_out, X.data() + lo * c.d_in, c.d_in, chain_local.data(), c.d_in);

  auto tree = [&](std::vector<float> v) {
    tree_allreduce(world, v);
    return v;
  };
  auto vendor = [&](std::vector<float> v) {
    vendor_allreduce(world, v);
    return v;
  };
  const auto sum_tree = tree(sum_local), grad_tree = tree(grad_local);
  const auto grad_tree_again = tree(grad_local);
  const auto sum_vendor = vendor(sum_local), grad_vendor = vendor(grad_local);
  const auto chain_vendor = vendor(chain_local);
  const bool same_on_all =
      identical_across_ranks(world, grad_tree) && identical_across_ranks(world, sum_tree);

  const std::vector<Line> lines = {
      {"column sums: tree allreduce == single-process csum", bit_diff(sum_tree, sum_ref), true},
      {"weight grad: canonical GEMM + tree == single-process", bit_diff(grad_tree, grad_ref), true},
      {"weight grad: repeat of the tree reduction (run-to-run)",
       bit_diff(grad_tree_again, grad_tree), true},
      {"column sums: MPI_Allreduce vs single-process", bit_diff(sum_vendor, sum_ref), false},
      {"weight grad: canonical GEMM + MPI_Allreduce vs single", bit_diff(grad_vendor, grad_ref),
       false},
      {"deterministic mode (chain + MPI_Allreduce) vs single", bit_diff(chain_vendor, chain_ref),
       false},
  };
  bool ok = same_on_all;
  for (const auto& l : lines)
    if (l.must_match && l.diff.differing != 0) ok = false;
  const bool claims_apply = aligned && world.layout_invariant();
  if (r == 0) {
    std::printf(
        "collectives demo: %d rank(s), %lld tokens split %lld per rank, B=%d, %s, %d thread(s)\n",
        P, static_cast<long long>(c.tokens), static_cast<long long>(local), c.block,
        isa_name(kctx.isa), c.threads);
    if (!claims_apply)
      std::printf("  note: layout is not invariant (%s); bitwise equality is not promised\n",
                  !world.layout_invariant()
                      ? world.invariance_reason().c_str()
                      : "each rank's slice is not a power-of-two number of whole blocks");
    std::printf("  %-56s %10s %8s\n", "check", "differing", "max ulp");
    for (const auto& l : lines)
      std::printf("  %-56s %10lld %8llu  %s\n", l.what.c_str(),
                  static_cast<long long>(l.diff.differing),
                  static_cast<unsigned long long>(l.diff.max_ulp),
                  l.must_match ? (l.diff.differing == 0 ? "PASS" : "FAIL") : "(measured)");
    std::printf("  tree results identical on every rank: %s\n", same_on_all ? "PASS" : "FAIL");
    std::printf("  digest of dW: tree %s  single-process %s\n",
                hex64(xxh3_64(grad_tree.data(), ngrad * 4)).c_str(),
                hex64(xxh3_64(grad_ref.data(), ngrad * 4)).c_str());
    std::printf(
        "verdict: %s\n",
        ok ? "tree collectives reproduce the single-process canonical reduction bit for bit ✓"
           : "MISMATCH: the invariant-mode claims failed ✗");
  }
  return (ok || !claims_apply) ? 0 : 1;
}

}  // namespace

Runner add_collectives_demo(CLI::App& app) {
  auto cfg = std::make_shared<DemoConfig>();
  auto* sub = app.add_subcommand(
      "collectives-demo",
      "multi-rank proof: local subtrees + tree allreduce == single-process canonical sum");
  sub->add_option("--tokens", cfg->tokens, "length of the reduction axis")
      ->check(CLI::PositiveNumber);
  sub->add_option("--d-in", cfg->d_in, "columns of X")->check(CLI::PositiveNumber);
  sub->add_option("--d-out", cfg->d_out, "columns of dY")->check(CLI::PositiveNumber);
  sub->add_option("--block", cfg->block, "canonical block size B")->check(CLI::PositiveNumber);
  sub->add_option("--threads", cfg->threads, "OpenMP threads per rank")->check(CLI::PositiveNumber);
  sub->add_option("--seed", cfg->seed, "data seed");
  return [cfg](int argc, char** argv) {
    return run_ranks(argc, argv, [cfg](Context& mpi) { return run_demo(*cfg, mpi); });
  };
}

}  // namespace lockstep::cli
