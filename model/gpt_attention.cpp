// The GPT attention block (model/gpt_impl.hpp), forward and backward: LN1, the q/k/v
// projections (column-parallel: this rank's heads), the causal attention products with
// softmax and probability dropout per (sequence, local head), the row-parallel proj and the
// branch dropout at the residual add.
// Determinism contract (docs/design.md sections 2 and 3): the attention of gpt.hpp's
// definition, its six GEMMs on causal blocks with the full GEMMs' bits (CausalGemms,
// model/gpt_causal_gemms.hpp) and the softmax rows of model/kernels/attn_rows.hpp; the
// (sequence, head) tasks are independent and write disjoint outputs, so how threads take them
// changes nothing; probability dropout draws at the logical index
// ((seq * heads + global head) * context + query) * context + key; the partial input gradients
// of q, k, v are TP-reduced together and combined as (dq_part + dk_part) + dv_part.
#include <omp.h>

#include <algorithm>

#include "model/gpt_causal_gemms.hpp"
#include "model/gpt_impl.hpp"
#include "model/kernels/attn_rows.hpp"
#include "model/ops.hpp"
#include "parallel/fused_linear3.hpp"
#include "runtime/error.hpp"

namespace lockstep::gpt_detail {

namespace {
// Where a layer's q, k, v live: three [T, dl] buffers, or one [T, 3 dl] (LayerActs::qkv_fused).
struct QkvView {
  const float *q, *k, *v;
  std::int64_t ld;
  QkvView(const LayerActs& A, std::int64_t dl)
      : q(A.qkv_fused ? A.qkv.data() : A.q.data()),
        k(A.qkv_fused ? A.qkv.data() + dl : A.k.data()),
        v(A.qkv_fused ? A.qkv.data() + 2 * dl : A.v.data()),
        ld(A.qkv_fused ? 3 * dl : dl) {}
};

// ---- forward --------------------------------------------------------------------------------

// One column-parallel projection (q, k or v) of layer l's a1 into `out`, recorded as `op`.
void projection_forward(const Pass& ps, std::int64_t l, int op, int w, int b, Buf& out) {
  State& m = ps.m;
  const LayerActs& A = m.acts[l];
  column_linear_forward(ps.tp, A.a1.data(), ps.T, ps.d, ps.P(w), ps.dl, ps.P(b), out.data(),
                        m.pt(op_id(l, op)));
  if (m.rec) m.record(op_id(l, op), {cs(A.a1), ps.pp(w), ps.pp(b)}, cs(out));
}

// LN1 and the q, k, v projections: one fused GEMM into A.qkv, or (op trace, debug.perturb of a
// q/k/v op) three.
void ln1_qkv_forward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  LayerActs& A = m.acts[l];
  const std::int64_t T = ps.T, d = ps.d, dl = ps.dl;
  stream_layernorm(ps, ps.P(I.ln1w), ps.P(I.ln1b), A.xhat1, A.rstd1, A.a1);
  if (m.rec) m.record(op_id(l, kLn1Fwd), {cs(m.h), ps.pp(I.ln1w), ps.pp(I.ln1b)}, cs(A.a1));
  A.qkv_fused = !m.rec;
  for (int op : {kQFwd, kKFwd, kVFwd, kQWgrad, kKWgrad, kVWgrad, kQDgrad, kKDgrad, kVDgrad})
    A.qkv_fused = A.qkv_fused && !m.pt(op_id(l, op));
  if (A.qkv_fused) {
    ensure(A.qkv, T * 3 * dl);
    ensure(m.lin3_scratch, linear3_scratch_floats(ps.tp, T, d, dl));
    linear3_forward(ps.tp, A.a1.data(), T, d,
                    {{ps.P(I.q), ps.P(I.k), ps.P(I.v)}, {ps.P(I.qb), ps.P(I.kb), ps.P(I.vb)}}, dl,
                    A.qkv.data(), m.lin3_scratch.data());
    return;
  }
  ensure(A.q, T * dl);
  ensure(A.k, T * dl);
  ensure(A.v, T * dl);
  projection_forward(ps, l, kQFwd, I.q, I.qb, A.q);
  projection_forward(ps, l, kKFwd, I.k, I.kb, A.k);
  projection_forward(ps, l, kVFwd, I.v, I.vb, A.v);
}

// Pd = dropout(S) for the rows of one (sequence b, local head hh): only the causal prefix
// draws (masked probabilities are +0.0 either way); masked keep and Pd entries are zeroed.
void drop_probs(const Pass& ps, const KernelCtx& ctx1, std::uint64_t stream, std::int64_t b,
                std::int64_t hh, const float* S, float* Pd, std::uint8_t* keep) {
  const std::int64_t C = ps.C, gh = ps.h0 + hh;
  for (std::int64_t i = 0; i < C; ++i) {
    const std::int64_t first = ((ps.m.seq_ids[b] * ps.H + gh) * C + i) * C;
    dropout_keep_row(ctx1, ps.seed, stream, first, i + 1, ps.p, keep + i * C);
    for (std::int64_t j = 0; j <= i; ++j)
      Pd[i * C + j] = keep[i * C + j] ? S[i * C + j] * ps.rs : 0.0f;
    for (std::int64_t j = i + 1; j < C; ++j) {
      keep[i * C + j] = 0;
      Pd[i * C + j] = 0.0f;
    }
  }
}

// What every (sequence, head) task of layer l's attention forward reads.
struct AttnForward {
  const Pass& ps;
  LayerActs& A;
  QkvView qkv;
  CausalGemms cg_s, cg_o;  // S = Q K^T, O = P V
  AttnScratch as;
  float* scores_copy;  // the op trace's copy of the scores, or nullptr
  std::uint64_t attn_stream;

