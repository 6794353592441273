// Layout-invariant, position-aware 64-bit tensor fingerprints (docs/design.md section 5):
//   fp(T) = sum over logical row-major indices i of mix64(key(T) xor i, bits(T_i))  mod 2^64
// key(T)    = XXH3-64 of the canonical (logical, unsharded) tensor name's bytes
//             (lockstep::xxh3_64, seed 0).
// bits(T_i) = the element's bit pattern zero-extended to 64 bits (f32: its IEEE bits, so
//             +0.0 and -0.0 differ and NaN payloads count; i32: two's complement as
//             uint32; u16: as is). The dtype is not hashed: equal bits under one name give
//             equal fingerprints.
// f(z)      = the splitmix64 finalizer: z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
//             z = (z ^ (z >> 27)) * 0x94d049bb133111eb;  return z ^ (z >> 31)
//             (all arithmetic mod 2^64), a bijection with full avalanche.
// mix64 has two versions (FpVersion):
//   v2 (default): mix64(a, b) = f(a xor (b << 32)).  For a fixed a, b -> a ^ (b << 32) is
//             injective on 32-bit b and f is a bijection, so changing an element's bits
//             always changes its term and hence fp; the index sits in the low 32 bits and
//             the bits in the high 32, so for tensors under 2^32 elements every (i, bits)
//             pair is a distinct input of f, and a change of position or name changes the
//             term pseudo-randomly. One finalizer (two 64-bit multiplies) per element.
//   v1:       mix64(a, b) = f(f(a + 0x9e3779b97f4a7c15) xor b): the same guarantees for any
//             index, at two finalizers (four multiplies) per element. Lockstep wrote v1 until
//             checkpoint format 2; it is kept to check format-1 checkpoints and to compare
//             with traces of runs made before (verify.fingerprint_version = 1).
// Because the terms are added mod 2^64 (associative, commutative), the fingerprints of the
// shards of any layout, computed by any rank or thread in any order, add up (e.g. with
// allreduce_u64(..., IntOp::sum) over a group whose shards partition the tensor) to the
// fingerprint of the whole tensor. tests/reference/fingerprint_ref.py recomputes fp (both
// versions) and torch_xor_hash independently in Python.
// torch_xor_hash is torch.hash_tensor(t, mode=0): every element upcast to its 64-bit
// equivalent (float -> float64, int32 -> int64 sign-extended, uint16 -> zero-extended),
// bitcast to uint64 and xor-reduced. It is blind to order (any permutation of the
// elements collides) and to pairs of equal elements (they cancel), so it is offered only
// to compare with PyTorch runs, never as the default.
// Determinism contract: pure functions of (version, name, logical indices, element bits).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "runtime/enum_names.hpp"
#include "runtime/error.hpp"
#include "runtime/state_piece.hpp"
#include "runtime/tensor.hpp"

namespace lockstep {

// The fingerprint kind of the state trace (config key verify.hash): Lockstep's own, or
// torch.hash_tensor's mode 0 (for comparing with PyTorch runs; order-blind).
enum class HashKind { lockstep, torch_xor };
constexpr std::array<EnumName<HashKind>, 2> enum_names(HashKind) {
  return {{{HashKind::lockstep, "lockstep"}, {HashKind::torch_xor, "torch-xor"}}};
}

// The fingerprint function's version (see above). Values of different versions are never
// comparable; every stored fingerprint says which version made it (checkpoint meta.json's
// fingerprint_version, the run's verify.fingerprint_version).
enum class FpVersion : int { v1 = 1, v2 = 2 };
inline constexpr FpVersion kFpVersionLatest = FpVersion::v2;
// 1 or 2; throws with the valid values otherwise. `what` names the source in the message.
// (Inline: checkpoint/meta.cpp's parser, fuzzed on its own, needs it without this module.)
inline FpVersion fp_version_from_int(std::int64_t v, const std::string& what) {
  check(v == 1 || v == 2,
        what + ": fingerprint version " + std::to_string(v) + " is not one this Lockstep knows",
        "valid versions are 1 (before checkpoint format 2) and 2 (the default)");
  return static_cast<FpVersion>(v);
}

// key(T): XXH3-64 of the name's bytes.
std::uint64_t fingerprint_key(std::string_view name);

// The splitmix64 finalizer f and mix64(a, b) of each version, defined above.
constexpr std::uint64_t fingerprint_finalize(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr std::uint64_t fingerprint_mix_v1(std::uint64_t a, std::uint64_t b) {
  return fingerprint_finalize(fingerprint_finalize(a + 0x9e3779b97f4a7c15ull) ^ b);
}
constexpr std::uint64_t fingerprint_mix_v2(std::uint64_t a, std::uint64_t b) {
  return fingerprint_finalize(a ^ (b << 32));
}
constexpr std::uint64_t fingerprint_mix(FpVersion v, std::uint64_t a, std::uint64_t b) {
  return v == FpVersion::v1 ? fingerprint_mix_v1(a, b) : fingerprint_mix_v2(a, b);
}

// The fingerprint contribution of the local tensor `local`: its elements are mapped to
// logical indices through local.shard() (global_shape, global_offset), so a whole tensor
// gives fp(T) and the shards of any split give parts that sum to fp(T). Any strides work.
// Throws if the shard descriptor does not place `local` inside its global shape.
std::uint64_t fingerprint(std::string_view name, const Tensor& local,
                          FpVersion v = kFpVersionLatest);

// The contribution of a contiguous run of logical indices [first, first + data.size()).
std::uint64_t fingerprint_range(std::string_view name, std::span<const float> data,
                                std::uint64_t first = 0, FpVersion v = kFpVersionLatest);
std::uint64_t fingerprint_range(std::string_view name, std::span<const std::int32_t> data,
                                std::uint64_t first = 0, FpVersion v = kFpVersionLatest);
std::uint64_t fingerprint_range(std::string_view name, std::span<const std::uint16_t> data,
                                std::uint64_t first = 0, FpVersion v = kFpVersionLatest);

// The contribution of a state piece (runtime/state_piece.hpp) under its name, whatever its
// owner flag (callers sum owner pieces only).
std::uint64_t fingerprint(const StatePiece& piece, FpVersion v = kFpVersionLatest);

// torch.hash_tensor(t, mode=0) semantics (see above); 0 for an empty tensor.
std::uint64_t torch_xor_hash(const Tensor& t);
// The same over float32 elements in any order (xor is order-blind): the xor of the values of
// the owner pieces of all ranks is torch_xor_hash of the logical tensor.
std::uint64_t torch_xor_hash(std::span<const float> data);

}  // namespace lockstep
