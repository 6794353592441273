// Batched Philox4x32-10 for dropout masks: the words of runtime/philox.hpp's CounterRng, many
// blocks at a time (structure of arrays, so the compiler vectorizes the rounds; the AVX-512
// translation unit runs 16 blocks per vector).
// Determinism contract (docs/design.md section 3): integer arithmetic only; keep[k] is a pure
// function of (seed, stream, first + k, p), identical on every ISA path and equal to
//   keep[k] = uniform_at(seed, stream, first + k) >= p     (runtime/random.hpp; that is
//   fill_uniform's element with lo = 0, hi = 1, since fma(u, 1, 0) == u),
// evaluated exactly as (word >> 8) >= ceil(p * 2^24) (uniform01(w) = (w >> 8) * 2^-24 is exact).
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep {

// keep[k] = 1 if uniform element first + k of (seed, stream) is >= p, else 0; k in [0, n).
// p in [0, 1]. Single thread.
void dropout_keep_mask(const KernelCtx& ctx, std::uint64_t seed, std::uint64_t stream,
                       std::int64_t first, std::int64_t n, float p, std::uint8_t* keep);

namespace philox_detail {
void keep_mask_avx512(std::uint64_t seed, std::uint64_t stream, std::int64_t first, std::int64_t n,
                      std::uint32_t thr, std::uint8_t* keep);
}  // namespace philox_detail

}  // namespace lockstep
