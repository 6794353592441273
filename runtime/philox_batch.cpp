#include "runtime/philox_batch.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/error.hpp"
#include "runtime/philox_batch_impl.hpp"

namespace lockstep {

void dropout_keep_mask(const KernelCtx& ctx, std::uint64_t seed, std::uint64_t stream,
                       std::int64_t first, std::int64_t n, float p, std::uint8_t* keep) {
  if (!(first >= 0 && n >= 0 && p >= 0.0f && p <= 1.0f))
    fail("dropout_keep_mask: bad range or probability", "pass first, n >= 0 and p in [0, 1]");
  // uniform01(w) >= p  <=>  (w >> 8) >= ceil(p * 2^24)   (both sides exact).
  const std::uint32_t thr =
      static_cast<std::uint32_t>(std::ceil(static_cast<double>(p) * 16777216.0));
  if (ctx.isa == Isa::avx512)
    return philox_detail::keep_mask_avx512(seed, stream, first, n, thr, keep);
  philox_detail::keep_mask_impl(seed, stream, first, n, thr, keep);
}

}  // namespace lockstep
