// The avx512 path of the softmax rows: model/kernels/attn_rows_impl.hpp over simd::Avx512 (compiled
// with the avx512 flags; reached only through model/kernels/attn_rows.cpp's dispatch). Same bits as
// the baseline path (docs/design.md section 2).
#include "model/kernels/attn_rows_impl.hpp"
#include "runtime/simd_avx512.hpp"

namespace lockstep::attn_detail {

LOCKSTEP_ATTN_ROWS_DEFINE(avx512, simd::Avx512)

}  // namespace lockstep::attn_detail
