// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11), the only random number generator in
// Lockstep, and CounterRng, which names every random word by logical coordinates.
// Determinism contract (docs/design.md section 3): no hidden state. A random word is a pure
// function of (seed, stream, logical index); nothing depends on rank, thread, layout or call order,
// so a shard computes exactly its own elements and a checkpoint stores only coordinates.
//
// CounterRng mapping (fixed; changing it changes every run's bits):
//   key     = { lo32(seed), hi32(seed) }
//   counter = { lo32(block), hi32(block), lo32(stream), hi32(stream) }
//   CounterRng::block(b) = philox4x32_10(counter(b), key): four u32 words w[0..3]; the logical
//   32-bit word number i is w[i % 4] of block i / 4 (see runtime/random.hpp for how uniform and
//   normal floats consume words).
#pragma once

#include <array>
#include <cstdint>

namespace lockstep {

struct PhiloxKey {
  uint32_t k0, k1;
};
using PhiloxCounter = std::array<uint32_t, 4>;

// The Philox4x32 bijection with 10 rounds; matches Random123's philox4x32_R(10, ctr, key).
PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key);

class CounterRng {
 public:
  CounterRng(uint64_t seed, uint64_t stream)
      : key_{uint32_t(seed), uint32_t(seed >> 32)}, stream_(stream) {}

  uint64_t stream() const { return stream_; }
  PhiloxKey key() const { return key_; }
  // The four words of block b (logical words 4b .. 4b+3).
  PhiloxCounter block(uint64_t b) const {
    return philox4x32_10(
        {uint32_t(b), uint32_t(b >> 32), uint32_t(stream_), uint32_t(stream_ >> 32)}, key_);
  }
  // Logical 32-bit word i = block(i / 4)[i % 4].
  uint32_t word(uint64_t i) const { return block(i >> 2)[i & 3]; }

 private:
  PhiloxKey key_;
  uint64_t stream_;
};

}  // namespace lockstep
