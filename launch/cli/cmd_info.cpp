// `lockstep info`: what this build is. These are the facts a checkpoint and a trace record
// about the build (docs/design.md section 2).
#include <omp.h>

#include <cstdio>
#include <string>

#include "launch/cli/commands.hpp"
#include "lockstep/build_info.hpp"
#include "model/kernels/attn_gemm.hpp"
#include "runtime/isa.hpp"

namespace lockstep::cli {

Runner add_info(CLI::App& app) {
  app.add_subcommand("info", "print build facts: compiler, flags, ISA paths, CUDA");
  return [](int, char**) {
    std::string isas;
    for (Isa i : supported_isas()) isas += std::string(isas.empty() ? "" : ", ") + isa_name(i);
    std::printf("lockstep %s\n", build_info::kVersion);
    std::printf("  compiler      : %s (%s)\n", build_info::kCompiler, build_info::kBuildType);
    std::printf("  flags         : %s\n", build_info::kFlags);
    std::printf("  ISA paths     : %s (best: %s)\n", isas.c_str(), isa_name(best_isa()));
    if (isa_supported(Isa::avx512))
      std::printf("  GEMM tile     : %s (AVX-512, CPU vendor %s)\n",
                  cpu_vendor() == CpuVendor::intel
                      ? "8 x 48, or 12 x 32 where that pads N 10% less"
                      : "12 x 32",
                  enum_name(cpu_vendor()).data());
    if (isa_supported(Isa::avx512))
      std::printf("  attention tile: %s at head_dim 64 (AVX-512 prefix / suffix products)\n",
                  attn_tile_halves(64) ? "two 8 x 32 passes" : "one 8 x 64 tile");
    std::printf("  OpenMP threads: %d available\n", omp_get_max_threads());
    std::printf("  sanitizers    : %s\n", build_info::kSanitize ? "on" : "off");
    std::printf("  CUDA          : %s\n",
                build_info::kCuda ? "toolkit found at build time" : "off");
    return 0;
  };
}

}  // namespace lockstep::cli
