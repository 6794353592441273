// Gradient clipping by the global L2 norm, as torch.nn.utils.clip_grad_norm_ and Megatron:
//   coef = max_norm / (norm + 1e-6); if coef < 1, every gradient element g *= coef.
// The norm comes from optim/grad_norm.hpp (exact, layout-invariant). The coefficient is
// computed with the float operations torch 1.13 performs on the CPU for
// `max_norm / (total_norm + 1e-6)` on a float32 total_norm tensor: t = norm + 1e-6f (the
// Python scalar rounded to float), r = 1.0f / t (Tensor.__rtruediv__ is reciprocal() then
// multiply), coef = r * (float)max_norm. Unlike torch 1.13 (which always multiplies by
// min(coef, 1)), gradients are only touched when coef < 1, as in Megatron; multiplying by
// 1.0f would not change any bits anyway, except that a NaN norm (NaN coef) leaves the
// gradients alone here instead of turning them all into NaN. The caller sees the NaN in
// ClipResult::norm and decides.
// Determinism contract: coef is a pure function of (norm, max_norm); scaling is
// elementwise (one IEEE multiply per element), so any sharding of the gradients gives the
// same bits.
#pragma once

#include <span>

namespace lockstep {

struct ClipResult {
  float norm = 0.0f;     // the global gradient norm before clipping
  float coef = 1.0f;     // max_norm / (norm + 1e-6), as computed above
  bool clipped = false;  // coef < 1: gradients were (or must be) scaled by coef
};

// The clipping decision for a given global norm. max_norm must be finite and > 0
// (a disabled clip, optim.clip = 0, does not call this).
ClipResult clip_coefficient(float norm, float max_norm);

// grad[i] *= coef for every element (no-op unless r.clipped).
void apply_clip(const ClipResult& r, std::span<float> grad);

}  // namespace lockstep
