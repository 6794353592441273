// bench_fma_peak: the machine's FMA ceiling, the denominator of MFU in bench/bench_train.py.
// Prints one JSON object per line, one per thread count:
//   {"impl":"fma_peak","threads","isa","gflops","gflops_min","gflops_max","seconds","reps"}
// The probe keeps independent vector accumulators in registers (more than the FMA latency x
// throughput product: 16 zmm for AVX-512; 12 ymm for AVX2, whose 16 registers must also hold
// the two operands, since 16 accumulators there spill two chains through memory and measured
// 54 instead of 95 GFLOP/s on a Zen 3 core), runs the same loop on every OpenMP thread, counts
// 2 FLOPs per lane per FMA. gflops is the median over --reps trials; each trial runs at
// least --min-time seconds. AVX-512 is chosen at run time (__builtin_cpu_supports), with an
// AVX2+FMA fallback; the kernels carry target attributes, so the file builds with the
// default flags of bench/CMakeLists.txt.
#include <immintrin.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timing.hpp"

namespace {

constexpr int kAcc512 = 16;  // independent accumulators per thread: AVX-512 (c0..c15 below)
constexpr int kAcc256 = 12;  // and AVX2 (c0..c11)
constexpr int kUnroll = 4;   // LS_FMA* repeats per loop trip (kAcc * kUnroll FMAs)

// Sixteen named accumulators, so they live in registers (an array plus a compiler barrier
// made GCC spill them every trip). No barrier is needed: without -ffast-math the compiler
// may not fold a chain of FMAs, and the result depends on every accumulator.
#define LS_FMA12(F)   \
  c0 = F(c0, a, b);   \
  c1 = F(c1, a, b);   \
  c2 = F(c2, a, b);   \
  c3 = F(c3, a, b);   \
  c4 = F(c4, a, b);   \
  c5 = F(c5, a, b);   \
  c6 = F(c6, a, b);   \
  c7 = F(c7, a, b);   \
  c8 = F(c8, a, b);   \
  c9 = F(c9, a, b);   \
  c10 = F(c10, a, b); \
  c11 = F(c11, a, b);
#define LS_FMA16(F)   \
  LS_FMA12(F)         \
  c12 = F(c12, a, b); \
  c13 = F(c13, a, b); \
  c14 = F(c14, a, b); \
  c15 = F(c15, a, b);
#define LS_INIT12(SET)      \
  c0 = SET(seed + 0.000f);  \
  c1 = SET(seed + 0.001f);  \
  c2 = SET(seed + 0.002f);  \
  c3 = SET(seed + 0.003f);  \
  c4 = SET(seed + 0.004f);  \
  c5 = SET(seed + 0.005f);  \
  c6 = SET(seed + 0.006f);  \
  c7 = SET(seed + 0.007f);  \
  c8 = SET(seed + 0.008f);  \
  c9 = SET(seed + 0.009f);  \
  c10 = SET(seed + 0.010f); \
  c11 = SET(seed + 0.011f);
#define LS_INIT16(SET)      \
  LS_INIT12(SET)            \
  c12 = SET(seed + 0.012f); \
  c13 = SET(seed + 0.013f); \
  c14 = SET(seed + 0.014f); \
  c15 = SET(seed + 0.015f);
#define LS_SUM12(ADD)                                                    \
  ADD(ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7))), \
      ADD(ADD(c8, c9), ADD(c10, c11)))
#define LS_SUM16(ADD)                                                    \
  ADD(ADD(ADD(ADD(c0, c1), ADD(c2, c3)), ADD(ADD(c4, c5), ADD(c6, c7))), \
      ADD(ADD(ADD(c8, c9), ADD(c10, c11)), ADD(ADD(c12, c13), ADD(c14, c15))))

// Returns a value that depends on every accumulator so the work cannot be elided.
__attribute__((target("avx512f,fma"), noinline)) float fma_loop_avx512(std::int64_t iters,
                                                                       float seed) {
  __m512 c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15;
  LS_INIT16(_mm512_set1_ps)
  const __m512 a = _mm512_set1_ps(0.999999f);
  const __m512 b = _mm512_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it) {
    LS_FMA16(_mm512_fmadd_ps)
    LS_FMA16(_mm512_fmadd_ps)
    LS_FMA16(_mm512_fmadd_ps)
    LS_FMA16(_mm512_fmadd_ps)
  }
  const __m512 s = LS_SUM16(_mm512_add_ps);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, s);
  float r = 0.0f;
  for (float v : lanes) r += v;
  return r;
}

