// bench_gemm_kernel: the ceiling of the canonical and chain GEMMs' AVX-512 micro-kernel
// (runtime/gemm_kernel.hpp, each register tile of --mr: 12 x 32 and 8 x 48) with no packing and
// no source reads, next to which bench_gemm's whole-GEMM figures show what packing and memory
// traffic cost. One thread. Operands, per case:
//   l1: one A micro-panel and one B micro-panel (mr x kl and kl x 32 or kl x 48 floats), reused;
//   l2: --a-tiles A micro-panels each swept against --b-tiles B micro-panels, the order and
//       footprint of one A block against one packed B panel in bench_gemm (defaults: those of
//       mc 264 and nc 512 with the tile: 22 x 16 for 12 x 32, 33 x 10 for 8 x 48), so B
//       streams from L2.
// Prints one JSON object per line:
//   {"bench":"gemm_kernel","impl","mr","operands","kl","block","a_tiles","b_tiles","gflops",
//    "gflops_min","gflops_max","reps"}
// Compare with bench_fma_peak's 1-thread figure from the same minute:
//   taskset -c 1 build/bin/bench_gemm_kernel && taskset -c 1 build/bin/bench_fma_peak --threads 1
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gemm_kernel_ceiling.hpp"
#include "bench/timing.hpp"
#include "runtime/isa.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"GEMM micro-kernel ceiling (AVX-512, operands in cache)"};
  std::vector<std::int64_t> kls{256, 384};
  std::vector<int> mrs{12, 8};
  bench::KernelCeilingCase base;
  int a_tiles = 0, b_tiles = 0;
  app.add_option("--kl", kls, "K panel lengths (multiples of --block)");
  app.add_option("--mr", mrs, "register tiles by their rows: 12 (12 x 32), 8 (8 x 48)")
      ->check(CLI::IsMember({8, 12}));
  app.add_option("--block", base.block, "leaf length (reduce_block)")->check(CLI::PositiveNumber);
  app.add_option("--a-tiles", a_tiles, "A micro-panels in the l2 case (default: mc 264's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--b-tiles", b_tiles, "B micro-panels in the l2 case (default: nc 512's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--reps", base.reps, "trials (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--min-time", base.min_time, "seconds per trial")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  if (!isa_supported(Isa::avx512)) {
    std::fprintf(stderr,
                 "bench_gemm_kernel: this CPU has no AVX-512; the kernel measured here "
                 "is the AVX-512 one\n");
    return 1;
  }
  for (const std::int64_t kl : kls) {
    if (kl <= 0 || kl % base.block != 0) {
      std::fprintf(stderr,
                   "bench_gemm_kernel: --kl %lld is not a positive multiple of --block %lld\n",
                   static_cast<long long>(kl), static_cast<long long>(base.block));
      return 1;
    }
    for (const int mr : mrs)
      for (const char* operands : {"l1", "l2"})
        for (const bool canonical : {true, false}) {
          bench::KernelCeilingCase c = base;
          c.kl = kl;
          c.mr = mr;
          c.canonical = canonical;
          const int nr = mr == 8 ? 48 : 32;
          if (std::string(operands) == "l2")
            c.a_tiles = a_tiles > 0 ? a_tiles : 264 / mr,
            c.b_tiles = b_tiles > 0 ? b_tiles : 512 / nr;
          std::vector<double> g(static_cast<std::size_t>(c.reps));
          bench::kernel_ceiling_avx512(c, g.data());
          const bench::Spread t = bench::spread(g);
          std::printf(
              "{\"bench\":\"gemm_kernel\",\"impl\":\"%s\",\"mr\":%d,\"operands\":\"%s\","
              "\"kl\":%lld,\"block\":%lld,\"a_tiles\":%d,\"b_tiles\":%d,\"gflops\":%.2f,"
              "\"gflops_min\":%.2f,\"gflops_max\":%.2f,\"reps\":%d}\n",
              canonical ? "canonical" : "chain", mr, operands, static_cast<long long>(kl),
              static_cast<long long>(c.block), c.a_tiles, c.b_tiles, t.median, t.min, t.max,
              c.reps);
          std::fflush(stdout);
        }
  }
  return 0;
}
