// The avx2 path of the LayerNorm rows: model/kernels/ln_rows_impl.hpp over simd::Avx2 (compiled
// with the avx2 flags; reached only through model/kernels/ln_rows.cpp's dispatch). Same bits as
// the baseline path (docs/design.md section 2).
#include "model/kernels/ln_rows_impl.hpp"
#include "runtime/simd_avx2.hpp"

namespace lockstep::ln_detail {

LOCKSTEP_LN_ROWS_DEFINE(avx2, simd::Avx2)

}  // namespace lockstep::ln_detail
