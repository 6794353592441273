// Layout-invariant, position-aware 64-bit tensor fingerprints (DESIGN.md section 5):
//   fp(T) = sum over logical row-major indices i of mix64(key(T) xor i, bits(T_i))  mod 2^64
// key(T)    = XXH3-64 of the canonical (logical, unsharded) tensor name's bytes
//             (lockstep::xxh3_64, seed 0).
// bits(T_i) = the element's bit pattern zero-extended to 64 bits (f32: its IEEE bits, so
//             +0.0 and -0.0 differ and NaN payloads count; i32: two's complement as
//             uint32; u16: as is). The dtype is not hashed: equal bits under one name give
//             equal fingerprints.
// mix64(a, b) = f(f(a + 0x9e3779b97f4a7c15) xor b), with f the splitmix64 finalizer
//             f(z): z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//                   z = (z ^ (z >> 27)) * 0x94d049bb133111eb;  return z ^ (z >> 31)
//             (all arithmetic mod 2^64). f is a bijection, so for a fixed position,
//             changing an element's bits always changes its term and hence fp; a change
//             of position or name changes the term pseudo-randomly.
// Because the terms are added mod 2^64 (associative, commutative), the fingerprints of the
// shards of any layout, computed by any rank or thread in any order, add up (e.g. with
// allreduce_u64(..., IntOp::sum) over a group whose shards partition the tensor) to the
// fingerprint of the whole tensor. tests/reference/fingerprint_ref.py recomputes fp and
// torch_xor_hash independently in Python.
// torch_xor_hash is torch.hash_tensor(t, mode=0): every element upcast to its 64-bit
// equivalent (float -> float64, int32 -> int64 sign-extended, uint16 -> zero-extended),
// bitcast to uint64 and xor-reduced. It is blind to order (any permutation of the
// elements collides) and to pairs of equal elements (they cancel), so it is offered only
// to compare with PyTorch runs, never as the default.
// Determinism contract: pure functions of (name, logical indices, element bits).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "runtime/state_piece.hpp"
#include "runtime/tensor.hpp"

namespace lockstep {

// key(T): XXH3-64 of the name's bytes.
std::uint64_t fingerprint_key(std::string_view name);

// The splitmix64 finalizer f and mix64(a, b) defined above.
constexpr std::uint64_t fingerprint_finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr std::uint64_t fingerprint_mix(std::uint64_t a, std::uint64_t b) {
  return fingerprint_finalize(fingerprint_finalize(a + 0x9e3779b97f4a7c15ull) ^ b);
}

// The fingerprint contribution of the local tensor `local`: its elements are mapped to
// logical indices through local.shard() (global_shape, global_offset), so a whole tensor
// gives fp(T) and the shards of any split give parts that sum to fp(T). Any strides work.
// Throws if the shard descriptor does not place `local` inside its global shape.
std::uint64_t fingerprint(std::string_view name, const Tensor& local);

// The contribution of a contiguous run of logical indices [first, first + data.size()).
std::uint64_t fingerprint_range(std::string_view name, std::span<const float> data,
                                std::uint64_t first = 0);
std::uint64_t fingerprint_range(std::string_view name, std::span<const std::int32_t> data,
                                std::uint64_t first = 0);
std::uint64_t fingerprint_range(std::string_view name, std::span<const std::uint16_t> data,
                                std::uint64_t first = 0);

// The contribution of a state piece (runtime/state_piece.hpp) under its name, whatever its
// owner flag (callers sum owner pieces only).
std::uint64_t fingerprint(const StatePiece& piece);

// torch.hash_tensor(t, mode=0) semantics (see above); 0 for an empty tensor.
std::uint64_t torch_xor_hash(const Tensor& t);
// The same over float32 elements in any order (xor is order-blind): the xor of the values of
// the owner pieces of all ranks is torch_xor_hash of the logical tensor.
std::uint64_t torch_xor_hash(std::span<const float> data);

}  // namespace lockstep
