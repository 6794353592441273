// The timing loops of bench_gemm_kernel (bench/bench_gemm_kernel.cpp), compiled with the AVX-512
// flags (bench/CMakeLists.txt) and called only after the caller has checked that the CPU has
// AVX-512. They run the AVX-512 micro-kernel of runtime/gemm_kernel.hpp (the 12 x 32 or the
// 8 x 48 register tile) on packed operands that never leave the cache: no packing, no source reads,
// no C or slot traffic beyond one tile per call. Timing only; the values computed are discarded. No
// standard container or algorithm is instantiated here (buffers are this file's own, the trial
// figures go to the caller's array, which sorts them): such an instantiation, compiled with AVX-512
// flags, could be the copy the linker keeps for the whole executable, which also runs on CPUs
// without AVX-512 up to the caller's check (the care runtime/gemm_kernel_avx512.cpp takes with
// std::string).
#include "bench/gemm_kernel_ceiling.hpp"

#include <bit>
#include <chrono>
#include <cstdlib>
#include <new>

#include "runtime/gemm_kernel.hpp"
#include "runtime/simd_avx512.hpp"

namespace lockstep::bench {
namespace {

using gemm_detail::Kernel;

// n values, 64-byte aligned (internal linkage: this file's own instantiations).
template <class T>
struct Buffer {
  T* p;
  explicit Buffer(std::size_t n)
      : p(static_cast<T*>(std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64))) {
    if (!p) throw std::bad_alloc();
  }
  ~Buffer() { std::free(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};
// n floats filled with finite values.
struct Operand : Buffer<float> {
  explicit Operand(std::size_t n) : Buffer<float>(n) {
    for (std::size_t i = 0; i < n; ++i) p[i] = 1.0f / static_cast<float>(1 + i % 97);
  }
};

template <class Kern>
void ceiling(const KernelCeilingCase& c, double* gflops) {
  using APackedKR = typename Kern::template APacked<1, Kern::MR>;  // step k's MR values together
  const std::int64_t kl = c.kl, leaves = kl / c.block;
  const std::int64_t a_stride = Kern::MR * kl + 16, b_stride = kl * Kern::NR;
  Operand a(static_cast<std::size_t>(c.a_tiles * a_stride));
  Operand b(static_cast<std::size_t>(c.b_tiles * b_stride));
  Operand cbuf(static_cast<std::size_t>(c.a_tiles * c.b_tiles * Kern::TILE));
  Operand stack(static_cast<std::size_t>((leaves + 2) * Kern::TILE + 1024));
  // Leaves of `block` steps merged by the binary counter (the pow2 tree's panel schedule; the
  // halving tree's differs only in where the same number of merges falls).
  const auto nl = static_cast<std::size_t>(leaves);
  Buffer<std::int32_t> len(nl);
  Buffer<std::uint8_t> merges(nl);
  for (std::size_t l = 0; l < nl; ++l) {
    len.p[l] = static_cast<std::int32_t>(c.block);
    merges.p[l] = static_cast<std::uint8_t>(std::countr_zero(static_cast<std::uint64_t>(l + 1)));
  }
  // Same order as the GEMM's run_block: one A micro-panel against every B micro-panel.
  const auto sweep = [&] {
    for (int it = 0; it < c.a_tiles; ++it)
      for (int jt = 0; jt < c.b_tiles; ++jt) {
        const float* ap = a.p + it * a_stride;
        const float* bp = b.p + jt * b_stride;
        float* tile = cbuf.p + (it * c.b_tiles + jt) * Kern::TILE;
        if (c.canonical)
          Kern::template canon_panel<APackedKR>(static_cast<int>(leaves), len.p, merges.p, ap, 0,
                                                bp, stack.p + 256, nullptr, 0, tile, tile, Kern::NR,
                                                Kern::MR, Kern::NR, nullptr);
        else
          Kern::template chain_panel<APackedKR>(kl, ap, 0, bp, false, tile, Kern::NR, Kern::MR,
                                                Kern::NR, nullptr);
      }
  };
  const double flop = 2.0 * Kern::MR * Kern::NR * static_cast<double>(kl) * c.a_tiles * c.b_tiles;
  using Clock = std::chrono::steady_clock;
  sweep();  // warm the operands into the cache
  const auto t0 = Clock::now();
  sweep();
  const double once = std::chrono::duration<double>(Clock::now() - t0).count();
  const double per = c.min_time / (once > 1e-9 ? once : 1e-9);
  const long sweeps = per < 1.0 ? 1L : static_cast<long>(per);
  for (int r = 0; r < c.reps; ++r) {
    const auto s0 = Clock::now();
    for (long s = 0; s < sweeps; ++s) sweep();
    const double sec = std::chrono::duration<double>(Clock::now() - s0).count();
    gflops[r] = flop * static_cast<double>(sweeps) / sec * 1e-9;
  }
}

}  // namespace

void kernel_ceiling_avx512(const KernelCeilingCase& c, double* gflops) {
  if (c.mr == 8)
    ceiling<Kernel<simd::Avx512, 8, 3>>(c, gflops);
  else
    ceiling<Kernel<simd::Avx512, 12, 2>>(c, gflops);
}

}  // namespace lockstep::bench
