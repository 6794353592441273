// The GPT parameter table: ONE list that drives every parameter's logical name, logical
// shape, tensor-parallel partition dimension, initialization, weight-decay flag and gradient
// terms. Canonical order (checkpoints, fingerprints, gradient norm, optimizer) = table order.
//
// Order: embed.weight, pos_embed.weight, then per layer i
//   layers.{i}.ln1.weight, .ln1.bias,
//   layers.{i}.attn.q.weight [, .attn.q.bias], .attn.k.weight [, .k.bias], .attn.v.weight
//   [, .v.bias], .attn.proj.weight [, .proj.bias], .ln2.weight, .ln2.bias,
//   .mlp.fc1.weight [, .fc1.bias], .mlp.fc2.weight [, .fc2.bias]
// then final_ln.weight, final_ln.bias (biases in brackets only with ModelConfig::bias).
//
// Partitioning over TP (Megatron): embed.weight [vocab, d] dim 0 (vocab-parallel; the LM head
// is tied to it); q/k/v [d, d] and fc1 [ffn, d] dim 0 (column-parallel: TP rank r owns heads
// [r*heads/tp, (r+1)*heads/tp) and ffn rows [r*ffn/tp, ...)); proj [d, d] and fc2 [d, ffn]
// dim 1 (row-parallel); column-parallel biases dim 0; everything else replicated (-1).
//
// Init (layout-invariant, docs/design.md section 3): element e of parameter i is a pure function
// of (run seed, stream = i, logical row-major index e): normal(0, 0.02) for embeddings and
// weights, normal(0, 0.02/sqrt(2*layers)) for the output projections proj and fc2 (GPT-2 /
// Megatron), ones for LayerNorm weights, zeros for biases. A TP shard fills exactly its
// elements with fill_normal_2d.
//
// Gradient TERMS: every parameter gradient is a canonical sum over the global token axis
// (docs/design.md section 2). A parameter that receives gradient from two places along that axis
// keeps one buffer per place, reduced separately (microbatches by BinaryCounter, ranks by the
// tree allreduce) and combined only after full reduction, in the listed order:
//   embed.weight: terms {"head", "lookup"} -> g = head + lookup
//     head   = dlogits^T . h_final over tokens (the tied LM head, canonical GEMM TN),
//     lookup = masked dense sum over tokens of d(embedding output) into the token's row.
// Every other parameter has the single term {"main"}. combine_grad_terms() does the sum.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "runtime/tensor.hpp"

namespace lockstep {

enum class InitKind { normal, ones, zeros };

struct ParamSpec {
  std::string name;
  Shape shape;             // logical (unsharded) shape
  int partition_dim = -1;  // -1: replicated over TP
  InitKind init = InitKind::zeros;
  float init_std = 0.0f;      // for InitKind::normal (mean 0)
  bool weight_decay = false;  // 2-D weights (incl. embeddings) only
  std::vector<std::string> terms{"main"};

  // This TP rank's shard descriptor.
  ShardDesc shard(int tp, int tp_rank) const;
};

class ParamTable {
 public:
  static ParamTable build(const ModelConfig& cfg);
  const std::vector<ParamSpec>& entries() const { return entries_; }
  std::size_t size() const { return entries_.size(); }
  const ParamSpec& operator[](std::size_t i) const { return entries_[i]; }
  // Index of `name`; throws a lockstep::Error naming it if absent.
  std::size_t index_of(const std::string& name) const;
  bool contains(const std::string& name) const;
  // Total logical element count.
  std::int64_t numel() const;

 private:
  std::vector<ParamSpec> entries_;
};

// Fills `local` (a shard of spec with the given ShardDesc) with its init values.
void init_param(const ParamSpec& spec, std::uint64_t stream, std::uint64_t seed, Tensor& local);

// out[e] = ((terms[0][e] + terms[1][e]) + terms[2][e]) ...: combines fully reduced term
// buffers in table order (one term: a copy).
void combine_grad_terms(std::span<const float* const> terms, std::int64_t n, float* out);

}  // namespace lockstep
