// The avx512 path of the AdamW update: optim/adamw_kernel.hpp over simd::Avx512 (compiled with the
// avx512 flags; reached only through optim/adamw.cpp's dispatch). Same bits as the scalar path
// (docs/design.md section 2).
#include "optim/adamw_kernel.hpp"
#include "runtime/simd_avx512.hpp"

namespace lockstep::detail {

LOCKSTEP_ADAMW_DEFINE(avx512, simd::Avx512)

}  // namespace lockstep::detail
