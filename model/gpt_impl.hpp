// The private parts of the GPT model shared by model/gpt*.cpp: the buffers of one forward /
// backward (State, the body of Gpt::Impl), the view of the model a pass's block functions read
// (Pass), and those block functions, which Gpt::forward and Gpt::backward call in order:
//   forward:  embedding_forward, per layer attention_forward, mlp_forward; lm_head_forward
//   backward: lm_head_backward, per layer (last first) mlp_backward, attention_backward;
//             embedding_backward
// (model/gpt_embedding.cpp, gpt_attention.cpp, gpt_mlp.cpp, gpt_head.cpp; the residual
// stream's LayerNorms and branch dropouts shared by the blocks: gpt_residual.cpp).
// Determinism contract (docs/design.md sections 2 and 3): each block runs the ops of the
// definition in model/gpt.hpp, in the order of op_names() (which is also the order of the
// op-trace records); every reduction is canonical, threads split only independent rows or
// (sequence, head) tasks, and dropout masks are functions of (seed, step, logical
// coordinates). So a block's outputs depend on its inputs alone, never on TP size,
// microbatch size or thread count (invariant mode).
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/gpt.hpp"
#include "model/gpt_op_names.hpp"
#include "parallel/tp_layers.hpp"
#include "runtime/aligned_vector.hpp"
#include "runtime/isa.hpp"
#include "runtime/op_observer.hpp"
#include "runtime/tensor.hpp"

namespace lockstep::gpt_detail {

// 64-byte aligned: whole-line vector loads, and the GEMM reads A in place (gemm_kernel.hpp).
using Buf = AlignedVector<float>;
using Mask = std::vector<std::uint8_t>;

inline void ensure(Buf& b, std::int64_t n) {
  if (static_cast<std::int64_t>(b.size()) != n) b.assign(static_cast<std::size_t>(n), 0.0f);
}
inline void ensure(Mask& b, std::int64_t n) {
  if (static_cast<std::int64_t>(b.size()) != n) b.assign(static_cast<std::size_t>(n), 0);
}
inline std::span<float> sp(Buf& b) {
  return std::span<float>(b.data(), b.size());
}
inline std::span<const float> cs(const float* p, std::int64_t n) {
  return std::span<const float>(p, static_cast<std::size_t>(n));
}
inline std::span<const float> cs(const Buf& b) {
  return std::span<const float>(b.data(), b.size());
}
// Token ids and labels enter the op trace as their bytes (the trace hashes bytes).
inline std::span<const float> id_bytes(const std::int32_t* p, std::int64_t n) {
  static_assert(sizeof(float) == sizeof(std::int32_t));
  return std::span<const float>(reinterpret_cast<const float*>(p), static_cast<std::size_t>(n));
}

// A layer's parameter indices in the table (-1: absent, the biases without ModelConfig::bias).
struct LayerIdx {
  int ln1w, ln1b, q, qb, k, kb, v, vb, proj, projb, ln2w, ln2b, fc1, fc1b, fc2, fc2b;
};

// A layer's activations, kept from forward to backward.
struct LayerActs {
  Buf xhat1, rstd1, a1, q, k, v, probs, probs_d, o, xhat2, rstd2, a2, u, g;
  Mask keep_attn, keep_proj, keep_fc2;
  // probs [mb, Hl, C, C] is kept for the backward only with dropout or the op trace on;
  // otherwise the backward recomputes each head's probabilities (same ops on the same q, k:
  // the same bits) from an L2-sized per-thread buffer, which saves writing and re-reading
  // mb * Hl * C * C floats per layer.
  bool probs_stored = false;
  // q, k, v as one [T, 3 dl] buffer (parallel/fused_linear3.hpp: one GEMM for the three
  // projections) instead of three [T, dl] ones; off under the op trace and debug.perturb of a
  // q/k/v op, which address the projections one by one.
  bool qkv_fused = false;
  Buf qkv;
  // The training forward (op trace off) overwrites u with gelu'(u) in the GELU pass (both come
  // from one evaluation, math::gelu_tanh_and_grad), so the backward multiplies instead of
  // re-evaluating; u itself is read by nothing else.
  bool u_holds_grad = false;
};

// One microbatch's forward state: its sizes and switches, and every buffer its backward reads
// (activations, saved statistics, logits). A pipeline stage that holds several microbatches in
// flight keeps one per activation slot (Gpt::set_slots) and swaps it in for that microbatch's
// passes.
struct ForwardState {
  std::int64_t T = 0, mb = 0, step = 0;
  // Row stride of every layer's u, g (and the backward's dbig) [T, fl], set by forward:
  // runtime/gemm.hpp's gemm_row_stride (1088 for fl 1024, whose 4 KiB rows would all fall into
  // the same L1 sets), so that fc2's forward and fc1's input-gradient GEMM read them in place
  // instead of copying them; fl itself under the op trace, which hashes these buffers whole.
  // Only speed depends on it.
  std::int64_t ffn_ld = 0;
  bool train = false, dropout_on = false;
  std::vector<std::int32_t> pos_of;
  std::vector<std::int64_t> seq_ids;
  Mask keep0;
  Buf h, y, xhatf, rstdf, hf, logits, cmax, csumexp, ce_scratch, loss_tok;
  std::vector<LayerActs> acts;
  // The residual add h += y of a branch is done by the LayerNorm that reads h next, in the same
  // pass (residual_layernorm_forward, same bits); pending_res: the op id of that residual add
  // (recorded right after it, before the LayerNorm), or -1 when none is pending.
  int pending_res = -1;