  AttnForward(const Pass& p, std::int64_t layer)
      : ps(p),
        A(p.m.acts[layer]),
        qkv(A, p.dl),
        cg_s(p.tp, p.C, p.B, p.m.pt(op_id(layer, kScoresFwd)), !p.m.rec),
        cg_o(p.tp, p.C, p.B, p.m.pt(op_id(layer, kPvFwd)), !p.m.rec),
        as(p.C, p.hd, p.B, cg_s.rows()),
        scores_copy(p.m.rec ? p.m.rec_scores.data() : nullptr),
        attn_stream(dropout_stream(p.m.step, layer + 1, kDropAttn)) {}

  // Task bh = (sequence b, local head hh) on thread th: S, P = softmax(S), dropout, O = P V.
  void task(const KernelCtx& ctx1, int th, float* scratch, std::int64_t bh) const {
    const std::int64_t C = ps.C, Hl = ps.Hl, hd = ps.hd, dl = ps.dl;
    const std::int64_t b = bh / Hl, hh = bh % Hl;
    const float* Q = qkv.q + b * C * qkv.ld + hh * hd;
    const float* K = qkv.k + b * C * qkv.ld + hh * hd;
    const float* V = qkv.v + b * C * qkv.ld + hh * hd;
    float* S = A.probs_stored ? A.probs.data() + bh * C * C : as.p(ps.m.attn_scratch.data(), th);
    cg_s.nt(hd, Q, qkv.ld, K, qkv.ld, S, scratch);
    if (scores_copy) std::copy_n(S, C * C, scores_copy + bh * C * C);
    softmax_causal_rows(ps.tp.kernel1(), S, C, 0, C, ps.scale);
    const float* Pv = S;
    if (ps.m.dropout_on) {
      float* Pd = A.probs_d.data() + bh * C * C;
      drop_probs(ps, ctx1, attn_stream, b, hh, S, Pd, A.keep_attn.data() + bh * C * C);
      Pv = Pd;
    }
    float* O = A.o.data() + b * C * dl + hh * hd;
    cg_o.prefix(hd, Pv, C, V, qkv.ld, O, dl, scratch);
  }
};

// The attention products of layer l per (sequence, local head) into A.o, and their records.
void attention_products_forward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  LayerActs& A = m.acts[l];
  const std::int64_t T = ps.T, C = ps.C, mb = ps.mb, Hl = ps.Hl, dl = ps.dl;
  A.probs_stored = m.dropout_on || m.rec;
  if (A.probs_stored) ensure(A.probs, mb * Hl * C * C);
  ensure(A.o, T * dl);
  if (m.dropout_on) {
    ensure(A.probs_d, mb * Hl * C * C);
    ensure(A.keep_attn, mb * Hl * C * C);
  }
  const bool drop = m.dropout_on;
  if (m.rec) ensure(m.rec_scores, mb * Hl * C * C);
  const AttnForward af(ps, l);
  ensure(m.attn_scratch, static_cast<std::int64_t>(ps.ctx.threads) * af.as.per_thread);
#pragma omp parallel num_threads(ps.ctx.threads)
  {
    const KernelCtx ctx1 = ps.tp.kernel1();
    const int th = omp_get_thread_num();
    float* scratch = af.as.tmp(m.attn_scratch.data(), th);
    // (sequence, head) tasks are independent and write disjoint outputs: handed out one by
    // one, so a core the VM slows down does not hold the other at the end of the loop.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t bh = 0; bh < mb * Hl; ++bh) af.task(ctx1, th, scratch, bh);
  }
  if (m.rec) {
    m.record(op_id(l, kScoresFwd), {cs(A.q), cs(A.k)}, cs(m.rec_scores));
    m.record(op_id(l, kSoftmaxFwd), {cs(m.rec_scores)}, cs(A.probs));
    if (drop) m.record(op_id(l, kAttnDropFwd), {cs(A.probs)}, cs(A.probs_d));
    m.record(op_id(l, kPvFwd), {drop ? cs(A.probs_d) : cs(A.probs), cs(A.v)}, cs(A.o));
  }
}

