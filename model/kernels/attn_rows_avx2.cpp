// The avx2 path of the softmax rows: model/kernels/attn_rows_impl.hpp over simd::Avx2 (compiled
// with the avx2 flags; reached only through model/kernels/attn_rows.cpp's dispatch). Same bits as
// the baseline path (docs/design.md section 2).
#include "model/kernels/attn_rows_impl.hpp"
#include "runtime/simd_avx2.hpp"

namespace lockstep::attn_detail {

LOCKSTEP_ATTN_ROWS_DEFINE(avx2, simd::Avx2)

}  // namespace lockstep::attn_detail
