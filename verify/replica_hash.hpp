// The replica guard's per-piece hash (launch/state_trace.hpp): XXH3-64 (seed 0) of a local
// buffer's bytes. DP replicas of one piece hold it with the same geometry, so equal bytes
// <=> equal state, and comparing these hashes across the replicas checks every byte of every
// parameter, as fingerprinting them would, at a fraction of the cost (~0.2 ns/float with
// AVX-512 vs ~0.9 for the fingerprint). The value is XXH3-64's on every path (a function of
// the bytes only), so replicas on different CPUs still agree.
// Determinism contract: a pure function of the bytes; position-aware, layout-dependent (only
// ever compared between replicas of the same piece, never across layouts or runs).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lockstep {

// XXH3-64 of [data, data + bytes): the AVX-512 path when the CPU has it (xxHash's inline
// AVX-512 accumulator; the system libxxhash may be built for SSE2 only), else libxxhash.
std::uint64_t replica_hash(const void* data, std::size_t bytes);

namespace detail {
std::uint64_t replica_hash_avx512(const void* data, std::size_t bytes);
}  // namespace detail

}  // namespace lockstep