// proj (row-parallel) into m.y, then the branch dropout; the residual add is left pending.
void proj_forward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  LayerActs& A = m.acts[l];
  row_linear_forward(ps.tp, A.o.data(), ps.T, ps.dl, ps.P(I.proj), ps.d, ps.P(I.projb), m.y.data(),
                     m.pt(op_id(l, kProjFwd)));
  if (m.rec) m.record(op_id(l, kProjFwd), {cs(A.o), ps.pp(I.proj), ps.pp(I.projb)}, cs(m.y));
  branch_residual(ps, l, kDropProj, A.keep_proj, op_id(l, kAttnResFwd));
}

// ---- backward -------------------------------------------------------------------------------

// Branch dropout' and proj backward: m.dsmall = d(attention output).
void proj_backward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  const LayerActs& A = m.acts[l];
  const std::int64_t T = ps.T, d = ps.d, dl = ps.dl;
  ensure(m.dsmall, T * dl);
  const float* dy = branch_dropout_backward(ps, A.keep_proj);
  row_linear_backward(ps.tp, A.o.data(), dy, T, dl, ps.P(I.proj), d, ps.G(I.proj), ps.G(I.projb),
                      m.dsmall.data(), m.pt(op_id(l, kProjWgrad)), m.pt(op_id(l, kProjDgrad)));
  if (m.rec) {
    ps.record_wb(l, kProjWgrad, kProjBgrad, dy, T * d, A.o.data(), T * dl, I.proj, I.projb);
    m.record(op_id(l, kProjDgrad), {cs(dy, T * d), ps.pp(I.proj)}, cs(m.dsmall));
  }
}

// dS = dropout'(dP) on the causal prefix of one (sequence, head)'s rows (keep: its mask).
void drop_grad_rows(const Pass& ps, const std::uint8_t* keep, float* dP) {
  const std::int64_t C = ps.C;
  for (std::int64_t i = 0; i < C; ++i) {
    const std::uint8_t* k = keep + i * C;
    float* g = dP + i * C;
    for (std::int64_t j = 0; j <= i; ++j) g[j] = k[j] ? g[j] * ps.rs : 0.0f;
  }
}

// What every (sequence, head) task of layer l's attention backward reads.
struct AttnBackward {
  const Pass& ps;
  const LayerActs& A;
  QkvView qkv;
  CausalGemms cg;
  // The forward's scores GEMM (perturbed or not), to recompute unstored probabilities.
  CausalGemms cg_s;
  AttnScratch as;
  float *dq0, *dk0, *dv0;  // dq, dk, dv: into dqkv [T, 3 dl] laid out as qkv when fused

