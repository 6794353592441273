#include "model/config.hpp"

#include "runtime/error.hpp"

namespace lockstep {
namespace {
bool pow2(std::int64_t x) {
  return x > 0 && (x & (x - 1)) == 0;
}
std::string s(std::int64_t x) {
  return std::to_string(x);
}
}  // namespace

void validate_model_config(const ModelConfig& c, int tp) {
  check(c.vocab > 0 && c.context > 0 && c.layers > 0 && c.d_model > 0 && c.heads > 0 && c.ffn > 0,
        "model config: vocab, context, layers, d_model, heads, ffn must all be positive (vocab=" +
            s(c.vocab) + " context=" + s(c.context) + " layers=" + s(c.layers) +
            " d_model=" + s(c.d_model) + " heads=" + s(c.heads) + " ffn=" + s(c.ffn) + ")",
        "set the [model] keys to positive integers");
  check(c.d_model % c.heads == 0,
        "model config: d_model=" + s(c.d_model) + " is not a multiple of heads=" + s(c.heads),
        "choose heads dividing d_model");
  check(tp >= 1, "model config: tp=" + s(tp) + " must be >= 1");
  check(c.heads % tp == 0, "model config: heads=" + s(c.heads) + " not divisible by tp=" + s(tp),
        "tensor parallelism splits attention by heads; choose tp dividing heads");
  check(c.ffn % tp == 0, "model config: ffn=" + s(c.ffn) + " not divisible by tp=" + s(tp),
        "choose tp dividing ffn");
  check(c.vocab % tp == 0, "model config: vocab=" + s(c.vocab) + " not divisible by tp=" + s(tp),
        "the vocab-parallel embedding needs tp dividing vocab (pad the vocab)");
  check(c.dropout >= 0.0f && c.dropout < 1.0f,
        "model config: dropout=" + std::to_string(c.dropout) + " must be in [0, 1)");
  check(c.ln_eps > 0.0f, "model config: ln_eps must be positive");
}

std::string model_invariance_reason(const ModelConfig& c, int tp, int B, std::int64_t mb) {
  if (!pow2(tp)) return "TP=" + s(tp) + " is not a power of two";
  if (!pow2(B)) return "reduce_block=" + s(B) + " is not a power of two";
  auto whole_pow2_blocks = [&](std::int64_t n) { return n % B == 0 && pow2(n / B); };
  const std::int64_t dl = c.d_model / tp, fl = c.ffn / tp, vl = c.vocab / tp;
  if (tp > 1) {
    if (!whole_pow2_blocks(dl))
      return "d_model/tp=" + s(dl) + " is not a power-of-two number of reduce_block=" + s(B) +
             " blocks (attention proj is row-parallel)";
    if (!whole_pow2_blocks(fl))
      return "ffn/tp=" + s(fl) + " is not a power-of-two number of reduce_block=" + s(B) +
             " blocks (fc2 is row-parallel)";
    if (!whole_pow2_blocks(vl))
      return "vocab/tp=" + s(vl) + " is not a power-of-two number of reduce_block=" + s(B) +
             " blocks (vocab-parallel LM head and cross-entropy)";
  }
  const std::int64_t tokens = mb * c.context;
  if (!pow2(mb)) return "microbatch=" + s(mb) + " is not a power of two";
  if (!whole_pow2_blocks(tokens))
    return "microbatch tokens " + s(tokens) +
           " are not a power-of-two number of reduce_block=" + s(B) +
           " blocks (weight gradients reduce over tokens)";
  return {};
}

}  // namespace lockstep
