#include "model/memory_footprint.hpp"

#include <algorithm>
#include <map>
#include <string>

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
}  // namespace

StageFootprint stage_footprint(const ModelConfig& cfg, int tp, const PipelineStage& stage,
                               std::int64_t mb, int threads) {
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
  return f;
}

}  // namespace lockstep