  AttnBackward(const Pass& p, std::int64_t l)
      : ps(p),
        A(p.m.acts[l]),
        qkv(A, p.dl),
        cg(p.tp, p.C, p.B, false, !p.m.rec),
        cg_s(p.tp, p.C, p.B, p.m.pt(op_id(l, kScoresFwd)), true),
        as(p.C, p.hd, p.B, cg.rows()),
        dq0(A.qkv_fused ? p.m.dqkv.data() : p.m.dq.data()),
        dk0(A.qkv_fused ? p.m.dqkv.data() + p.dl : p.m.dk.data()),
        dv0(A.qkv_fused ? p.m.dqkv.data() + 2 * p.dl : p.m.dv.data()) {}

  // Task bh = (sequence b, local head hh) on thread th: dP = dO V^T, dV = P^T dO, dS, dQ = dS K,
  // dK = dS^T Q.
  void task(int th, std::int64_t bh) const {
    const std::int64_t C = ps.C, Hl = ps.Hl, hd = ps.hd, dl = ps.dl;
    float* base = ps.m.attn_scratch.data();
    float* dP = as.dp(base, th);
    float* tree_tmp = as.tmp(base, th);
    const std::int64_t b = bh / Hl, hh = bh % Hl;
    const std::int64_t off = b * C * dl + hh * hd, qoff = b * C * qkv.ld + hh * hd;
    const float* Q = qkv.q + qoff;
    const float* K = qkv.k + qoff;
    const float* V = qkv.v + qoff;
    const float* dO = ps.m.dsmall.data() + off;
    const float* Pm;
    if (A.probs_stored) {
      Pm = A.probs.data() + bh * C * C;
    } else {  // the forward's probabilities, recomputed by the same ops
      float* Pr = as.p(base, th);
      cg_s.nt(hd, Q, qkv.ld, K, qkv.ld, Pr, tree_tmp);
      softmax_causal_rows(ps.tp.kernel1(), Pr, C, 0, C, ps.scale);
      Pm = Pr;
    }
    const bool drop = ps.m.dropout_on;
    const float* Pv = drop ? A.probs_d.data() + bh * C * C : Pm;
    cg.nt(hd, dO, dl, V, qkv.ld, dP, tree_tmp);
    cg.suffix(hd, Pv, C, dO, dl, dv0 + qoff, qkv.ld, tree_tmp);
    if (drop) drop_grad_rows(ps, A.keep_attn.data() + bh * C * C, dP);
    softmax_backward_rows(ps.tp.kernel1(), Pm, dP, C, 0, C, ps.scale);
    cg.prefix(hd, dP, C, K, qkv.ld, dq0 + qoff, qkv.ld, tree_tmp);
    cg.suffix(hd, dP, C, Q, qkv.ld, dk0 + qoff, qkv.ld, tree_tmp);
  }
};

// dq, dk, dv of layer l per (sequence, local head) from m.dsmall, and their records.
void attention_products_backward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerActs& A = m.acts[l];
  const std::int64_t T = ps.T, d = ps.d, dl = ps.dl;
  const int nth = ps.ctx.threads;
  if (m.rec && !A.probs_stored)
    fail("Gpt::backward: the op trace started between forward and backward",
         "start recording before forward_backward");
  if (A.qkv_fused) {
    ensure(m.dqkv, T * 3 * dl);
  } else {
    ensure(m.qkv_part, 3 * T * d);
    ensure(m.dq, T * dl);
    ensure(m.dk, T * dl);
    ensure(m.dv, T * dl);
  }
  const AttnBackward ab(ps, l);
  ensure(m.attn_scratch, static_cast<std::int64_t>(nth) * ab.as.per_thread);
#pragma omp parallel num_threads(nth)
  {
    const int th = omp_get_thread_num();
#pragma omp for schedule(dynamic, 1)  // independent (sequence, head) tasks, as in forward
    for (std::int64_t bh = 0; bh < ps.mb * ps.Hl; ++bh) ab.task(th, bh);
  }
  if (m.rec) {
    const bool drop = m.dropout_on;
    const std::span<const float> attn_in[] = {
        cs(m.dsmall), cs(A.q), cs(A.k), cs(A.v), cs(A.probs), drop ? cs(A.probs_d) : cs(A.probs)};
    m.obs->record(m.op_name[op_id(l, kDvBwd)], attn_in, cs(m.dv));
    m.obs->record(m.op_name[op_id(l, kDqBwd)], attn_in, cs(m.dq));
    m.obs->record(m.op_name[op_id(l, kDkBwd)], attn_in, cs(m.dk));
  }
}

