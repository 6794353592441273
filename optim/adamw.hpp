// AdamW (decoupled weight decay) over a local shard of one parameter, following
// torch.optim.AdamW of PyTorch 1.13 (single-tensor path, foreach=False, amsgrad=False,
// maximize=False) operation by operation, so that one step can be compared with it:
//   param *= (1 - lr*wd)                       [param.mul_(1 - lr*wd)]      (decay only)
//   m = m*beta1;  m = m + (1-beta1)*g          [exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)]
//   v = v*beta2;  v = v + ((1-beta2)*g)*g      [exp_avg_sq.mul_(beta2).addcmul_(grad, grad,
//   value=1-beta2)] bc1 = 1 - beta1^t;  bc2 = 1 - beta2^t;  step_size = lr / bc1 denom = sqrt(v) /
//   sqrt(bc2);  denom = denom + eps param = param - (step_size*m) / denom [param.addcdiv_(exp_avg,
//   denom, value=-step_size)]
// Scalars: torch computes every scalar expression (1 - lr*wd, 1 - beta1, beta^t, lr / bc1,
// math.sqrt(bc2)) in Python floats, i.e. float64, and the CPU kernels of 1.13 cast each
// scalar to the tensor's dtype (float32) once before the elementwise float32 arithmetic
// (TensorIterator casts a wrapped-number operand to the common dtype; the add/addcmul/
// addcdiv kernels take `value.to<scalar_t>()`). AdamWScalars below are exactly those float
// casts of the float64 expressions. beta^t is computed in double-double by binary powering
// and rounded once (correctly rounded except in near-tie cases; no libm pow).
// One FMA, on purpose: torch 1.13's vectorized CPU `add` with alpha is
// vec::fmadd(grad, alpha, exp_avg) (aten/src/ATen/native/ufunc/add.h), so the first moment
// is m = fma(g, 1-beta1, m*beta1) here on every ISA path. Everything else is separately
// rounded IEEE mul/add/div/sqrt. (A torch binary built with FP contraction may also fuse
// addcmul's final multiply-add; that is the compiler's choice, not torch's source, so
// bitwise agreement with a given torch build is measured by tests/reference/adamw_torch.py,
// not promised.)
// Determinism contract: elementwise; element i depends only on param[i], grad[i], m[i],
// v[i] and the step's scalars. Updating a tensor whole or in any slices, on any ISA path or
// thread count, gives the same bits.
#pragma once

#include <cstdint>
#include <span>

#include "optim/clip.hpp"
#include "runtime/isa.hpp"

namespace lockstep {

// The optimizer's constant hyperparameters (config section [optim]). Stored as float64,
// like the Python floats torch keeps in its param_groups; the learning rate comes from the
// schedule every step (optim/lr_schedule.hpp).
struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// Throws a lockstep::Error naming the field unless 0 <= beta < 1, eps > 0, wd >= 0.
void validate(const AdamWConfig& c);

// Everything one step needs.
struct AdamWHyper {
  double lr = 0.0;  // this step's learning rate (lr_at(...) for the train loop)
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  std::int64_t step = 1;  // t >= 1: the number of this update, counting from 1
  bool decay = true;      // weight decay on this tensor (2-D weights only, by convention)

  static AdamWHyper at(const AdamWConfig& c, double lr, std::int64_t step, bool decay) {
    return AdamWHyper{lr, c.beta1, c.beta2, c.eps, c.weight_decay, step, decay};
  }
};

// The float32 scalars the elementwise kernel uses (each a float64 expression rounded once).
struct AdamWScalars {
  bool decay = false;
  float decay_factor = 1.0f;     // (float)(1 - lr*wd)
  float beta1 = 0.0f;            // (float)beta1
  float one_minus_beta1 = 0.0f;  // (float)(1 - beta1)
  float beta2 = 0.0f;            // (float)beta2
  float one_minus_beta2 = 0.0f;  // (float)(1 - beta2)
  float bc2_sqrt = 1.0f;         // (float)sqrt(1 - beta2^t)
  float eps = 0.0f;              // (float)eps
  float step_size = 0.0f;        // (float)(lr / (1 - beta1^t))
};
AdamWScalars adamw_scalars(const AdamWHyper& h);

// beta^t in double-double, rounded once to double (t >= 0). Correctly rounded in every case
// checked against exact rationals except below ~2^-1000, where the low word underflows (there
// 1 - beta^t == 1 anyway). glibc's pow was off by one ulp at 3 of those checked points.
double adamw_pow(double beta, std::int64_t t);

// One AdamW step in place over equally long spans (a local shard, any slice). Takes the
// best ISA path of this CPU, one thread.
void adamw_step(const AdamWHyper& h, std::span<float> param, std::span<const float> grad,
                std::span<float> m, std::span<float> v);
// The same on an explicit ISA path and thread count (bits identical for every choice).
void adamw_step(const KernelCtx& ctx, const AdamWHyper& h, std::span<float> param,
                std::span<const float> grad, std::span<float> m, std::span<float> v);

// One tensor (or local slice) of a whole-model step: n elements of each array.
struct AdamWTensor {
  float* param;
  float* grad;  // scaled in place by the clip coefficient when clipping
  float* m;
  float* v;
  std::int64_t n;
  bool decay;  // weight decay on this tensor
};
// The clipping and AdamW step of many tensors in one parallel loop: their chunks are
// spread over ctx.threads, and each chunk is first clipped (apply_clip, when clip.clipped)
// and then updated while it is in cache. The same bits as apply_clip over every gradient
// followed by adamw_step per tensor with AdamWHyper::at(c, lr, step, tensor.decay).
void clip_and_adamw_step(const KernelCtx& ctx, const AdamWConfig& c, double lr, std::int64_t step,
                         const ClipResult& clip, std::span<const AdamWTensor> tensors);

}  // namespace lockstep
