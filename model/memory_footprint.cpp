#include "model/memory_footprint.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "model/param_table.hpp"
#include "runtime/gemm.hpp"

namespace lockstep {

namespace {
constexpr std::int64_t kF = sizeof(float);

// One layer's LayerActs of a training forward (model/gpt_attention.cpp, gpt_mlp.cpp,
// gpt_residual.cpp): two LayerNorms (xhat, rstd, output), q/k/v as one fused [T, 3 dl] buffer,
// the attention output, u and g at the FFN row stride; with dropout the probabilities, their
// dropped copy and mask, and the two branch masks.
std::int64_t layer_bytes(std::int64_t T, std::int64_t d, std::int64_t dl, std::int64_t fld,
                         std::int64_t probs, bool dropout) {
  std::int64_t b = kF * (2 * (2 * T * d + T) + 3 * T * dl + T * dl + 2 * T * fld);
  if (dropout) b += (2 * kF + 1) * probs + 2 * T * d;
  return b;
}

// Each thread's GEMM buffers at their largest over the calls made (runtime/gemm.hpp).
class GemmScratchMax {
 public:
  GemmScratchMax(GemmImpl impl, int threads)
      : impl_(impl), most_(static_cast<std::size_t>(threads)) {}
  // A call on ctx's threads; with `each`, a one-thread call that every thread makes (the
  // attention's products, one (sequence, head) pair per thread at a time).
  void call(const KernelCtx& ctx, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
            std::int64_t K, bool each = false) {
    const std::vector<GemmScratch> need = gemm_scratch(ctx, impl_, ta, tb, M, N, K);
    for (std::size_t t = 0; t < most_.size() && !need.empty(); ++t)
      if (each || t < need.size()) grow(most_[t], need[each ? 0 : t]);
  }
  // A linear layer of `in` to `out` features on T tokens: forward, weight and input gradients.
  void linear(const KernelCtx& flat, const KernelCtx& tokens, std::int64_t T, std::int64_t in,
              std::int64_t out) {
    call(flat, Trans::N, Trans::T, T, out, in);
    call(tokens, Trans::T, Trans::N, out, in, T);
    call(flat, Trans::N, Trans::N, T, in, out);
  }
  std::int64_t bytes() const {
    std::int64_t floats = 0;
    for (const GemmScratch& s : most_) floats += s.floats();
    return kF * floats;
  }

 private:
  static void grow(GemmScratch& m, const GemmScratch& n) {
    m.ablock = std::max(m.ablock, n.ablock);
    m.bpack = std::max(m.bpack, n.bpack);
    m.stack = std::max(m.stack, n.stack);
    m.slots = std::max(m.slots, n.slots);
    m.shared_b = std::max(m.shared_b, n.shared_b);
  }
  GemmImpl impl_;
  std::vector<GemmScratch> most_;
};

// The stage's GEMMs (parallel/tp_layers.cpp, parallel/fused_linear3.cpp, model/gpt_head.cpp,
// model/gpt_causal_gemms.cpp): q/k/v fused (its input gradient also as three of d_model / tp),
// the attention projection, fc1, fc2, the LM head; the attention's products per (sequence,
// head) on one thread each (where the fused causal kernels run instead, these are counted all
// the same).
std::int64_t gemm_scratch_bytes(const ModelConfig& cfg, int tp, const PipelineStage& stage,
                                std::int64_t mb, const KernelCtx& ctx, GemmImpl impl) {
  const KernelCtx flat = ctx.flat(), tokens = ctx.over_sequences(cfg.context);
  KernelCtx one = flat;
  one.threads = 1;
  const std::int64_t C = cfg.context, T = mb * C, d = cfg.d_model, dl = d / tp;
  const std::int64_t fl = cfg.ffn / tp, hd = cfg.head_dim();
  GemmScratchMax most(impl, ctx.threads);
  if (stage.end_layer > stage.first_layer) {
    most.linear(flat, tokens, T, d, 3 * dl);
    most.call(flat, Trans::N, Trans::N, T, d, dl);
    most.linear(flat, tokens, T, dl, d);
    most.linear(flat, tokens, T, d, fl);
    most.linear(flat, tokens, T, fl, d);
    most.call(one, Trans::N, Trans::T, C, C, hd, true);
    most.call(one, Trans::N, Trans::N, C, hd, C, true);
    most.call(one, Trans::T, Trans::N, C, hd, C, true);
  }
  if (stage.last()) most.linear(flat, tokens, T, d, cfg.padded_vocab() / tp);
  return most.bytes();
}
}  // namespace

StageFootprint stage_footprint(const ModelConfig& cfg, int tp, const PipelineStage& stage,
                               std::int64_t mb, const KernelCtx& ctx, GemmImpl impl) {
  const int threads = ctx.threads;
  StageFootprint f;
  const ParamTable table = ParamTable::build(cfg);
  std::map<std::string, std::int64_t> group;  // Gpt::grad_groups by name
  for (const ParamSpec& s : table.entries()) {
    if (!stage.holds(s)) continue;
    const std::int64_t n = shape_numel(s.shard(tp, 0).local_shape());
    f.param_floats += n;
    f.grad_floats += n * static_cast<std::int64_t>(s.terms.size());
    f.terms_whole_lines = f.terms_whole_lines && n % 16 == 0;
    for (std::size_t t = 0; t < s.terms.size(); ++t) {
      if (!stage.holds_term(s, t)) continue;  // another stage's term: in no group here
      const bool lookup = s.name == "pos_embed.weight" || (s.name == "embed.weight" && t == 1);
      const std::string key = s.name.starts_with("layers.") ? s.name.substr(0, s.name.find('.', 7))
                              : lookup                      ? "embedding"
                                                            : "head";
      group[key] += (n + 15) / 16 * 16;
    }
  }
  for (const auto& [name, floats] : group)
    f.grad_group_floats = std::max(f.grad_group_floats, floats);
  const std::int64_t C = cfg.context, T = mb * C, d = cfg.d_model, dl = d / tp;
  const std::int64_t fld = gemm_row_stride(cfg.ffn / tp), vl = cfg.padded_vocab() / tp;
  const std::int64_t probs = mb * (cfg.heads / tp) * C * C;
  const bool dropout = cfg.dropout > 0.0f;
  // The residual stream h, y; the positions and sequence ids (gpt.cpp's begin_forward).
  std::int64_t b = kF * 2 * T * d + 4 * T + 8 * mb;
  if (stage.first() && dropout) b += T * d;  // the embedding's dropout mask
  b += (stage.end_layer - stage.first_layer) * layer_bytes(T, d, dl, fld, probs, dropout);
  // The final LayerNorm, the logits and the cross-entropy's per-token statistics.
  if (stage.last()) b += kF * (2 * T * d + T + T * vl + 5 * T);
  f.forward_state_bytes = b;
  // dh, dy, the LayerNorm scratch, dhf; dbig, dsmall, the fused dqkv; P and dP per thread.
  f.backward_scratch_bytes = kF * (4 * T * d + T * fld + T * dl + 3 * T * dl +
                                   2 * C * C * static_cast<std::int64_t>(threads));
  f.gemm_scratch_bytes = gemm_scratch_bytes(cfg, tp, stage, mb, ctx, impl);
  return f;
}

}  // namespace lockstep
