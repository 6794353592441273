// The tiny GPT shape shared by the model unit tests and the TP multi-rank tests: vocab
// 256, context 64, 2 layers, d_model 128, 4 heads, ffn 256 (with reduce_block 16 every
// TP shard of up to 4 ranks owns a power-of-two number of whole blocks).
#pragma once

#include "model/config.hpp"

namespace lockstep::testing {

inline ModelConfig tiny_model_config(float dropout, bool bias) {
  ModelConfig c;
  c.vocab = 256;
  c.context = 64;
  c.layers = 2;
  c.d_model = 128;
  c.heads = 4;
  c.ffn = 256;
  c.dropout = dropout;
  c.bias = bias;
  return c;
}

}  // namespace lockstep::testing
