// The GPT model configuration (DESIGN.md section 6, config section `model`).
// Determinism contract: none by itself; validate_model_config() names the shapes that the
// layout-invariance guarantee (G3) needs and says which one fails.
#pragma once

#include <cstdint>
#include <string>

namespace lockstep {

struct ModelConfig {
  std::int64_t vocab = 256;
  std::int64_t context = 256;
  std::int64_t layers = 4;
  std::int64_t d_model = 256;
  std::int64_t heads = 8;
  std::int64_t ffn = 1024;
  float dropout = 0.0f;  // inverted dropout probability (embedding, attention probs, proj, fc2)
  bool bias = false;     // linear biases (LayerNorm always has weight and bias)
  float ln_eps = 1e-5f;

  std::int64_t head_dim() const { return d_model / heads; }
};

// Throws a lockstep::Error naming the first bad value (non-positive sizes, d_model not a
// multiple of heads, heads/d_model/ffn/vocab not divisible by tp, dropout outside [0, 1)).
void validate_model_config(const ModelConfig& cfg, int tp);

// Empty when every reduction the model runs at this TP size, reduce_block and microbatch
// size (sequences per forward_backward) is an aligned power-of-two subtree of the
// single-process canonical sum (G3 holds); otherwise one sentence naming the first shape that
// breaks it (the run is then deterministic, G1/G2, but not layout-invariant).
std::string model_invariance_reason(const ModelConfig& cfg, int tp, int reduce_block,
                                    std::int64_t microbatch);

}  // namespace lockstep