  // The bytes of every buffer above (model/memory_footprint.cpp counts the same buffers from
  // the config: a new buffer goes into both).
  std::int64_t bytes() const {
    auto n = [](const auto& v) { return static_cast<std::int64_t>(v.size() * sizeof(v[0])); };
    std::int64_t b = n(pos_of) + n(seq_ids) + n(keep0);
    for (const Buf* x :
         {&h, &y, &xhatf, &rstdf, &hf, &logits, &cmax, &csumexp, &ce_scratch, &loss_tok})
      b += n(*x);
    for (const LayerActs& a : acts) {
      for (const Buf* x : {&a.xhat1, &a.rstd1, &a.a1, &a.q, &a.k, &a.v, &a.probs, &a.probs_d, &a.o,
                           &a.xhat2, &a.rstd2, &a.a2, &a.u, &a.g, &a.qkv})
        b += n(*x);
      for (const Mask* x : {&a.keep_attn, &a.keep_proj, &a.keep_fc2}) b += n(*x);
    }
    return b;
  }
};

// Gpt::Impl: parameter indices, the forward's state and activations (ForwardState), the
// backward's scratch and the op trace's tables.
struct State : ForwardState {
  std::vector<LayerIdx> li;
  int embed = 0, pos = 1, lnfw = 0, lnfb = 0;
  // backward scratch
  Buf dh, dy, dbig, dsmall, qkv_part, dq, dk, dv, dhf, ln_scratch, attn_scratch;
  Buf dqkv, lin3_scratch;  // the fused q/k/v path's [T, 3 dl] gradient and linear3 scratch
  // op trace (gpt.hpp): names and perturb flags by op id (op_id: global ops, then kLayerOps
  // per layer); rec: the observer records this forward/backward; copies of in-place inputs.
  OpObserver* obs = nullptr;
  std::vector<std::string> op_name;
  std::vector<char> op_perturb;
  bool rec = false;
  Buf rec_a, rec_b, rec_scores;

  bool pt(int id) const { return !op_perturb.empty() && op_perturb[id]; }
  void record(int id, std::initializer_list<std::span<const float>> in,
              std::span<const float> out) const {
    obs->record(op_name[id], std::span<const std::span<const float>>(in.begin(), in.size()), out);
  }
  // rec_x = copy of b (an in-place op's input), only while recording.
  void save(Buf& rec_x, const float* b, std::int64_t n) {
    ensure(rec_x, n);
    std::copy_n(b, n, rec_x.data());
  }
};

// One forward or backward pass: the model's parameters, gradients, TP context, the state and
// the dimensions of the microbatch (State::T, mb, dropout_on set by the forward).
struct Pass {
  Pass(State& state, const ModelConfig& config, const TpContext& tpc,
       std::vector<Tensor>& parameters, GradTerms& gradients, std::uint64_t dropout_seed);

  State& m;
  const ModelConfig& cfg;
  const TpContext& tp;
  const KernelCtx& ctx;  // feature-axis reductions (flat)
  const KernelCtx& tok;  // token-axis reductions: weight and bias gradients, the loss sum
  std::vector<Tensor>& params;
  GradTerms& grads;
  std::uint64_t seed;
  // context, d_model, tokens, sequences; local (this TP rank's) d_model, ffn, vocab; heads,
  // local heads, head_dim, first global head of this rank
  std::int64_t C, d, T, mb, dl, fl, vl, H, Hl, hd, h0;
  float p, rs, scale;  // dropout, its inverted scale (1 without dropout), 1/sqrt(head_dim)
  int B;               // ctx.reduce_block

