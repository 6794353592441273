// Private to runtime/philox_batch*.cpp: the batched rounds, one copy per translation unit.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/philox.hpp"

namespace lockstep::philox_detail {
namespace {

constexpr int kLanes = 16;

// keep for the words of the blocks b0 .. b0 + kLanes - 1 (all 4 words of each), written to
// out[4 * lane + word].
inline void keep_blocks(std::uint32_t k0, std::uint32_t k1, std::uint64_t stream, std::uint64_t b0,
                        std::uint32_t thr, std::uint8_t* out) {
  std::uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const std::uint64_t b = b0 + static_cast<std::uint64_t>(l);
    c0[l] = static_cast<std::uint32_t>(b);
    c1[l] = static_cast<std::uint32_t>(b >> 32);
    c2[l] = static_cast<std::uint32_t>(stream);
    c3[l] = static_cast<std::uint32_t>(stream >> 32);
  }
  std::uint32_t key0 = k0, key1 = k1;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    for (int l = 0; l < kLanes; ++l) {
      const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c0[l];
      const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c2[l];
      const std::uint32_t n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[l] ^ key0;
      const std::uint32_t n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[l] ^ key1;
      c0[l] = n0;
      c1[l] = static_cast<std::uint32_t>(p1);
      c2[l] = n2;
      c3[l] = static_cast<std::uint32_t>(p0);
    }
  }
  for (int l = 0; l < kLanes; ++l) {
    out[4 * l + 0] = (c0[l] >> 8) >= thr;
    out[4 * l + 1] = (c1[l] >> 8) >= thr;
    out[4 * l + 2] = (c2[l] >> 8) >= thr;
    out[4 * l + 3] = (c3[l] >> 8) >= thr;
  }
}

inline void keep_mask_impl(std::uint64_t seed, std::uint64_t stream, std::int64_t first,
                           std::int64_t n, std::uint32_t thr, std::uint8_t* keep) {
  const std::uint32_t k0 = static_cast<std::uint32_t>(seed),
                      k1 = static_cast<std::uint32_t>(seed >> 32);
  std::int64_t i = first;
  const std::int64_t end = first + n;
  // Head: up to the first multiple of 4 * kLanes words, and the tail, one block at a time.
  CounterRng rng(seed, stream);
  auto single = [&](std::int64_t upto) {
    while (i < upto) {
      const PhiloxCounter w = rng.block(static_cast<std::uint64_t>(i) >> 2);
      for (int k = static_cast<int>(i & 3); k < 4 && i < upto; ++k, ++i)
        keep[i - first] = (w[k] >> 8) >= thr;
    }
  };
  const std::int64_t span = 4 * kLanes;
  const std::int64_t head_end = std::min(end, (first + span - 1) / span * span);
  single(head_end);
  std::uint8_t buf[4 * kLanes];
  for (; i + span <= end; i += span) {
    keep_blocks(k0, k1, stream, static_cast<std::uint64_t>(i) >> 2, thr, buf);
    for (int k = 0; k < span; ++k) keep[i - first + k] = buf[k];
  }
  single(end);
}

}  // namespace
}  // namespace lockstep::philox_detail
