#include "optim/clip.hpp"

#include <cmath>
#include <string>

#include "runtime/error.hpp"

namespace lockstep {

ClipResult clip_coefficient(float norm, float max_norm) {
  check(std::isfinite(max_norm) && max_norm > 0.0f,
        "gradient clipping threshold " + std::to_string(max_norm) + " is not a positive number",
        "set optim.clip to a positive value, or to 0 to disable clipping");
  ClipResult r;
  r.norm = norm;
  const float denom = norm + static_cast<float>(1e-6);  // torch: total_norm + 1e-6
  const float recip = 1.0f / denom;                     // torch: __rtruediv__ -> reciprocal()
  r.coef = recip * max_norm;                            //        ... * max_norm
  r.clipped = r.coef < 1.0f;
  return r;
}

void apply_clip(const ClipResult& r, std::span<float> grad) {
  if (!r.clipped) return;
  const float c = r.coef;
  for (float& g : grad) g = g * c;
}

}  // namespace lockstep
