// The GPT model configuration: the config file's [model] section itself (docs/design.md
// section 6; launch/train/config.hpp's key table points into this struct), its defaults the
// `tiny` preset's shapes, and the one check of its values.
// Determinism contract: none by itself; model_invariance_reason() names the shapes that the
// layout-invariance guarantee (G3) needs and says which one fails.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/reduce_tree.hpp"

namespace lockstep {

struct ModelConfig {
  std::int64_t vocab = 256;       // the tokenizer's vocabulary: every token and label is below
  std::int64_t vocab_pad_to = 1;  // the model's vocabulary is vocab rounded up to a multiple
                                  // of this (Megatron's make_vocab_size_divisible_by)
  std::int64_t context = 64;
  std::int64_t layers = 2;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t ffn = 512;
  // Kept as written in the config (float64, so config.toml and meta.json repeat it exactly);
  // the model computes with their float32 roundings.
  double dropout = 0.0;  // inverted dropout probability (embedding, attention probs, proj, fc2)
  bool bias = false;     // linear biases (LayerNorm always has weight and bias)
  double ln_eps = 1e-5;

  std::int64_t head_dim() const { return d_model / heads; }
  // The rows of the embedding and the LM head: vocab rounded up to a multiple of vocab_pad_to.
  // The padded rows are real parameters that no label selects (they still take part in the
  // softmax, as in Megatron). Unlike Megatron's rule (a multiple of the padding x TP) it does
  // not depend on the layout: the model's shapes must not, or G3 could not hold.
  std::int64_t padded_vocab() const {
    const std::int64_t q = vocab_pad_to > 0 ? vocab_pad_to : 1;
    return (vocab + q - 1) / q * q;
  }
};

// Every problem with cfg at tensor-parallel size tp, one line each naming the config keys
// (non-positive sizes, d_model not a multiple of heads, heads/ffn/padded vocab not divisible by tp,
// dropout outside [0, 1), ln_eps <= 0); empty: valid. The config validator
// (launch/train/validate.hpp) reports these lines with the rest.
std::vector<std::string> model_config_problems(const ModelConfig& cfg, std::int64_t tp);
// Throws a lockstep::Error listing model_config_problems(cfg, tp) if there is any.
void validate_model_config(const ModelConfig& cfg, int tp);

// Why cutting a feature axis of n elements into `parts` equal shards (TP) does not put every
// shard on a node of the axis' canonical tree (runtime/reduce_tree.hpp), with the nearby sizes
// that would; empty if it does. `what` names the shard ("row-parallel K per TP rank (ffn /
// tp)"), `key` the size to change ("model.ffn"). The rule: parts a power of two, n / parts a
// whole number of blocks of B, and (halving) nothing more, (pow2) a power of two of them.
std::string feature_cut_problem(TreeShape tree, const std::string& what, const std::string& key,
                                std::int64_t n, std::int64_t parts, std::int64_t B);

// Empty when every reduction the model runs at this TP size, reduce_block, tree and microbatch
// size (sequences per forward_backward) is a node of the single-process canonical sum's tree
// (G3 holds); otherwise one sentence naming the first shape that breaks it (the run is then
// deterministic, G1/G2, but not layout-invariant). Under halving any microbatch size keeps
// the bits (launch splits it at the tree's nodes), so it only constrains pow2.
std::string model_invariance_reason(const ModelConfig& cfg, int tp, int reduce_block,
                                    std::int64_t microbatch, TreeShape tree = kDefaultTree);

}  // namespace lockstep
