// The avx2 instantiation of model/kernels/ln_rows_impl.hpp (compiled with the avx2 flags).
#include "model/kernels/ln_rows_impl.hpp"

namespace lockstep::ln_detail {

LOCKSTEP_LN_ROWS_DEFINE(avx2)

}  // namespace lockstep::ln_detail
