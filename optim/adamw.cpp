#include "optim/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "optim/adamw_kernel.hpp"
#include "runtime/error.hpp"

namespace lockstep {

namespace {

// Double-double arithmetic (Dekker/Knuth error-free transformations with an explicit FMA).
struct DD {
  double hi, lo;
};

DD dd_mul(DD a, DD b) {
  const double p = a.hi * b.hi;
  double e = std::fma(a.hi, b.hi, -p);  // exact error of the product
  e = e + (a.hi * b.lo + a.lo * b.hi);
  const double hi = p + e;
  return {hi, e - (hi - p)};
}

}  // namespace

void validate(const AdamWConfig& c) {
  check(c.beta1 >= 0.0 && c.beta1 < 1.0,
        "optim.beta1 = " + std::to_string(c.beta1) + " is not in [0, 1)", "use e.g. beta1 = 0.9");
  check(c.beta2 >= 0.0 && c.beta2 < 1.0,
        "optim.beta2 = " + std::to_string(c.beta2) + " is not in [0, 1)", "use e.g. beta2 = 0.95");
  check(std::isfinite(c.eps) && c.eps > 0.0,
        "optim.eps = " + std::to_string(c.eps) + " is not a positive number",
        "use e.g. eps = 1e-8");
  check(std::isfinite(c.weight_decay) && c.weight_decay >= 0.0,
        "optim.weight_decay = " + std::to_string(c.weight_decay) + " is negative or not finite",
        "use e.g. weight_decay = 0.1, or 0 for none");
}

double adamw_pow(double beta, std::int64_t t) {
  check(t >= 0, "adamw_pow: negative exponent " + std::to_string(t));
  DD result{1.0, 0.0}, base{beta, 0.0};
  for (std::int64_t k = t; k > 0; k >>= 1) {
    if (k & 1) result = dd_mul(result, base);
    if (k > 1) base = dd_mul(base, base);
  }
  return result.hi + result.lo;
}

AdamWScalars adamw_scalars(const AdamWHyper& h) {
  validate(AdamWConfig{h.beta1, h.beta2, h.eps, h.weight_decay});
  check(h.step >= 1, "AdamW step number " + std::to_string(h.step) + " is below 1",
        "the first update is step 1 (bias correction divides by 1 - beta1^t)");
  check(std::isfinite(h.lr) && h.lr >= 0.0,
        "AdamW learning rate " + std::to_string(h.lr) + " is not a finite non-negative number",
        "check the learning-rate schedule (optim.lr, optim.min_lr)");
  // Each line is the Python float (float64) expression of torch 1.13's _single_tensor_adamw,
  // cast once to float32 as the CPU kernel does with its scalar argument.
  AdamWScalars s;
  s.decay = h.decay;
  s.decay_factor = static_cast<float>(1.0 - h.lr * h.weight_decay);
  s.beta1 = static_cast<float>(h.beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - h.beta1);
  s.beta2 = static_cast<float>(h.beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - h.beta2);
  const double bc1 = 1.0 - adamw_pow(h.beta1, h.step);
  const double bc2 = 1.0 - adamw_pow(h.beta2, h.step);
  s.step_size = static_cast<float>(h.lr / bc1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  s.eps = static_cast<float>(h.eps);
  return s;
}

namespace detail {
LOCKSTEP_ADAMW_DEFINE(scalar, simd::Scalar)
}  // namespace detail

namespace {
// The AdamW element loop of ISA path `isa`.
auto adamw_range_for(Isa isa) {
  return isa == Isa::avx512 ? &detail::adamw_range_avx512
         : isa == Isa::avx2 ? &detail::adamw_range_avx2
                            : &detail::adamw_range_scalar;
}
// Elements per work item of the threaded updates: 4 arrays x 64 KiB stay in L2 between passes.
// Elementwise: how the work is chunked across threads cannot change bits.
constexpr std::int64_t kChunk = 1 << 14;
}  // namespace

void adamw_step(const KernelCtx& ctx, const AdamWHyper& h, std::span<float> param,
                std::span<const float> grad, std::span<float> m, std::span<float> v) {
  validate(ctx);
  check(grad.size() == param.size() && m.size() == param.size() && v.size() == param.size(),
        "AdamW step over spans of different lengths (param " + std::to_string(param.size()) +
            ", grad " + std::to_string(grad.size()) + ", m " + std::to_string(m.size()) + ", v " +
            std::to_string(v.size()) + ")",
        "pass the same local shard of the parameter, its gradient and both moments");
  const AdamWScalars s = adamw_scalars(h);
  auto range = adamw_range_for(ctx.isa);
  const std::int64_t n = static_cast<std::int64_t>(param.size());
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  const int threads =
      static_cast<int>(std::min<std::int64_t>(ctx.threads, std::max<std::int64_t>(chunks, 1)));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t lo = c * kChunk, len = std::min(kChunk, n - lo);
    range(s, param.data() + lo, grad.data() + lo, m.data() + lo, v.data() + lo, len);
  }
}

void clip_and_adamw_step(const KernelCtx& ctx, const AdamWConfig& c, double lr, std::int64_t step,
                         const ClipResult& clip, std::span<const AdamWTensor> tensors) {
  validate(ctx);
  const AdamWScalars with_decay = adamw_scalars(AdamWHyper::at(c, lr, step, true));
  const AdamWScalars no_decay = adamw_scalars(AdamWHyper::at(c, lr, step, false));
  auto range = adamw_range_for(ctx.isa);
  struct Chunk {
    std::size_t tensor;
    std::int64_t lo, len;
  };
  std::vector<Chunk> chunks;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    check(tensors[t].n >= 0 && (tensors[t].n == 0 || (tensors[t].param && tensors[t].grad &&
                                                      tensors[t].m && tensors[t].v)),
          "clip_and_adamw_step: tensor " + std::to_string(t) + " has " +
              std::to_string(tensors[t].n) + " elements but a null array",
          "pass the parameter, gradient and both moments of every slice");
    for (std::int64_t lo = 0; lo < tensors[t].n; lo += kChunk)
      chunks.push_back({t, lo, std::min(kChunk, tensors[t].n - lo)});
  }
  const int nc = static_cast<int>(chunks.size());
  const int threads = std::max(1, std::min(ctx.threads, nc));
#pragma omp parallel for num_threads(threads) schedule(static) if (threads > 1)
  for (int i = 0; i < nc; ++i) {
    const Chunk& k = chunks[static_cast<std::size_t>(i)];
    const AdamWTensor& t = tensors[k.tensor];
    float* g = t.grad + k.lo;
    apply_clip(clip, std::span<float>(g, static_cast<std::size_t>(k.len)));
    range(t.decay ? with_decay : no_decay, t.param + k.lo, g, t.m + k.lo, t.v + k.lo, k.len);
  }
}

void adamw_step(const AdamWHyper& h, std::span<float> param, std::span<const float> grad,
                std::span<float> m, std::span<float> v) {
  adamw_step(KernelCtx::best(1), h, param, grad, m, v);
}

}  // namespace lockstep
