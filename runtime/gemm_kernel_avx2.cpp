// The avx2 path of the canonical and chain GEMMs: runtime/gemm_kernel.hpp over simd::Avx2 with
// a 6 x 16 register tile (12 ymm accumulators), compiled with the avx2 flags and reached only
// through runtime/gemm.cpp's dispatch. The same FMAs in the same order as every other path,
// merged by the same canonical tree, so the bits equal the scalar reference (docs/design.md
// section 2).
#include "runtime/gemm_kernel.hpp"
#include "runtime/simd_avx2.hpp"

namespace lockstep::gemm_detail {

LOCKSTEP_GEMM_DEFINE(avx2, simd::Avx2, 6, 2)

}  // namespace lockstep::gemm_detail
