// Byte hashes: XXH3-64 of a byte range (shard integrity in checkpoints, digests printed by
// the demo). Determinism contract: a pure function of the bytes; position-aware and
// layout-dependent, so it is used on whole logical buffers. Layout-invariant fingerprints
// of sharded tensors are the verify module's job (DESIGN.md section 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

std::uint64_t xxh3_64(const void* data, std::size_t bytes);
// Streaming XXH3-64: update() over consecutive pieces, then digest() equals xxh3_64 of their
// concatenation (checkpoints hash a shard and its chunks in one pass over memory).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, std::size_t bytes);
  std::uint64_t digest() const;

 private:
  void* state_;  // XXH3_state_t
};
// 16 lowercase hex digits.
std::string hex64(std::uint64_t v);

}  // namespace lockstep
