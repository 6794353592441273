#include "runtime/openblas_env.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <string>

#include "runtime/isa.hpp"

namespace lockstep {

const char* openblas_core_name() {
  static std::string core = [] {
    std::string c = openblas_get_corename();
    for (auto& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return c;
  }();
  return core.c_str();
}

void pin_openblas_kernels(char** argv) {
  if (std::getenv("LOCKSTEP_OPENBLAS_PINNED") || std::getenv("OPENBLAS_CORETYPE")) return;
  if (!isa_supported(Isa::avx512)) return;
  const std::string core = openblas_core_name();
  if (core == "skylakex" || core == "cooperlake" || core == "sapphirerapids") return;
  setenv("LOCKSTEP_OPENBLAS_PINNED", "1", 1);
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  execv("/proc/self/exe", argv);
  // exec failed: carry on with OpenBLAS's own choice (fast mode is then slower, not wrong).
}

}  // namespace lockstep
