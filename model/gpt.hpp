// The GPT decoder (GPT-2 / Megatron style) with tensor parallelism; forward and backward are
// written by hand so that loss and gradients are bitwise independent of TP size, microbatch
// size and thread count in invariant mode (docs/design.md sections 2 and 3).
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
//    Implementation: the six attention GEMMs run on causal blocks only (CausalGemms,
//    model/gpt_causal_gemms.hpp), with the bits of the full GEMMs above (proof there; rows
//    whose result has a zero, and operands with Inf/NaN, are recomputed with the full K). The
//    softmax rows are model/kernels/attn_rows.hpp.
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
// fast: fastest_gemm_impl(isa) + vendor. The csums stay canonical in every mode (they are cheap).
//
// Op trace and debug.perturb (set_observer, runtime/op_observer.hpp): while the observer is
// recording, every op of forward and backward records itself under a run-independent name
// (op_names() lists them in record order): "embed.lookup.fwd" (token + position embedding +
// dropout), per layer "layers.{i}." + ln1.fwd, attn.{q,k,v}.fwd, attn.scores.fwd (Q K^T),
// attn.softmax.fwd, attn.dropout.fwd (dropout > 0), attn.pv.fwd, attn.proj.fwd,
// attn.residual.fwd (h + dropout(proj)), ln2.fwd, mlp.fc1.fwd, mlp.gelu.fwd, mlp.fc2.fwd,
// mlp.residual.fwd; then final_ln.fwd, head.fwd (logits), loss.fwd (per-token CE),
// loss.sum.fwd (the microbatch's loss csum); backward: loss.bwd, head.wgrad, head.dgrad,
// final_ln.{bwd,wgrad,bgrad}, per layer (last first) mlp.fc2.{wgrad,bgrad,dgrad},
// mlp.gelu.bwd, mlp.fc1.{wgrad,bgrad,dgrad}, ln2.{bwd,wgrad,bgrad},
// attn.proj.{wgrad,bgrad,dgrad}, attn.{dv,dq,dk}.bwd, attn.{q,k,v}.{wgrad,bgrad,dgrad},
// ln1.{bwd,wgrad,bgrad}; then pos_embed.wgrad and embed.lookup.wgrad (bgrad only with
// biases). ".dgrad" is an input-gradient GEMM (recorded after its TP reduction), ".wgrad" a
// weight-gradient GEMM (this microbatch's subtree). Inputs are every float buffer the op reads
// (parameters, activations, saved statistics; token ids and labels as their bytes; dropout
// masks are not inputs: they are functions of (seed, step, coordinates)). In-place ops record
// a copy of their input taken before they run. Recording never changes a result; when the
// observer is not recording each op costs one branch.
// debug.perturb=NAME (observer->perturb(NAME)): the GEMM of that op runs as the canonical GEMM
// with block TpContext::perturbed_block() = max(1, B/4): the same products summed in another
// order over K (another tree whenever K > B/4). Perturbable ops: every
// linear .fwd/.wgrad/.dgrad (attn.q/k/v/proj, mlp.fc1/fc2, head) and attn.scores.fwd,
// attn.pv.fwd; op_names() marks them (plus "dp.reduce", parallel/dp_grad.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/param_table.hpp"
#include "model/pipeline_stage.hpp"
#include "parallel/tp_layers.hpp"
#include "runtime/determinism.hpp"
#include "runtime/grid.hpp"
#include "runtime/isa.hpp"
#include "runtime/op_observer.hpp"
#include "runtime/tensor.hpp"

