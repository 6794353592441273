// The GPT decoder (GPT-2 / Megatron style) with tensor parallelism; forward and backward are
// written by hand so that loss and gradients are bitwise independent of TP size, microbatch
// size and thread count in invariant mode (DESIGN.md sections 2 and 3).
//
// Model: byte-level vocab, learned positional embedding, `layers` pre-LayerNorm blocks
//   h += dropout(proj(attn(LN1(h))));  h += dropout(fc2(gelu_tanh(fc1(LN2(h)))));
// final LN, LM head tied to the token embedding, causal multi-head attention with
// head_dim = d_model/heads and scale 1/sqrt(head_dim), dropout also on the attention
// probabilities and on the embedding output (x0 = dropout(tok_emb + pos_emb)).
// Parameters: model/param_table.hpp (names, shapes, TP partition, init, terms).
//
// Numerical definitions (invariant mode; every GEMM canonical, B = ctx.reduce_block):
//  - LayerNorm / softmax / cross-entropy reductions over features, keys and vocab are csums
//    (model/ops.hpp, parallel/vocab_parallel.hpp).
//  - Attention per (sequence, head): S = (Q K^T) * scale by the canonical GEMM over head_dim;
//    for query i, keys j <= i: m = max_j S[i,j], e = exp(S - m), P = e / csum_{j<=i}(e).
//    Masked positions (j > i) have P exactly +0.0 and the P.V GEMM runs over ALL keys (the
//    masked terms contribute +-0.0; a csum over the full row with -0.0 at masked positions
//    equals the prefix csum, so the definition does not depend on where the mask ends).
//    Backward: dP = dO V^T; dot_i = cdot over j <= i of P[i,j] dP[i,j];
//    dS[i,j] = (P[i,j] * (dP[i,j] - dot_i)) * scale for j <= i, +0.0 for j > i;
//    dQ = dS K, dK = dS^T Q, dV = P^T dO (canonical GEMMs; keys/queries are never split).
//    Implementation: the six attention GEMMs run on causal blocks only (CausalGemms in
//    gpt.cpp), with the bits of the full GEMMs above (proof there; rows whose result has a
//    zero, and operands with Inf/NaN, are recomputed with the full K). The softmax rows are
//    model/attn_rows.hpp.
//  - Column-parallel layers that read the same input (q, k, v) return partial input
//    gradients that are TP-reduced separately (one allreduce of the 3 stacked buffers) and
//    then combined as (dq_part + dk_part) + dv_part.
//  - Residual stream: h_out = h_in + branch; backward dh = dh + d(branch input).
//  - Loss: per token (log(S) + max) - logit[label]; forward returns csum over the
//    microbatch's tokens (a subtree: the caller merges microbatches with BinaryCounter
//    (weight = tokens/B blocks) and DP ranks with the tree allreduce, then divides by the
//    global token count). The backward seeds dlogits per token with loss_scale.
//
// GRADIENT CONTRACT: forward_backward OVERWRITES grads() with this microbatch's subtrees of
// the canonical sums over the global token axis (never accumulates across calls). embed.weight
// has two term buffers, {"head", "lookup"}, which must be reduced separately and combined only
// after full reduction, head + lookup (combine_grad_terms). Every other parameter has one
// term. Local grads are shards with the parameter's ShardDesc; replicated parameters have
// identical grads on every TP rank.
//
// Dropout (when cfg.dropout > 0 and train): Philox keyed by (seed, dropout_stream(step,
// layer code, site)) with counter = logical index built from (global sequence index,
// position, logical feature); for attention probabilities the index is
// ((seq * heads + global head) * context + query) * context + key (drawn for keys <= query
// only; masked probabilities are +0.0 whatever the draw). So every TP shard and
// microbatch draws exactly the single-process bits. Inverted dropout: kept * 1/(1-p).
//
// deterministic mode: GemmImpl::chain and vendor MPI_Allreduce for TP reductions (G1/G2);
// fast: fastest_gemm_impl() + vendor. The csums stay canonical in every mode (they are cheap).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.hpp"
#include "model/param_table.hpp"
#include "parallel/tp_layers.hpp"
#include "runtime/determinism.hpp"
#include "runtime/grid.hpp"
#include "runtime/isa.hpp"
#include "runtime/tensor.hpp"

namespace lockstep {

// grads[i][k]: term k (named table()[i].terms[k]) of parameter i, local shard shape.
using GradTerms = std::vector<std::vector<Tensor>>;

class Gpt {
 public:
  // grid == nullptr: a single process (TP=1) without MPI. Otherwise TP = grid->tp_size(),
  // and every TP rank of a group must call forward_backward with the same arguments.
  Gpt(const ModelConfig& cfg, const Grid* grid, Determinism mode, KernelCtx ctx);
  Gpt(const ModelConfig& cfg, const Grid& grid, Determinism mode, KernelCtx ctx)
      : Gpt(cfg, &grid, mode, ctx) {}
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  const TpContext& tp() const { return tp_; }
  std::vector<Tensor>& params() { return params_; }  // local shards, table order
  const std::vector<Tensor>& params() const { return params_; }
  GradTerms& grads() { return grads_; }
  const GradTerms& grads() const { return grads_; }

  // Initializes every parameter (layout-invariant Philox init) and sets the dropout seed.
  void init(std::uint64_t seed);
  // The dropout seed without touching parameters (e.g. after loading a checkpoint).
  void set_seed(std::uint64_t seed) { seed_ = seed; }
  std::uint64_t seed() const { return seed_; }

  // tokens, labels: [mb, context] int32 row-major; seq_ids: the global sequence indices of
  // the mb sequences (dropout coordinates); step: the training step (dropout stream).
  // Overwrites grads() with this microbatch's subtrees; returns the csum over its
  // mb*context tokens of the per-token losses.
  float forward_backward(const std::int32_t* tokens, const std::int32_t* labels,
                         const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                         float loss_scale);
  // Forward only: with train = true the same bits as forward_backward's loss (same dropout);
  // train = false disables dropout (evaluation).
  float forward_loss(const std::int32_t* tokens, const std::int32_t* labels,
                     const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                     bool train = true);

  // Per-token losses of the last forward ([mb * context]).
  const std::vector<float>& token_losses() const;

 private:
  struct Impl;
  float forward(const std::int32_t* tokens, const std::int32_t* labels, const std::int64_t* seq_ids,
                std::int64_t mb, std::int64_t step, bool train);
  void backward(const std::int32_t* tokens, const std::int32_t* labels, float loss_scale);

  ModelConfig cfg_;
  ParamTable table_;
  TpContext tp_;
  std::uint64_t seed_ = 0;
  std::vector<Tensor> params_;
  GradTerms grads_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
