// Uniform and normal float32 tensors from Philox (runtime/philox.hpp), addressed by logical
// element index, for weight init, dropout masks and anything else random.
// Determinism contract (docs/design.md section 3): element i of the logical tensor is a pure
// function of (seed, stream, i), so any shard (a contiguous range, or a 2-D block of a row-major
// matrix) generates exactly the bits the full tensor has there, on every ISA path and thread count.
//
// How elements consume Philox words (CounterRng: block b = 4 words w[0..3]):
//   uniform element i: u = uniform01(w[i % 4]) of block i / 4, uniform01(w) = (w >> 8) * 2^-24,
//     in [0, 1) with 2^24 equally spaced values; fill_uniform(lo, hi) returns fma(u, hi - lo, lo).
//   normal element i: block b = i / 4, pair p = (i % 4) / 2 (words w[2p], w[2p+1]):
//     u1 = uniform01c(w[2p]) = ((w >> 8) + 1) * 2^-24 in (0, 1], t = 2 * uniform01(w[2p+1]),
//     r = sqrt(-2 * ls_log(u1)), z = r * ls_cospi(t) for even i, r * ls_sinpi(t) for odd i
//     (Box-Muller with Lockstep's own log / sinpi / cospi), out = fma(std, z, mean).
//     |z| <= sqrt(2 * 24 ln 2) = 5.77; z is never NaN or Inf.
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep {

inline float uniform01(uint32_t w) {
  return float(w >> 8) * 0x1p-24f;
}  // [0, 1)
inline float uniform01c(uint32_t w) {
  return float((w >> 8) + 1) * 0x1p-24f;
}  // (0, 1]

// Single elements (slow path; the fills below produce the same bits).
float uniform_at(uint64_t seed, uint64_t stream, int64_t index);
float normal_at(uint64_t seed, uint64_t stream, int64_t index, float mean = 0.0f, float std = 1.0f);

// out[k] = element first + k of the logical tensor, k in [0, n). first >= 0.
void fill_uniform(uint64_t seed, uint64_t stream, int64_t first, float* out, int64_t n,
                  float lo = 0.0f, float hi = 1.0f);
void fill_normal(uint64_t seed, uint64_t stream, int64_t first, float* out, int64_t n,
                 float mean = 0.0f, float std = 1.0f);
// Same bits, with log / sinpi / cospi on ctx.isa's vector path.
void fill_normal(const KernelCtx& ctx, uint64_t seed, uint64_t stream, int64_t first, float* out,
                 int64_t n, float mean = 0.0f, float std = 1.0f);

// A rows x cols block of a row-major logical matrix with global_cols columns, whose top-left
// element is (row0, col0); out is row-major with leading dimension ld >= cols. Element (r, c) is
// logical element (row0 + r) * global_cols + col0 + c.
void fill_uniform_2d(uint64_t seed, uint64_t stream, int64_t global_cols, int64_t row0,
                     int64_t col0, int64_t rows, int64_t cols, float* out, int64_t ld,
                     float lo = 0.0f, float hi = 1.0f);
void fill_normal_2d(const KernelCtx& ctx, uint64_t seed, uint64_t stream, int64_t global_cols,
                    int64_t row0, int64_t col0, int64_t rows, int64_t cols, float* out, int64_t ld,
                    float mean = 0.0f, float std = 1.0f);
void fill_normal_2d(uint64_t seed, uint64_t stream, int64_t global_cols, int64_t row0, int64_t col0,
                    int64_t rows, int64_t cols, float* out, int64_t ld, float mean = 0.0f,
                    float std = 1.0f);

}  // namespace lockstep
