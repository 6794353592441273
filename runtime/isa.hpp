// Run-time ISA dispatch: which instruction-set path a kernel takes (scalar, AVX2, AVX-512).
// Determinism contract: the ISA path never changes bits. Every path evaluates the same
// reduction tree with the same fused multiply-adds (an FMA is one IEEE rounding on every
// path), so scalar == AVX2 == AVX-512 bit for bit; tests/unit/test_gemm.cpp and
// test_transcendental.cpp check it on every path this CPU supports.
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/enum_names.hpp"
#include "runtime/reduce_tree.hpp"

namespace lockstep {

enum class Isa { scalar, avx2, avx512 };
constexpr std::array<EnumName<Isa>, 3> enum_names(Isa) {
  return {{{Isa::scalar, "scalar"}, {Isa::avx2, "avx2"}, {Isa::avx512, "avx512"}}};
}
// What a config asks for (run.isa): a path, or the best this CPU supports.
enum class IsaChoice { automatic, scalar, avx2, avx512 };
constexpr std::array<EnumName<IsaChoice>, 4> enum_names(IsaChoice) {
  return {{{IsaChoice::automatic, "auto"},
           {IsaChoice::scalar, "scalar"},
           {IsaChoice::avx2, "avx2"},
           {IsaChoice::avx512, "avx512"}}};
}

const char* isa_name(Isa isa);
// The path a choice names on this CPU (automatic: best_isa()).
Isa resolve_isa(IsaChoice choice);
// Parses "scalar", "avx2", "avx512" or "auto" (the best supported); throws on anything else.
Isa parse_isa(std::string_view name);
bool isa_supported(Isa isa);
Isa best_isa();
// Every path this CPU can run, scalar first.
std::vector<Isa> supported_isas();

// Who made this CPU (CPUID's vendor string): kernels pick speed-only parameters by it
// (runtime/gemm.hpp avx512_tile_rows), never bits.
enum class CpuVendor { intel, amd, other };
constexpr std::array<EnumName<CpuVendor>, 3> enum_names(CpuVendor) {
  return {{{CpuVendor::intel, "intel"}, {CpuVendor::amd, "amd"}, {CpuVendor::other, "other"}}};
}
CpuVendor cpu_vendor();

// What every kernel call needs to know, passed explicitly (no global configuration).
struct KernelCtx {
  Isa isa = Isa::scalar;  // the path to take; must be supported by this CPU
  int threads = 1;        // OpenMP threads for this call; never changes bits
  int reduce_block =
      64;  // B of the canonical sum (docs/design.md section 2), config numerics.reduce_block
  TreeShape tree = kDefaultTree;  // the canonical tree (runtime/reduce_tree.hpp), numerics.tree
  // > 0: the reduction axis of this call (GEMM's K, csum_rows' rows) is tokens, whole
  // sequences of this many (a halving tree over sequences, each over its blocks); 0: flat.
  std::int64_t sequence = 0;

  static KernelCtx best(int threads = 1, int reduce_block = 64) {
    return KernelCtx{best_isa(), threads, reduce_block};
  }
  // The rule of this call's reduction axis.
  SumRule rule() const;
  // The same context for a reduction over tokens made of sequences of `len` (flat under pow2).
  KernelCtx over_sequences(std::int64_t len) const;
  // The same context for a reduction over a flat (feature) axis.
  KernelCtx flat() const;
};

// Throws a lockstep::Error if ctx is unusable (unsupported ISA, threads < 1, block < 1).
void validate(const KernelCtx& ctx);

}  // namespace lockstep
