#include "runtime/isa.hpp"

#include <string>

#include "runtime/error.hpp"

namespace lockstep {

const char* isa_name(Isa isa) {
  return enum_name(isa).data();
}

Isa resolve_isa(IsaChoice choice) {
  switch (choice) {
    case IsaChoice::scalar:
      return Isa::scalar;
    case IsaChoice::avx2:
      return Isa::avx2;
    case IsaChoice::avx512:
      return Isa::avx512;
    case IsaChoice::automatic:
      break;
  }
  return best_isa();
}

Isa parse_isa(std::string_view name) {
  return name.empty() ? best_isa() : resolve_isa(parse_enum<IsaChoice>(name, "ISA path"));
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
  }
  return false;
}

Isa best_isa() {
  if (isa_supported(Isa::avx512)) return Isa::avx512;
  if (isa_supported(Isa::avx2)) return Isa::avx2;
  return Isa::scalar;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (isa_supported(i)) out.push_back(i);
  return out;
}

CpuVendor cpu_vendor() {
  if (__builtin_cpu_is("intel")) return CpuVendor::intel;
  if (__builtin_cpu_is("amd")) return CpuVendor::amd;
  return CpuVendor::other;
}

// Called by every kernel entry point (thousands of times a step): the messages are built
// only when a check fails.
SumRule KernelCtx::rule() const {
  return SumRule{reduce_block, tree, sequence};
}

KernelCtx KernelCtx::over_sequences(std::int64_t len) const {
  KernelCtx k = *this;
  k.sequence = rule().over_sequences(len).segment;
  return k;
}

KernelCtx KernelCtx::flat() const {
  KernelCtx k = *this;
  k.sequence = 0;
  return k;
}

void validate(const KernelCtx& ctx) {
  if (!isa_supported(ctx.isa))
    fail(std::string("ISA path ") + isa_name(ctx.isa) + " is not supported by this CPU",
         "choose --isa auto or one of the paths this CPU supports");
  if (ctx.threads < 1)
    fail("thread count " + std::to_string(ctx.threads) + " must be >= 1",
         "set run.threads to a positive number");
  if (ctx.reduce_block < 1)
    fail("reduce_block " + std::to_string(ctx.reduce_block) + " must be >= 1",
         "set numerics.reduce_block to a positive number (default 64)");
  if (ctx.sequence < 0 || (ctx.sequence > 0 && ctx.tree != TreeShape::halving))
    fail("a reduction over sequences of " + std::to_string(ctx.sequence) +
             " tokens needs the halving tree",
         "build token contexts with KernelCtx::over_sequences");
}

}  // namespace lockstep