  // Parameter i's data / span (nullptr / empty for i < 0).
  float* P(int i) const { return i < 0 ? nullptr : params[i].data<float>(); }
  std::span<const float> pp(int i) const {
    return i < 0 ? std::span<const float>() : cs(params[i].data<float>(), params[i].numel());
  }
  // Gradient term `term` of parameter i.
  float* G(int i, int term = 0) const { return i < 0 ? nullptr : grads[i][term].data<float>(); }
  std::span<const float> gg(int i, int term = 0) const {
    return i < 0 ? std::span<const float>() : cs(G(i, term), grads[i][term].numel());
  }
  // Records a linear layer's weight and bias gradients (dy: its output gradient, x: input).
  void record_wb(std::int64_t l, int wop, int bop, const float* dy, std::int64_t ny, const float* x,
                 std::int64_t nx, int w, int b) const {
    m.record(op_id(l, wop), {cs(dy, ny), cs(x, nx)}, gg(w));
    if (b >= 0) m.record(op_id(l, bop), {cs(dy, ny)}, gg(b));
  }
};

// ---- the blocks (forward and backward call them in this order) ----------------------------
// x0 = dropout(tok_emb + pos_emb) into m.h (gpt_embedding.cpp).
void embedding_forward(const Pass& ps, const std::int32_t* tokens);
// Layer l's attention branch: LN1, q/k/v, the attention products, softmax, probability
// dropout, proj, branch dropout; its residual add is left pending (gpt_attention.cpp).
void attention_forward(const Pass& ps, std::int64_t l);
// Layer l's MLP branch: LN2 (with the pending residual), fc1, GELU, fc2, branch dropout; its
// residual add is left pending (gpt_mlp.cpp).
void mlp_forward(const Pass& ps, std::int64_t l);
// Final LN (with the pending residual), tied LM head, vocab-parallel cross-entropy; returns the
// csum of the per-token losses (gpt_head.cpp).
float lm_head_forward(const Pass& ps, const std::int32_t* labels);
// Cross-entropy, head and final-LN backward: m.dh = d(residual stream) (gpt_head.cpp).
void lm_head_backward(const Pass& ps, const std::int32_t* labels, float loss_scale);
// Layer l's MLP branch backward; m.dh += d(LN2 input) (gpt_mlp.cpp).
void mlp_backward(const Pass& ps, std::int64_t l);
// Layer l's attention branch backward; m.dh += d(LN1 input) (gpt_attention.cpp).
void attention_backward(const Pass& ps, std::int64_t l);
// Position and token-lookup gradients from m.dh (gpt_embedding.cpp).
void embedding_backward(const Pass& ps, const std::int32_t* tokens);

// ---- the residual stream (gpt_residual.cpp) -----------------------------------------------
// out = LN(h) (xhat, rstd kept), doing the pending residual add h += y first in the same pass
// and recording it.
void stream_layernorm(const Pass& ps, const float* w, const float* b, Buf& xhat, Buf& rstd,
                      Buf& out);
// The end of layer l's branch at dropout `site`: y = dropout(y) (keep stored for backward),
// the add h += y left pending for the next stream_layernorm, recorded under op `rec_id`.
void branch_residual(const Pass& ps, std::int64_t l, int site, Mask& keep, int rec_id);
// The end of a pipeline stage that is not the last: the pending residual add h += y done on
// its own (the bits residual_layernorm_forward gives h) and recorded, so m.h is the residual
// stream the next stage's first LayerNorm reads.
void finish_stream(const Pass& ps);
// The branch output's gradient: dropout'(m.dh) into m.dy with dropout on (returns m.dy),
// else m.dh itself.
const float* branch_dropout_backward(const Pass& ps, const Mask& keep);
// A layer's LayerNorm backward from m.dy, accumulated into m.dh, with its records under
// layer l's ops bwd_op, bwd_op + 1 (wgrad), bwd_op + 2 (bgrad).
void layer_ln_backward(const Pass& ps, std::int64_t l, const Buf& xhat, const Buf& rstd, int w,
                       int b, int bwd_op);

}  // namespace lockstep::gpt_detail
