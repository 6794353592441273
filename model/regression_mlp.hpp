// The small float32 regression MLP of the replay lab (docs/design.md section 7):
//   h = tanh(x W1ᵀ + b1),  ŷ = h W2ᵀ + b2,  loss = mean over batch and outputs of (ŷ - y)²,
// with forward and backward written by hand, and its synthetic data: inputs x ~ N(0, 1)
// and targets from a fixed random teacher network plus noise, all drawn by Philox from
// (seed, step, logical index), so a batch is a pure function of its step.
// Determinism contract: every reduction (the loss over the batch, the weight and bias
// gradients over the batch, the GEMMs over features) is a canonical sum, so a run is
// bitwise reproducible. `ReductionOrder::reversed` sums the batch axis in reverse order —
// the same values, another tree — which is how the lab shows what a reordered reduction
// does to the bits (ulp-level differences, mostly hidden by a rounded loss log).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/isa.hpp"

namespace lockstep {

enum class ReductionOrder { canonical, reversed };

struct RegressionMlpConfig {
  std::int64_t inputs = 16;
  std::int64_t hidden = 64;
  std::int64_t outputs = 4;
  std::int64_t batch = 64;
  float noise = 0.05f;  // target noise std
};

struct RegressionBatch {
  std::vector<float> x;  // [batch, inputs]
  std::vector<float> y;  // [batch, outputs]
};

// The batch of step `step` (data seed, sampler seed and step fully determine it).
RegressionBatch regression_batch(const RegressionMlpConfig& cfg, std::uint64_t data_seed,
                                 std::uint64_t sampler_seed, std::int64_t step);

class RegressionMlp {
 public:
  explicit RegressionMlp(const RegressionMlpConfig& cfg, KernelCtx ctx);

  void init(std::uint64_t seed);
  // Forward + backward on one batch: overwrites grads(), returns the mean squared error.
  float forward_backward(const RegressionBatch& b,
                         ReductionOrder order = ReductionOrder::canonical);
  float loss(const RegressionBatch& b);  // forward only (canonical order)

  // Parameters and gradients in a fixed order: W1 [hidden, inputs], b1 [hidden],
  // W2 [outputs, hidden], b2 [outputs]; names "w1", "b1", "w2", "b2".
  std::vector<std::vector<float>>& params() { return params_; }
  const std::vector<std::vector<float>>& params() const { return params_; }
  const std::vector<std::vector<float>>& grads() const { return grads_; }
  static const char* param_name(std::size_t i);
  const RegressionMlpConfig& config() const { return cfg_; }

 private:
  RegressionMlpConfig cfg_;
  KernelCtx ctx_;
  std::vector<std::vector<float>> params_, grads_;
  std::vector<float> pre_, h_, out_;  // activations kept for backward
};

}  // namespace lockstep
