#include "model/param_table.hpp"

#include <cmath>

#include "runtime/error.hpp"
#include "runtime/random.hpp"

namespace lockstep {

ShardDesc ParamSpec::shard(int tp, int tp_rank) const {
  if (partition_dim < 0) return ShardDesc::whole(shape);
  return ShardDesc::split(shape, partition_dim, tp, tp_rank);
}

ParamTable ParamTable::build(const ModelConfig& c) {
  validate_model_config(c, 1);
  ParamTable t;
  const std::int64_t d = c.d_model;
  const float std0 = 0.02f;
  const float std_out = 0.02f / std::sqrt(2.0f * static_cast<float>(c.layers));
  auto add = [&](std::string name, Shape shape, int pdim, InitKind init, float sd,
                 std::vector<std::string> terms = {"main"}) {
    ParamSpec p;
    p.name = std::move(name);
    p.weight_decay = shape.size() == 2;
    p.shape = std::move(shape);
    p.partition_dim = pdim;
    p.init = init;
    p.init_std = sd;
    p.terms = std::move(terms);
    t.entries_.push_back(std::move(p));
  };
  add("embed.weight", {c.padded_vocab(), d}, 0, InitKind::normal, std0, {"head", "lookup"});
  add("pos_embed.weight", {c.context, d}, -1, InitKind::normal, std0);
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string L = "layers." + std::to_string(i) + ".";
    add(L + "ln1.weight", {d}, -1, InitKind::ones, 0);
    add(L + "ln1.bias", {d}, -1, InitKind::zeros, 0);
    for (const char* m : {"q", "k", "v"}) {
      add(L + "attn." + m + ".weight", {d, d}, 0, InitKind::normal, std0);
      if (c.bias) add(L + "attn." + m + ".bias", {d}, 0, InitKind::zeros, 0);
    }
    add(L + "attn.proj.weight", {d, d}, 1, InitKind::normal, std_out);
    if (c.bias) add(L + "attn.proj.bias", {d}, -1, InitKind::zeros, 0);
    add(L + "ln2.weight", {d}, -1, InitKind::ones, 0);
    add(L + "ln2.bias", {d}, -1, InitKind::zeros, 0);
    add(L + "mlp.fc1.weight", {c.ffn, d}, 0, InitKind::normal, std0);
    if (c.bias) add(L + "mlp.fc1.bias", {c.ffn}, 0, InitKind::zeros, 0);
    add(L + "mlp.fc2.weight", {d, c.ffn}, 1, InitKind::normal, std_out);
    if (c.bias) add(L + "mlp.fc2.bias", {d}, -1, InitKind::zeros, 0);
  }
  add("final_ln.weight", {d}, -1, InitKind::ones, 0);
  add("final_ln.bias", {d}, -1, InitKind::zeros, 0);
  return t;
}

std::size_t ParamTable::index_of(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return i;
  fail("parameter '" + name + "' is not in the GPT parameter table",
       "names are logical, e.g. layers.0.attn.q.weight");
}

bool ParamTable::contains(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return true;
  return false;
}

std::int64_t ParamTable::numel() const {
  std::int64_t n = 0;
  for (const auto& e : entries_) n += shape_numel(e.shape);
  return n;
}

void init_param(const ParamSpec& spec, std::uint64_t stream, std::uint64_t seed, Tensor& local) {
  float* p = local.data<float>();
  const std::int64_t n = local.numel();
  switch (spec.init) {
    case InitKind::ones:
      for (std::int64_t i = 0; i < n; ++i) p[i] = 1.0f;
      return;
    case InitKind::zeros:
      for (std::int64_t i = 0; i < n; ++i) p[i] = 0.0f;
      return;
    case InitKind::normal: {
      const ShardDesc& sd = local.shard();
      const Shape& g = sd.global_shape;
      check(g == spec.shape,
            "init_param: tensor " + local.describe() + " has no shard descriptor of " + spec.name);
      if (g.size() == 1) {
        fill_normal_2d(seed, stream, g[0], 0, sd.global_offset[0], 1, n, p, n, 0.0f, spec.init_std);
      } else {
        const Shape ls = sd.local_shape();
        fill_normal_2d(seed, stream, g[1], sd.global_offset[0], sd.global_offset[1], ls[0], ls[1],
                       p, ls[1], 0.0f, spec.init_std);
      }
      return;
    }
  }
}

void combine_grad_terms(std::span<const float* const> terms, std::int64_t n, float* out) {
  check(!terms.empty(), "combine_grad_terms: no terms");
  for (std::int64_t e = 0; e < n; ++e) {
    float acc = terms[0][e];
    for (std::size_t k = 1; k < terms.size(); ++k) acc = acc + terms[k][e];
    out[e] = acc;
  }
}

}  // namespace lockstep