// The fused q/k/v backward: one linear3_backward from m.dqkv into m.dy.
void qkv_backward_fused(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  const LayerActs& A = m.acts[l];
  ensure(m.lin3_scratch, linear3_scratch_floats(ps.tp, ps.T, ps.d, ps.dl));
  linear3_backward(ps.tp, A.a1.data(), m.dqkv.data(), ps.T, ps.d,
                   {{ps.P(I.q), ps.P(I.k), ps.P(I.v)}, {ps.P(I.qb), ps.P(I.kb), ps.P(I.vb)}}, ps.dl,
                   {{ps.G(I.q), ps.G(I.k), ps.G(I.v)}, {ps.G(I.qb), ps.G(I.kb), ps.G(I.vb)}},
                   m.dy.data(), m.lin3_scratch.data());
}

// One column-parallel projection's backward (q, k or v): its weight and bias gradients and its
// partial input gradient `part` (TP-reduced later, with the other two).
void projection_backward(const Pass& ps, std::int64_t l, const Buf& dout, int w, int b, int wop,
                         int bop, int dop, float* part) {
  State& m = ps.m;
  const LayerActs& A = m.acts[l];
  column_linear_backward(ps.tp, A.a1.data(), dout.data(), ps.T, ps.d, ps.P(w), ps.dl, ps.G(w),
                         ps.G(b), part, m.pt(op_id(l, wop)), m.pt(op_id(l, dop)));
  if (m.rec) ps.record_wb(l, wop, bop, dout.data(), ps.T * ps.dl, A.a1.data(), ps.T * ps.d, w, b);
}

// The q/k/v backward one projection at a time: the partial input gradients are TP-reduced
// together (one allreduce of the 3 stacked buffers), then m.dy = (dq_part + dk_part) + dv_part.
void qkv_backward_split(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  const std::int64_t T = ps.T, d = ps.d;
  float* pq = m.qkv_part.data();
  float* pk = pq + T * d;
  float* pv = pk + T * d;
  projection_backward(ps, l, m.dq, I.q, I.qb, kQWgrad, kQBgrad, kQDgrad, pq);
  projection_backward(ps, l, m.dk, I.k, I.kb, kKWgrad, kKBgrad, kKDgrad, pk);
  projection_backward(ps, l, m.dv, I.v, I.vb, kVWgrad, kVBgrad, kVDgrad, pv);
  copy_to_tp_backward(ps.tp, sp(m.qkv_part));
  if (m.rec) {
    m.record(op_id(l, kQDgrad), {cs(m.dq), ps.pp(I.q)}, cs(pq, T * d));
    m.record(op_id(l, kKDgrad), {cs(m.dk), ps.pp(I.k)}, cs(pk, T * d));
    m.record(op_id(l, kVDgrad), {cs(m.dv), ps.pp(I.v)}, cs(pv, T * d));
  }
#pragma omp parallel for num_threads(ps.ctx.threads) schedule(static)
  for (std::int64_t e = 0; e < T * d; ++e) m.dy[e] = (pq[e] + pk[e]) + pv[e];
}
}  // namespace

void attention_forward(const Pass& ps, std::int64_t l) {
  ln1_qkv_forward(ps, l);
  attention_products_forward(ps, l);
  proj_forward(ps, l);
}

void attention_backward(const Pass& ps, std::int64_t l) {
  const LayerIdx& I = ps.m.li[l];
  const LayerActs& A = ps.m.acts[l];
  proj_backward(ps, l);
  attention_products_backward(ps, l);
  if (A.qkv_fused)
    qkv_backward_fused(ps, l);
  else
    qkv_backward_split(ps, l);
  layer_ln_backward(ps, l, A.xhat1, A.rstd1, I.ln1w, I.ln1b, kLn1Bwd);
}

}  // namespace lockstep::gpt_detail
