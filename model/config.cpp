#include "model/config.hpp"

#include <tuple>

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

std::vector<std::string> model_config_problems(const ModelConfig& m, std::int64_t tp) {
  std::vector<std::string> p;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) p.push_back(msg);
  };
  need(m.vocab >= 2, "model.vocab = " + s(m.vocab) + " must be >= 2");
  need(m.vocab_pad_to >= 1, "model.vocab_pad_to = " + s(m.vocab_pad_to) + " must be >= 1");
  need(m.context >= 1, "model.context = " + s(m.context) + " must be >= 1");
  need(m.layers >= 1, "model.layers = " + s(m.layers) + " must be >= 1");
  need(m.d_model >= 1 && m.heads >= 1 && m.ffn >= 1,
       "model.d_model, model.heads and model.ffn must be >= 1");
  need(m.heads < 1 || m.d_model % m.heads == 0,
       "model.d_model = " + s(m.d_model) + " is not divisible by model.heads = " + s(m.heads));
  need(m.dropout >= 0 && m.dropout < 1, "model.dropout must be in [0, 1)");
  need(m.ln_eps > 0, "model.ln_eps must be > 0");
  if (tp >= 1) {
    need(m.heads % tp == 0,
         "model.heads = " + s(m.heads) + " is not divisible by parallel.tp = " + s(tp));
    need(m.ffn % tp == 0,
         "model.ffn = " + s(m.ffn) + " is not divisible by parallel.tp = " + s(tp));
    need(m.padded_vocab() % tp == 0,
         m.vocab_pad_to == 1
             ? "model.vocab = " + s(m.vocab) + " is not divisible by parallel.tp = " + s(tp) +
                   " (model.vocab_pad_to pads it)"
             : "the padded vocabulary " + s(m.padded_vocab()) + " (model.vocab = " + s(m.vocab) +
                   " padded to a multiple of model.vocab_pad_to = " + s(m.vocab_pad_to) +
                   ") is not divisible by parallel.tp = " + s(tp));
  }
  return p;
}

void validate_model_config(const ModelConfig& c, int tp) {
  check(tp >= 1, "model config: tp=" + s(tp) + " must be >= 1");
  const auto problems = model_config_problems(c, tp);
  if (problems.empty()) return;
  std::string msg = "invalid model config:";
  for (const auto& line : problems) msg += "\n  " + line;
  fail(msg, "fix the [model] keys named (tensor parallelism splits heads, ffn and vocab by tp)");
}

std::string feature_cut_problem(TreeShape tree, const std::string& what, const std::string& key,
                                std::int64_t n, std::int64_t parts, std::int64_t B) {
  if (parts == 1) return {};
  if (!pow2(parts)) return what + ": " + s(parts) + " shards is not a power of two";
  const std::int64_t shard = n / parts;
  const bool whole = n % parts == 0 && shard % B == 0;
  if (whole && (tree == TreeShape::halving || pow2(shard / B))) return {};
  // The sizes of n nearest below and above that would keep every cut on a node.
  const std::int64_t unit = parts * B;
  std::int64_t lo = 0, hi = 0;
  if (tree == TreeShape::halving) {
    lo = n / unit * unit, hi = lo + unit;
  } else {
    for (hi = unit; hi <= n; hi *= 2) lo = hi;
  }
  const std::string sizes = lo > 0 ? s(lo) + " or " + s(hi) : s(hi);
  const std::string rule = tree == TreeShape::halving
                               ? "is not a whole number of blocks of " + s(B)
                               : "is not a power-of-two number of blocks of " + s(B);
  return what + " = " + (n % parts == 0 ? s(shard) : s(n) + " / " + s(parts)) + " " + rule +
         "; " + key + " " + sizes + " would keep G3";
}

std::string model_invariance_reason(const ModelConfig& c, int tp, int B, std::int64_t mb,
                                    TreeShape tree) {
  if (!pow2(tp)) return "TP=" + s(tp) + " is not a power of two";
  if (tree == TreeShape::pow2 && !pow2(B)) return "reduce_block=" + s(B) + " is not a power of two";
  if (tp > 1) {
    for (const auto& [what, key, n, why] :
         {std::tuple<const char*, const char*, std::int64_t, const char*>{
              "model.d_model / tp", "model.d_model", c.d_model, " (attention proj is row-parallel)"},
          {"model.ffn / tp", "model.ffn", c.ffn, " (fc2 is row-parallel)"},
          {"padded vocab / tp", "a padded vocab (model.vocab_pad_to) of", c.padded_vocab(),
           " (vocab-parallel LM head and cross-entropy)"}}) {
      const std::string p = feature_cut_problem(tree, what, key, n, tp, B);
      if (!p.empty()) return p + why;
    }
  }
  if (tree == TreeShape::halving) return {};
  const std::int64_t tokens = mb * c.context;
  if (!pow2(mb)) return "microbatch=" + s(mb) + " is not a power of two";
  if (tokens % B != 0 || !pow2(tokens / B))
    return "microbatch tokens " + s(tokens) +
           " are not a power-of-two number of reduce_block=" + s(B) +
           " blocks (weight gradients reduce over tokens)";
  return {};
}

}  // namespace lockstep
