#include "model/pipeline_stage.hpp"

#include <cstdlib>

namespace lockstep {
namespace {

// The layer of a "layers.{i}.<...>" name, or -1.
std::int64_t layer_of(const std::string& name) {
  static const std::string prefix = "layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::strtoll(name.c_str() + prefix.size(), nullptr, 10);
}

}  // namespace

PipelineStage PipelineStage::of(const ModelConfig& cfg, int count, int index) {
  PipelineStage s;
  s.index = index;
  s.count = count;
  const std::int64_t per = count > 0 ? cfg.layers / count : cfg.layers;
  s.first_layer = per * index;
  s.end_layer = per * (index + 1);
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
  const std::int64_t per = end_layer - first_layer;
  for (int s = 0; s < index; ++s) {
    const PipelineStage earlier{s, count, per * s, per * (s + 1)};
    if (earlier.holds(spec)) return false;
  }
  return true;
}

std::vector<std::string> pipeline_problems(const ModelConfig& cfg, std::int64_t stages) {
  std::vector<std::string> p;
  if (stages < 1) {
    p.push_back("parallel.pp = " + std::to_string(stages) + " must be >= 1");
    return p;
  }
  if (cfg.layers % stages != 0) {
    std::string fits;
    for (std::int64_t s = 1; s <= cfg.layers; ++s)
      if (cfg.layers % s == 0) fits += (fits.empty() ? "" : ", ") + std::to_string(s);
    p.push_back("model.layers = " + std::to_string(cfg.layers) + " is not divisible by " +
                "parallel.pp = " + std::to_string(stages) +
                " (stages hold equal layer counts); use parallel.pp one of " + fits);
  }
  return p;
}

}  // namespace lockstep