__attribute__((target("avx2,fma"), noinline)) float fma_loop_avx2(std::int64_t iters, float seed) {
  __m256 c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
  LS_INIT12(_mm256_set1_ps)
  const __m256 a = _mm256_set1_ps(0.999999f);
  const __m256 b = _mm256_set1_ps(1e-7f);
  for (std::int64_t it = 0; it < iters; ++it) {
    LS_FMA12(_mm256_fmadd_ps)
    LS_FMA12(_mm256_fmadd_ps)
    LS_FMA12(_mm256_fmadd_ps)
    LS_FMA12(_mm256_fmadd_ps)
  }
  const __m256 s = LS_SUM12(_mm256_add_ps);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, s);
  float r = 0.0f;
  for (float v : lanes) r += v;
  return r;
}

enum class Isa { avx512, avx2 };

// Seconds for `iters` loop trips on each of `threads` threads (wall time of the slowest).
double run_once(Isa isa, int threads, std::int64_t iters, float* sink) {
  float total = 0.0f;
  const double t0 = lockstep::bench::wall_s();
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const float seed = 1.0f + 0.01f * static_cast<float>(omp_get_thread_num());
    total += (isa == Isa::avx512) ? fma_loop_avx512(iters, seed) : fma_loop_avx2(iters, seed);
  }
  const double t1 = lockstep::bench::wall_s();
  *sink += total;
  return t1 - t0;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"FMA peak probe: GFLOP/s of independent FMA chains per thread count"};
  std::string threads_s = "1,2";
  int reps = 5;
  double min_time = 0.3;
  std::string isa_s = "auto";
  app.add_option("--threads", threads_s, "comma-separated thread counts")->capture_default_str();
  app.add_option("--reps", reps, "trials per thread count (median reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--min-time", min_time, "seconds per trial (at least)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--isa", isa_s, "auto, avx512 or avx2")
      ->check(CLI::IsMember({"auto", "avx512", "avx2"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  __builtin_cpu_init();
  const bool have512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  const bool have2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  Isa isa;
  if (isa_s == "avx512" || (isa_s == "auto" && have512)) {
    if (!have512) {
      std::fprintf(stderr, "bench_fma_peak: this CPU has no AVX-512F; use --isa avx2\n");
      return 2;
    }
    isa = Isa::avx512;
  } else {
    if (!have2) {
      std::fprintf(stderr, "bench_fma_peak: this CPU has neither AVX-512F nor AVX2+FMA\n");
      return 2;
    }
    isa = Isa::avx2;
  }
  const int lanes = (isa == Isa::avx512) ? 16 : 8;
  const int acc = isa == Isa::avx512 ? kAcc512 : kAcc256;
  const double flops_per_iter = 2.0 * lanes * acc * kUnroll;  // per thread per loop trip

  std::vector<int> thread_counts;
  try {
    thread_counts = parse_list(threads_s);
  } catch (const std::exception&) {
    std::fprintf(stderr, "bench_fma_peak: --threads must be a comma-separated list of integers\n");
    return 2;
  }
  float sink = 0.0f;
  for (int t : thread_counts) {
    if (t < 1) {
      std::fprintf(stderr, "bench_fma_peak: thread counts must be >= 1\n");
      return 2;
    }
    // Calibrate the trip count so one trial takes about min_time seconds.
    std::int64_t iters = 1 << 16;
    run_once(isa, t, iters, &sink);  // warm-up: wakes the threads and the clocks
    for (;;) {
      double s = run_once(isa, t, iters, &sink);
      if (s >= min_time * 0.5) {
        iters = static_cast<std::int64_t>(static_cast<double>(iters) * min_time / s) + 1;
        break;
      }
      iters *= 4;
    }
    std::vector<double> gf;
    std::vector<double> secs;
    for (int r = 0; r < reps; ++r) {
      double s = run_once(isa, t, iters, &sink);
      secs.push_back(s);
      gf.push_back(flops_per_iter * static_cast<double>(iters) * t / s * 1e-9);
    }
    const lockstep::bench::Spread g = lockstep::bench::spread(gf);
    std::printf(
        "{\"impl\":\"fma_peak\",\"threads\":%d,\"isa\":\"%s\",\"gflops\":%.2f,"
        "\"gflops_min\":%.2f,\"gflops_max\":%.2f,\"seconds\":%.4f,\"reps\":%d}\n",
        t, isa == Isa::avx512 ? "avx512" : "avx2", g.median, g.min, g.max,
        lockstep::bench::median(secs), reps);
    std::fflush(stdout);
  }
  if (sink == 12345.678f) std::fprintf(stderr, "%f\n", sink);  // keep the work observable
  return 0;
}
