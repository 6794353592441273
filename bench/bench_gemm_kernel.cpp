// bench_gemm_kernel: the ceiling of the canonical and chain GEMMs' AVX-512 micro-kernel (12 x 32
// register tile, runtime/gemm_kernel.hpp) with no packing and no source reads, next to which
// bench_gemm's whole-GEMM figures show what packing and memory traffic cost. One thread.
// Operands, per case:
//   l1: one A micro-panel and one B micro-panel (12 x kl and kl x 32 floats), reused;
//   l2: --a-tiles A micro-panels each swept against --b-tiles B micro-panels, the order and
//       footprint of one A block against one packed B panel in bench_gemm (defaults 22 x 16:
//       mc 264, nc 512), so B streams from L2.
// Prints one JSON object per line:
//   {"bench":"gemm_kernel","impl","operands","kl","block","a_tiles","b_tiles","gflops",
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
  bench::KernelCeilingCase base;
  int a_tiles = 22, b_tiles = 16;
  app.add_option("--kl", kls, "K panel lengths (multiples of --block)");
  app.add_option("--block", base.block, "leaf length (reduce_block)")->check(CLI::PositiveNumber);
  app.add_option("--a-tiles", a_tiles, "A micro-panels in the l2 case")->check(CLI::PositiveNumber);
  app.add_option("--b-tiles", b_tiles, "B micro-panels in the l2 case")->check(CLI::PositiveNumber);
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
    for (const char* operands : {"l1", "l2"})
      for (const bool canonical : {true, false}) {
        bench::KernelCeilingCase c = base;
        c.kl = kl;
        c.canonical = canonical;
        if (std::string(operands) == "l2") c.a_tiles = a_tiles, c.b_tiles = b_tiles;
        std::vector<double> g(static_cast<std::size_t>(c.reps));
        bench::kernel_ceiling_avx512(c, g.data());
        const bench::Spread t = bench::spread(g);
        std::printf(
            "{\"bench\":\"gemm_kernel\",\"impl\":\"%s\",\"operands\":\"%s\",\"kl\":%lld,"
            "\"block\":%lld,\"a_tiles\":%d,\"b_tiles\":%d,\"gflops\":%.2f,"
            "\"gflops_min\":%.2f,\"gflops_max\":%.2f,\"reps\":%d}\n",
            canonical ? "canonical" : "chain", operands, static_cast<long long>(kl),
            static_cast<long long>(c.block), c.a_tiles, c.b_tiles, t.median, t.min, t.max, c.reps);
        std::fflush(stdout);
      }
  }
  return 0;
}
