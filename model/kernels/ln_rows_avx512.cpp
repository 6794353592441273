// The avx512 instantiation of model/kernels/ln_rows_impl.hpp (compiled with the avx512 flags).
#include "model/kernels/ln_rows_impl.hpp"

namespace lockstep::ln_detail {

LOCKSTEP_LN_ROWS_DEFINE(avx512)

}  // namespace lockstep::ln_detail
