// The avx2 path of the AdamW update: optim/adamw_kernel.hpp over simd::Avx2 (compiled with the
// avx2 flags; reached only through optim/adamw.cpp's dispatch). Same bits as the scalar path
// (docs/design.md section 2).
#include "optim/adamw_kernel.hpp"
#include "runtime/simd_avx2.hpp"

namespace lockstep::detail {

LOCKSTEP_ADAMW_DEFINE(avx2, simd::Avx2)

}  // namespace lockstep::detail