namespace lockstep {

struct OpName {
  std::string name;
  bool perturbable = false;  // debug.perturb can act on it
};
// Every op name a training step records with this model config, in record order of one
// microbatch (forward, then backward), followed by "dp.reduce" (parallel/dp_grad.hpp). The
// optimizer's ops are the trainer's.
std::vector<OpName> op_names(const ModelConfig& cfg);
// Throws lockstep::Error unless `name` is a perturbable op of this config (the message names
// the nearest op name and how to list them).
void check_perturb_op(const ModelConfig& cfg, const std::string& name);

// grads[i][k]: term k (named table()[i].terms[k]) of parameter i, local shard shape.
using GradTerms = std::vector<std::vector<Tensor>>;
// One gradient term: its parameter's index in the table and the term's index there.
struct GradTermId {
  int param = 0, term = 0;
};

class Gpt {
 public:
  // grid == nullptr: a single process (TP=1, PP=1) without MPI. Otherwise TP =
  // grid->tp_size(), and every TP rank of a group must call forward_backward with the same
  // arguments; with grid->pp_size() > 1 the model is pipeline stage grid->pp_rank() and runs
  // through forward_stage / backward_stage, its layers those of PipelineStage::of(cfg,
  // pp_size, pp_rank, stage_layers) (empty: equal stages).
  Gpt(const ModelConfig& cfg, const Grid* grid, Determinism mode, KernelCtx ctx,
      std::span<const std::int64_t> stage_layers = {});
  Gpt(const ModelConfig& cfg, const Grid& grid, Determinism mode, KernelCtx ctx,
      std::span<const std::int64_t> stage_layers = {})
      : Gpt(cfg, &grid, mode, ctx, stage_layers) {}
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const ModelConfig& config() const { return cfg_; }
  const ParamTable& table() const { return table_; }
  const TpContext& tp() const { return tp_; }
  const PipelineStage& stage() const { return stage_; }
  // Local shards, table order; a parameter of another pipeline stage is an empty tensor.
  std::vector<Tensor>& params() { return params_; }
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
  std::span<const float> token_losses() const;

  // ---- pipeline parallelism (docs/design.md section 8) -----------------------------------
  // A stage holds the forward state of up to `n` microbatches at once (activation slots).
  void set_slots(std::int64_t n);
  // The bytes held by the forward state of every slot (activations, masks, statistics,
  // logits: what the backward reads), as allocated so far; after a training step
  // model/memory_footprint.hpp's forward_state_bytes times the slots in use.
  std::int64_t forward_state_bytes() const;
  // This stage's forward of one microbatch into activation slot `slot`: the embedding on the
  // first stage (tokens), else h_in [mb * context, d_model] (the previous stage's output);
  // then the stage's layers; on the last stage the head and the loss (returned: the csum of
  // the microbatch's per-token losses, as forward_backward's), else 0.
  float forward_stage(std::int64_t slot, const std::int32_t* tokens, const std::int32_t* labels,
                      const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                      const float* h_in);
  // The residual stream after the stage's last layer ([mb * context, d_model]) of the slot's
  // last forward_stage (not the last stage).
  std::span<const float> stage_output(std::int64_t slot) const;
  // The backward of the slot's microbatch: from its loss on the last stage, else from dh_in
  // (the next stage's input gradient); through the stage's layers; the embedding's gradients
  // on the first stage. Overwrites the stage's gradients (the GRADIENT CONTRACT above; terms
  // and parameters of other stages stay untouched).
  void backward_stage(std::int64_t slot, const std::int32_t* tokens, const std::int32_t* labels,
                      float loss_scale, const float* dh_in);
  // The gradient of the stage's input after backward_stage ([mb * context, d_model]; not the
  // first stage): what the previous stage's backward starts from.
  std::span<const float> stage_input_grad() const;

  // The groups of gradient terms a backward (forward_backward, backward_stage) finishes one
  // after another, in this order: the LM head's (embed.weight's "head" term, final_ln), each
  // layer's (the last layer first), the embedding's (pos_embed, embed.weight's "lookup"); on a
  // pipeline stage those it computes. Every term the stage computes is in one group.
  std::vector<std::vector<GradTermId>> grad_groups() const;
  // Called by the backward with g right after group g's terms are final for this microbatch;
  // the pass writes none of them again (the training loop merges a group's terms away while
  // the backward goes on, launch/train/grad_sync.hpp).
  void set_grads_ready(std::function<void(int group)> hook) { grads_ready_ = std::move(hook); }

  // The op trace / debug.perturb hook (see the header comment); nullptr: none. Not owned;
  // it must outlive every later forward/backward. Which ops are perturbed is read here.
  void set_observer(OpObserver* observer);

 private:
  struct Impl;
  float forward(const std::int32_t* tokens, const std::int32_t* labels, const std::int64_t* seq_ids,
                std::int64_t mb, std::int64_t step, bool train);
  void backward(const std::int32_t* tokens, const std::int32_t* labels, float loss_scale);

  void swap_slot(std::int64_t slot);  // exchanges the current forward state with the slot's

  ModelConfig cfg_;
  ParamTable table_;
  TpContext tp_;
  PipelineStage stage_;
  std::uint64_t seed_ = 0;
  std::vector<Tensor> params_;
  Tensor grad_block_;  // the gradient terms' own storage (views into it), see the constructor
  GradTerms grads_;
  std::function<void(int)> grads_ready_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
