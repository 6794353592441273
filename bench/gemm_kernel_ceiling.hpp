// bench_gemm_kernel's timing entry (bench/gemm_kernel_ceiling_avx512.cpp): GFLOP/s of the
// AVX-512 GEMM micro-kernel alone, on packed operands that stay in the cache. Timing only: no
// result is checked or kept, and no bit of any GEMM depends on this file.
#pragma once

#include <cstdint>

namespace lockstep::bench {

struct KernelCeilingCase {
  std::int64_t kl = 384;    // K panel length (a multiple of block)
  std::int64_t block = 64;  // leaf length (reduce_block)
  int mr = 12;              // the register tile: 12 (12 x 32) or 8 (8 x 48)
  int a_tiles = 1;          // A micro-panels (mr rows x kl each) swept in turn
  int b_tiles = 1;          // B micro-panels (kl x 32 or kl x 48 each) per A micro-panel
  bool canonical = true;    // canon_panel (leaves + merges) or chain_panel
  double min_time = 0.1;    // seconds per trial
  int reps = 5;             // trials
};

// Writes the GFLOP/s of c.reps trials to gflops[0, c.reps). Requires AVX-512 (the caller
// checks): the code is compiled for it.
void kernel_ceiling_avx512(const KernelCeilingCase& c, double* gflops);

}  // namespace lockstep::bench
