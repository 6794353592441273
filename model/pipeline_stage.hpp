// One pipeline stage's share of the GPT (docs/design.md section 8): contiguous layer ranges
// (equal, or as parallel.pp_layers lists them), the embedding (token + position) on the first
// stage, the final LayerNorm, LM head and loss on the last. Which parameters and gradient terms a
// stage computes follows from the parameter table's names: "layers.{i}.*" by layer,
// pos_embed.weight on the first stage, final_ln.* on the last, and the tied embed.weight on both:
// its "lookup" term on the first, its "head" term on the last (model/param_table.hpp). The first
// stage holding a parameter owns it (counts it in fingerprints and the gradient norm, writes it to
// checkpoints); the last stage's copy of embed.weight is a replica that receives the same update.
// Determinism contract: pure bookkeeping; a layer's arithmetic never depends on its stage.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/param_table.hpp"

namespace lockstep {

struct PipelineStage {
  int index = 0, count = 1;
  std::int64_t first_layer = 0, end_layer = 0;  // this stage's layers [first_layer, end_layer)

  // Stage `index` of `count` stages of cfg.layers layers: stage_layers[i] layers for stage i
  // when given, else equal ranges (pipeline_problems checks either split).
  static PipelineStage of(const ModelConfig& cfg, int count, int index,
                          std::span<const std::int64_t> stage_layers = {});

  bool first() const { return index == 0; }
  bool last() const { return index == count - 1; }
  // The stage computes term `term` of the parameter / some term of it.
  bool holds_term(const ParamSpec& spec, std::size_t term) const;
  bool holds(const ParamSpec& spec) const;
  // The stage owns the parameter: the first stage that holds it.
  bool owns(const ParamSpec& spec) const;
};

// Problems of splitting cfg's layers into `stages` stages, equally or by stage_layers (one
// count per stage, each >= 1, summing to cfg.layers); empty when it can be split.
std::vector<std::string> pipeline_problems(const ModelConfig& cfg, std::int64_t stages,
                                           std::span<const std::int64_t> stage_layers = {});

}  // namespace lockstep
