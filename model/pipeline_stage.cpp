#include "model/pipeline_stage.hpp"

#include <algorithm>
#include <cstdlib>

#include "runtime/error.hpp"

namespace lockstep {
namespace {

// The layer of a "layers.{i}.<...>" name, or -1.
std::int64_t layer_of(const std::string& name) {
  static const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

}  // namespace

PipelineStage PipelineStage::of(const ModelConfig& cfg, int count, int index,
                                std::span<const std::int64_t> stage_layers) {
  PipelineStage s;
  s.index = index;
  s.count = count;
  if (stage_layers.empty()) {
    const std::int64_t per = count > 0 ? cfg.layers / count : cfg.layers;
    s.first_layer = per * index;
    s.end_layer = per * (index + 1);
    return s;
  }
  check(static_cast<int>(stage_layers.size()) == count && index >= 0 && index < count,
        "PipelineStage::of: stage " + std::to_string(index) + " of " + std::to_string(count) +
            " with " + std::to_string(stage_layers.size()) + " layer counts",
        "validate parallel.pp_layers first (pipeline_problems)");
  for (int i = 0; i < index; ++i) s.first_layer += stage_layers[static_cast<std::size_t>(i)];
  s.end_layer = s.first_layer + stage_layers[static_cast<std::size_t>(index)];
  return s;
}

bool PipelineStage::holds_term(const ParamSpec& spec, std::size_t term) const {
  const std::int64_t l = layer_of(spec.name);
  if (l >= 0) return l >= first_layer && l < end_layer;
  if (spec.name == "embed.weight")
    return spec.terms.at(term) == "lookup" ? first() : last();  // "head": the LM head's term
  if (spec.name == "pos_embed.weight") return first();
  return last();  // final_ln.*
}

bool PipelineStage::holds(const ParamSpec& spec) const {
  for (std::size_t t = 0; t < spec.terms.size(); ++t)
    if (holds_term(spec, t)) return true;
  return false;
}

bool PipelineStage::owns(const ParamSpec& spec) const {
  if (!holds(spec)) return false;
  if (index == 0 || layer_of(spec.name) >= 0) return true;  // a layer is on one stage only
  // Any other parameter is held by an earlier stage only if the first stage holds it (the
  // embeddings; the middle stages hold layers only).
  const PipelineStage first_stage{0, count, 0, 0};
  return !first_stage.holds(spec);
}

std::vector<std::string> pipeline_problems(const ModelConfig& cfg, std::int64_t stages,
                                           std::span<const std::int64_t> stage_layers) {
  std::vector<std::string> p;
  if (stages < 1) {
    p.push_back("parallel.pp = " + std::to_string(stages) + " must be >= 1");
    return p;
  }
  if (!stage_layers.empty()) {
    std::int64_t sum = 0, smallest = cfg.layers;
    for (const std::int64_t n : stage_layers) sum += n, smallest = std::min(smallest, n);
    if (static_cast<std::int64_t>(stage_layers.size()) != stages)
      p.push_back("parallel.pp_layers lists " + std::to_string(stage_layers.size()) +
                  " stages, but parallel.pp = " + std::to_string(stages) +
                  "; give one layer count per stage");
    else if (smallest < 1)
      p.push_back("parallel.pp_layers gives a stage " + std::to_string(smallest) +
                  " layers; every stage needs at least 1");
    else if (sum != cfg.layers)
      p.push_back("parallel.pp_layers adds up to " + std::to_string(sum) +
                  " layers, but model.layers = " + std::to_string(cfg.layers) +
                  "; the counts must add up to model.layers");
    return p;
  }
  if (cfg.layers % stages != 0) {
    std::string fits;
    for (std::int64_t s = 1; s <= cfg.layers; ++s)
      if (cfg.layers % s == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(s);
    p.push_back("model.layers = " + std::to_string(cfg.layers) + " is not divisible by " +
                "parallel.pp = " + std::to_string(stages) +
                " (equal stages); use parallel.pp one of " + fits +
                ", or list each stage's layers in parallel.pp_layers");
  }
  return p;
}

}  // namespace lockstep
