// Byte hashes: XXH3-64 (seed 0) of a byte range, one-shot (xxh3_64) or streamed (Xxh3Stream).
// Used for shard and chunk integrity in checkpoints (write, meta, load's chunk checks), the
// replica guard (launch/train/state_trace.hpp) and the digests printed by the demo.
// Speed: both entry points dispatch at run time (best_isa(), runtime/isa.hpp) to xxHash's
// inline implementation compiled for AVX-512 (runtime/hash_avx512.cpp) when the CPU has it,
// else to the system libxxhash (which may be built for SSE2 only, several times slower).
// Determinism contract: a pure function of the bytes; the value is XXH3_64bits' on every ISA
// path (xxHash guarantees it; tests/unit/test_hash.cpp checks it bitwise against libxxhash),
// so hashes agree across CPUs, hosts and builds. Position-aware and layout-dependent, so it is
// used on whole logical buffers; layout-invariant fingerprints of sharded tensors are the
// verify module's job (docs/design.md section 5).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep {

namespace detail {
// One XXH3-64 implementation behind a small interface. A streaming state is opaque and is
// created, used and freed by the same implementation (xxHash's inline XXH3_state_t is private
// to its translation unit and need not match libxxhash's).
struct Xxh3Impl {
  const char* name;  // "avx512" or "libxxhash"
  std::uint64_t (*hash)(const void* data, std::size_t bytes);
  void* (*create)();  // a fresh (reset) state; throws
                      // std::bad_alloc on failure
  void (*destroy)(void* state);
  void (*update)(void* state, const void* data, std::size_t bytes);
  std::uint64_t (*digest)(const void* state);
};
// The system libxxhash; any CPU.
const Xxh3Impl& xxh3_libxxhash();
// xxHash's inline implementation compiled with AVX-512 (runtime/hash_avx512.cpp); call only
// when isa_supported(Isa::avx512).
const Xxh3Impl& xxh3_avx512();
// What xxh3_64 and Xxh3Stream use: xxh3_avx512() if best_isa() is AVX-512, else libxxhash.
const Xxh3Impl& xxh3_dispatch();
}  // namespace detail

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
  const detail::Xxh3Impl* impl_;  // the implementation that owns state_
  void* state_;                   // its opaque XXH3 state
};
// 16 lowercase hex digits.
std::string hex64(std::uint64_t v);

}  // namespace lockstep
