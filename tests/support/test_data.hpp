// Deterministic test inputs shared by the unit and multi-rank tests: splitmix64-driven
// floats of mixed signs and magnitudes (with signed zeros), independent of the runtime's
// own Philox so a bug there cannot hide a bug here.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace lockstep::testing {

inline std::uint64_t splitmix64(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// n floats: mostly O(1) values of both signs spread over ~12 binades, a few exact zeros of
// both signs, so sums exercise rounding, cancellation and the sign of zero.
inline std::vector<float> mixed_floats(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  std::uint64_t s = seed;
  for (auto& x : v) {
    const std::uint64_t r = splitmix64(s);
    const int kind = static_cast<int>(r % 64);
    if (kind == 0) {
      x = 0.0f;
    } else if (kind == 1) {
      x = -0.0f;
    } else {
      const float mant = static_cast<float>((r >> 8) & 0xFFFFFF) / 16777216.0f + 0.5f;
      const int exp = static_cast<int>((r >> 40) % 12) - 6;
      x = std::ldexp(mant, exp) * (((r >> 63) & 1) ? -1.0f : 1.0f);
    }
  }
  return v;
}

inline bool same_bits(const float* a, const float* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Same length and the same bits (so +0.0 != -0.0 and a NaN equals the same NaN).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

inline std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// The float whose bit pattern is u.
inline float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace lockstep::testing
