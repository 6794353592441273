// bench_attn: speed of one (sequence, head) of causal attention's kernels, one thread, at
// bench-small's shape by default (C 256 keys, head_dim 32, reduce block 64, q/k/v rows 768
// floats apart as in the fused q/k/v buffer): the fused AVX-512 products of
// model/kernels/attn_gemm.hpp (scores Q K^T, prefix P V, suffix P^T dO) in tree form (invariant
// mode) and chain form (deterministic), and the softmax rows of model/kernels/attn_rows.hpp
// (forward; backward). Prints one JSON object per line:
//   {"bench":"attn","kernel","form","tile","C","hd","B","us_min","us_median","gflops_max","trials",
//    "calls"}
// (tile: how the prefix and suffix ran head_dim 64, AttnTile in attn_gemm.hpp: "whole" or
// "halves", "-" for the other kernels; --tiles whole,halves times both in one process.)
// gflops_max counts the causal half's products, 2 * C (C + 1) / 2 * hd per call, at us_min
// (softmax rows: no GFLOP/s; they work in place, so each call includes copying the C x C
// input back, ~256 KiB at C 256). Each trial times `calls` calls on the same operands (in L2); min
// and median over `trials` trials. On a VM whose speed drifts, compare builds by alternating
// runs and taking minima.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "model/kernels/attn_gemm.hpp"
#include "model/kernels/attn_rows.hpp"
#include "runtime/isa.hpp"
#include "runtime/random.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"Causal attention kernels of one (sequence, head): us per call"};
  std::int64_t C = 256, hd = 32, ld = 768;
  int B = 64, trials = 60, calls = 40;
  app.add_option("--context", C, "keys per sequence (a multiple of 16)")
      ->check(CLI::PositiveNumber);
  app.add_option("--head-dim", hd, "head_dim (16, 32, 48 or 64)")->check(CLI::PositiveNumber);
  app.add_option("--ld", ld, "row stride of Q, K, V (floats, >= head_dim)")
      ->check(CLI::PositiveNumber);
  app.add_option("--block", B, "reduce block B")->check(CLI::PositiveNumber);
  app.add_option("--trials", trials, "timed trials (min and median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--calls", calls, "calls per trial")->check(CLI::PositiveNumber);
  std::vector<std::string> tiles{"by_cpu"};
  app.add_option("--tiles", tiles,
                 "how the prefix and suffix products run head_dim 64 (AttnTile), timed in turn: "
                 "by_cpu, whole (one 8 x 64 tile), halves (two 8 x 32 passes)")
      ->delimiter(',')
      ->check(CLI::IsMember({"by_cpu", "whole", "halves"}));
  CLI11_PARSE(app, argc, argv);
  if (ld < hd) throw std::invalid_argument("--ld must be >= --head-dim");

  const KernelCtx ctx{Isa::avx512, 1, B};
  const KernelCtx best = KernelCtx::best(1, B);
  if (best.isa != Isa::avx512 || !attn_gemm_supported(ctx, C, hd, true)) {
    std::fprintf(stderr,
                 "bench_attn: the fused kernels need AVX-512, C a multiple of 16, head_dim in "
                 "{16, 32, 48, 64} <= B (this CPU / these options do not qualify)\n");
    return 1;
  }
  std::vector<float> q(static_cast<std::size_t>(C * ld)), k(q.size()), v(q.size());
  fill_normal(1, 11, 0, q.data(), C * ld, 0.0f, 1.0f);
  fill_normal(1, 12, 0, k.data(), C * ld, 0.0f, 1.0f);
  fill_normal(1, 13, 0, v.data(), C * ld, 0.0f, 1.0f);
  std::vector<float> s(static_cast<std::size_t>(C * C)), p(s.size()), g(s.size()), gw(s.size());
  causal_scores(
      C, hd, q.data(), ld, k.data(), ld, s.data(),
      std::vector<float>(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B))).data());
  for (std::int64_t i = 0; i < C; ++i)
    for (std::int64_t j = i + 1; j < C; ++j) s[i * C + j] = 0.0f;
  p = s;
  softmax_causal_rows(best, p.data(), C, 0, C, 0.17677669f);  // P: causal probabilities
  fill_normal(1, 14, 0, g.data(), C * C, 0.0f, 1.0f);
  std::vector<float> y(static_cast<std::size_t>(C * ld));
  std::vector<float> scratch(static_cast<std::size_t>(attn_gemm_scratch_floats(C, hd, B)));
  const double flops =
      2.0 * static_cast<double>(C) * static_cast<double>(C + 1) / 2.0 * static_cast<double>(hd);

  auto time = [&](const char* kernel, const char* form, const std::function<void()>& f, bool gemm) {
    f();  // warm-up
    const bench::Spread t = bench::time_trials(trials, calls, f);
    // AttnTile decides only how the prefix and suffix products run.
    const bool tiled = gemm && std::strcmp(kernel, "scores") != 0;
    std::printf(
        "{\"bench\":\"attn\",\"kernel\":\"%s\",\"form\":\"%s\",\"tile\":\"%s\",\"C\":%lld,"
        "\"hd\":%lld,\"B\":%d,\"us_min\":%.3f,\"us_median\":%.3f,\"gflops_max\":%.1f,"
        "\"trials\":%d,\"calls\":%d}\n",
        kernel, form, !tiled ? "-" : attn_tile_halves(hd) ? "halves" : "whole",
        static_cast<long long>(C),
        static_cast<long long>(hd), B, 1e6 * t.min, 1e6 * t.median,
        gemm ? flops / t.min * 1e-9 : 0.0, trials, calls);
    std::fflush(stdout);
  };

  time(
      "scores", "chain",
      [&] { causal_scores(C, hd, q.data(), ld, k.data(), ld, s.data(), scratch.data()); }, true);
  for (bool tree : {true, false})
  for (const std::string& tile : tiles) {
    set_attn_tile(tile == "whole" ? AttnTile::whole
                  : tile == "halves" ? AttnTile::halves
                                     : AttnTile::by_cpu);
    const char* form = tree ? "tree" : "chain";
    time(
        "prefix", form,
        [&] {
          causal_prefix(C, hd, B, tree, p.data(), v.data(), ld, y.data(), ld, scratch.data());
        },
        true);
    time(
        "suffix", form,
        [&] {
          causal_suffix(C, hd, B, tree, p.data(), v.data(), ld, y.data(), ld, scratch.data());
        },
        true);
  }
  set_attn_tile(AttnTile::by_cpu);
  time(
      "softmax", "tree",
      [&] {
        std::copy(s.begin(), s.end(), gw.begin());
        softmax_causal_rows(best, gw.data(), C, 0, C, 0.17677669f);
      },
      false);
  time(
      "softmax_backward", "tree",
      [&] {
        std::copy(g.begin(), g.end(), gw.begin());
        softmax_backward_rows(best, p.data(), gw.data(), C, 0, C, 0.17677669f);
      },
      false);
  return 0;
}
