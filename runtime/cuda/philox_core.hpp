// Philox4x32-10 and Lockstep's counter mapping (runtime/philox.hpp, runtime/random.hpp) as
// host/device functions, so CUDA kernels draw exactly the CPU's random words.
// Determinism contract: word(seed, stream, i) == CounterRng(seed, stream).word(i) and
// uniform_at(seed, stream, i) == lockstep::uniform_at(...) bit for bit, on the host and on the
// device (integer arithmetic plus one exact int-to-float conversion and one exact scaling);
// tests/unit/test_cuda_philox_host.cpp checks it with this header compiled by the host compiler.
#pragma once

#include <cstdint>

#include "runtime/hd.hpp"

namespace lockstep::hd {

struct Philox4 {
  std::uint32_t w[4];
};

// The Philox4x32 bijection with 10 rounds (Random123's philox4x32_R(10, ctr, key)).
LOCKSTEP_HD inline Philox4 philox4x32_10(Philox4 c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  LOCKSTEP_UNROLL
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const std::uint64_t p0 = std::uint64_t(kM0) * c.w[0];
    const std::uint64_t p1 = std::uint64_t(kM1) * c.w[2];
    c = Philox4{{std::uint32_t(p1 >> 32) ^ c.w[1] ^ k0, std::uint32_t(p1),
                 std::uint32_t(p0 >> 32) ^ c.w[3] ^ k1, std::uint32_t(p0)}};
  }
  return c;
}

// CounterRng(seed, stream).block(b): key {lo(seed), hi(seed)}, counter {lo(b), hi(b),
// lo(stream), hi(stream)}.
LOCKSTEP_HD inline Philox4 philox_block(std::uint64_t seed, std::uint64_t stream, std::uint64_t b) {
  return philox4x32_10(Philox4{{std::uint32_t(b), std::uint32_t(b >> 32), std::uint32_t(stream),
                                std::uint32_t(stream >> 32)}},
                       std::uint32_t(seed), std::uint32_t(seed >> 32));
}

// Logical 32-bit word i = block(i / 4)[i % 4].
LOCKSTEP_HD inline std::uint32_t philox_word(std::uint64_t seed, std::uint64_t stream,
                                             std::uint64_t i) {
  return philox_block(seed, stream, i >> 2).w[i & 3];
}

// (w >> 8) * 2^-24: [0, 1) with 2^24 levels (lockstep::uniform01).
LOCKSTEP_HD inline float uniform01(std::uint32_t w) {
  return float(w >> 8) * 0x1p-24f;
}

// Element i of the logical uniform tensor (lockstep::uniform_at).
LOCKSTEP_HD inline float uniform_at(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  return uniform01(philox_word(seed, stream, i));
}

// fill_uniform(seed, stream, ..., lo, hi)'s element i: fma(u, hi - lo, lo).
LOCKSTEP_HD inline float uniform_in(std::uint64_t seed, std::uint64_t stream, std::uint64_t i,
                                    float lo, float hi) {
  return fma(uniform_at(seed, stream, i), hi - lo, lo);
}

// lockstep::dropout_keep_row's element: keep iff uniform_at(seed, stream, i) >= p.
LOCKSTEP_HD inline bool dropout_keep(std::uint64_t seed, std::uint64_t stream, std::uint64_t i,
                                     float p) {
  return uniform_at(seed, stream, i) >= p;
}

}  // namespace lockstep::hd
