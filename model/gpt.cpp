#include "model/gpt.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>

#include "model/gpt_causal_gemms.hpp"
#include "model/gpt_op_names.hpp"
#include "model/kernels/attn_rows.hpp"
#include "model/ops.hpp"
#include "parallel/fused_linear3.hpp"
#include "parallel/vocab_parallel.hpp"
#include "runtime/aligned_vector.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/random.hpp"
#include "runtime/transcendental.hpp"

namespace lockstep {

using namespace gpt_detail;

namespace {
// 64-byte aligned: whole-line vector loads, and the GEMM reads A in place (gemm_kernel.hpp).
using Buf = AlignedVector<float>;
using Mask = std::vector<std::uint8_t>;

void ensure(Buf& b, std::int64_t n) {
  if (static_cast<std::int64_t>(b.size()) != n) b.assign(static_cast<std::size_t>(n), 0.0f);
}
void ensure(Mask& b, std::int64_t n) {
  if (static_cast<std::int64_t>(b.size()) != n) b.assign(static_cast<std::size_t>(n), 0);
}
std::span<float> sp(Buf& b) {
  return std::span<float>(b.data(), b.size());
}

std::span<const float> cs(const float* p, std::int64_t n) {
  return std::span<const float>(p, static_cast<std::size_t>(n));
}
std::span<const float> cs(const Buf& b) {
  return std::span<const float>(b.data(), b.size());
}
// Token ids and labels enter the op trace as their bytes (the trace hashes bytes).
std::span<const float> id_bytes(const std::int32_t* p, std::int64_t n) {
  static_assert(sizeof(float) == sizeof(std::int32_t));
  return std::span<const float>(reinterpret_cast<const float*>(p), static_cast<std::size_t>(n));
}

struct LayerIdx {
  int ln1w, ln1b, q, qb, k, kb, v, vb, proj, projb, ln2w, ln2b, fc1, fc1b, fc2, fc2b;
};

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

// f(offset, len) over the entries [0, cols) of T rows `ld` floats apart, in pieces of about
// 4,096 floats spread over `threads` (packed rows: flat pieces; strided rows: a row each).
// For elementwise work: the pieces never change a value.
template <class F>
void for_row_pieces(int threads, std::int64_t T, std::int64_t cols, std::int64_t ld, F&& f) {
  if (ld == cols) {
    const std::int64_t n = T * cols, chunk = 4096, nch = (n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t c = 0; c < nch; ++c) f(c * chunk, std::min(chunk, n - c * chunk));
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t t = 0; t < T; ++t) f(t * ld, cols);
  }
}

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
}  // namespace

struct Gpt::Impl {
  std::int64_t T = 0, mb = 0, step = 0;
  // Row stride of every layer's u, g (and the backward's dbig) [T, fl], set by forward:
  // runtime/gemm.hpp's gemm_row_stride (1088 for fl 1024, whose 4 KiB rows would all fall into
  // the same L1 sets), so that fc2's forward and fc1's input-gradient GEMM read them in place
  // instead of copying them; fl itself under the op trace, which hashes these buffers whole.
  // Only speed depends on it.
  std::int64_t ffn_ld = 0;
  bool train = false, dropout_on = false;
  std::vector<LayerIdx> li;
  int embed = 0, pos = 1, lnfw = 0, lnfb = 0;
  // forward state
  std::vector<std::int32_t> pos_of;
  std::vector<std::int64_t> seq_ids;
  Mask keep0;
  Buf h, y, xhatf, rstdf, hf, logits, cmax, csumexp, ce_scratch, loss_tok;
  std::vector<LayerActs> acts;
  // backward scratch
  Buf dh, dy, dbig, dsmall, qkv_part, dq, dk, dv, dhf, ln_scratch, attn_scratch;
  Buf dqkv, lin3_scratch;  // the fused q/k/v path's [T, 3 dl] gradient and linear3 scratch
  // op trace (gpt.hpp): names and perturb flags by op id (global ops, then kLayerOps per
  // layer); rec: the observer records this forward/backward; copies of in-place inputs.
  OpObserver* obs = nullptr;
  std::vector<std::string> op_name;
  std::vector<char> op_perturb;
  bool rec = false;
  Buf rec_a, rec_b, rec_scores;

  static int id(std::int64_t layer, int op) { return op_id(layer, op); }
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

void Gpt::set_observer(OpObserver* observer) {
  Impl& m = *impl_;
  m.obs = observer;
  m.op_name.clear();
  m.op_perturb.clear();
  if (!observer) return;
  m.op_name = op_id_names(cfg_.layers);
  const int n = static_cast<int>(m.op_name.size());
  m.op_perturb.assign(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) m.op_perturb[i] = observer->perturb(m.op_name[i]) ? 1 : 0;
}

Gpt::Gpt(const ModelConfig& cfg, const Grid* grid, Determinism mode, KernelCtx ctx)
    : cfg_(cfg),
      table_(ParamTable::build(cfg)),
      tp_(grid, mode, ctx),
      impl_(std::make_unique<Impl>()) {
  validate_model_config(cfg_, tp_.size());
  for (std::size_t i = 0; i < table_.size(); ++i) {
    const ParamSpec& s = table_[i];
    const ShardDesc sd = s.shard(tp_.size(), tp_.rank());
    Tensor p = Tensor::zeros(DType::f32, sd.local_shape(), s.name);
    p.set_shard(sd);
    params_.push_back(std::move(p));
    std::vector<Tensor> terms;
    for (const std::string& tn : s.terms) {
      Tensor g = Tensor::zeros(DType::f32, sd.local_shape(), "grad/" + s.name + "/" + tn);
      g.set_shard(sd);
      terms.push_back(std::move(g));
    }
    grads_.push_back(std::move(terms));
  }
  auto idx = [&](const std::string& n) {
    return table_.contains(n) ? static_cast<int>(table_.index_of(n)) : -1;
  };
  impl_->embed = idx("embed.weight");
  impl_->pos = idx("pos_embed.weight");
  impl_->lnfw = idx("final_ln.weight");
  impl_->lnfb = idx("final_ln.bias");
  for (std::int64_t l = 0; l < cfg_.layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    impl_->li.push_back(
        LayerIdx{idx(L + "ln1.weight"), idx(L + "ln1.bias"), idx(L + "attn.q.weight"),
                 idx(L + "attn.q.bias"), idx(L + "attn.k.weight"), idx(L + "attn.k.bias"),
                 idx(L + "attn.v.weight"), idx(L + "attn.v.bias"), idx(L + "attn.proj.weight"),
                 idx(L + "attn.proj.bias"), idx(L + "ln2.weight"), idx(L + "ln2.bias"),
                 idx(L + "mlp.fc1.weight"), idx(L + "mlp.fc1.bias"), idx(L + "mlp.fc2.weight"),
                 idx(L + "mlp.fc2.bias")});
  }
  impl_->acts.resize(static_cast<std::size_t>(cfg_.layers));
}

Gpt::~Gpt() = default;

void Gpt::init(std::uint64_t seed) {
  seed_ = seed;
  for (std::size_t i = 0; i < table_.size(); ++i) init_param(table_[i], i, seed, params_[i]);
}

std::span<const float> Gpt::token_losses() const {
  return impl_->loss_tok;
}

float Gpt::forward_loss(const std::int32_t* tokens, const std::int32_t* labels,
                        const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                        bool train) {
  return forward(tokens, labels, seq_ids, mb, step, train);
}

float Gpt::forward_backward(const std::int32_t* tokens, const std::int32_t* labels,
                            const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                            float loss_scale) {
  const float loss = forward(tokens, labels, seq_ids, mb, step, true);
  backward(tokens, labels, loss_scale);
  return loss;
}

float Gpt::forward(const std::int32_t* tokens, const std::int32_t* labels,
                   const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step, bool train) {
  check(mb >= 1, "Gpt::forward: microbatch of " + std::to_string(mb) + " sequences",
        "pass at least one sequence");
  Impl& m = *impl_;
  const KernelCtx& ctx = tp_.kernel();
  const std::int64_t C = cfg_.context, d = cfg_.d_model, tp = tp_.size();
  const std::int64_t T = mb * C, dl = d / tp, fl = cfg_.ffn / tp, vl = cfg_.vocab / tp;
  const std::int64_t H = cfg_.heads, Hl = H / tp, hd = cfg_.head_dim();
  const std::int64_t h0 = Hl * tp_.rank();  // first global head of this rank
  m.T = T;
  m.mb = mb;
  m.step = step;
  m.train = train;
  m.dropout_on = train && cfg_.dropout > 0.0f;
  const float p = cfg_.dropout, rs = m.dropout_on ? 1.0f / (1.0f - p) : 1.0f;
  m.rec = m.obs && m.obs->recording();
  m.ffn_ld = m.rec ? fl : gemm_row_stride(fl);
  auto pp = [&](int i) {
    return i < 0 ? std::span<const float>() : cs(params_[i].data<float>(), params_[i].numel());
  };
  m.seq_ids.assign(seq_ids, seq_ids + mb);
  m.pos_of.resize(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) m.pos_of[t] = static_cast<std::int32_t>(t % C);
  auto P = [&](int i) { return i < 0 ? nullptr : params_[i].data<float>(); };

  // ---- embedding: x0 = dropout(tok_emb + pos_emb) -------------------------------------
  ensure(m.h, T * d);
  ensure(m.y, T * d);
  vocab_embedding_forward(tp_, tokens, T, P(m.embed), cfg_.vocab, d, m.h.data());
  {
    const float* pe = P(m.pos);
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
    for (std::int64_t t = 0; t < T; ++t) {
      float* x = m.h.data() + t * d;
      const float* pr = pe + (t % C) * d;
      for (std::int64_t k = 0; k < d; ++k) x[k] = x[k] + pr[k];
    }
  }
  if (m.dropout_on) {
    ensure(m.keep0, T * d);
    dropout_keep_tokens(ctx, seed_, dropout_stream(step, 0, kDropEmbed), seq_ids, T, C, d, p,
                        m.keep0.data());
    dropout_apply(ctx, m.h.data(), m.keep0.data(), rs, T * d, m.h.data());
  }
  if (m.rec) m.record(kEmbedFwd, {pp(m.embed), pp(m.pos), id_bytes(tokens, T)}, cs(m.h));

  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int B = ctx.reduce_block;
  // The residual add h += y of a branch is done by the LayerNorm that reads h next, in the same
  // pass (residual_layernorm_forward, same bits); pending_res: the op id of that residual add
  // (recorded right after it, before the LayerNorm), or -1 when none is pending.
  int pending_res = -1;
  auto ln_forward = [&](const float* w, const float* b, Buf& xhat, Buf& rstd, Buf& out) {
    ensure(xhat, T * d);
    ensure(rstd, T);
    ensure(out, T * d);
    if (pending_res >= 0) {
      residual_layernorm_forward(ctx, m.h.data(), m.y.data(), T, d, w, b, cfg_.ln_eps, xhat.data(),
                                 rstd.data(), out.data());
      if (m.rec) m.record(pending_res, {cs(m.rec_a), cs(m.y)}, cs(m.h));
      pending_res = -1;
    } else {
      layernorm_forward(ctx, m.h.data(), T, d, w, b, cfg_.ln_eps, xhat.data(), rstd.data(),
                        out.data());
    }
  };
  for (std::int64_t l = 0; l < cfg_.layers; ++l) {
    const LayerIdx& I = m.li[l];
    LayerActs& A = m.acts[l];
    ln_forward(P(I.ln1w), P(I.ln1b), A.xhat1, A.rstd1, A.a1);
    if (m.rec) m.record(Impl::id(l, kLn1Fwd), {cs(m.h), pp(I.ln1w), pp(I.ln1b)}, cs(A.a1));
    A.qkv_fused = !m.rec;
    for (int op : {kQFwd, kKFwd, kVFwd, kQWgrad, kKWgrad, kVWgrad, kQDgrad, kKDgrad, kVDgrad})
      A.qkv_fused = A.qkv_fused && !m.pt(Impl::id(l, op));
    if (A.qkv_fused) {
      ensure(A.qkv, T * 3 * dl);
      ensure(m.lin3_scratch, linear3_scratch_floats(tp_, T, d, dl));
      linear3_forward(tp_, A.a1.data(), T, d,
                      {{P(I.q), P(I.k), P(I.v)}, {P(I.qb), P(I.kb), P(I.vb)}}, dl, A.qkv.data(),
                      m.lin3_scratch.data());
    } else {
      ensure(A.q, T * dl);
      ensure(A.k, T * dl);
      ensure(A.v, T * dl);
      column_linear_forward(tp_, A.a1.data(), T, d, P(I.q), dl, P(I.qb), A.q.data(),
                            m.pt(Impl::id(l, kQFwd)));
      if (m.rec) m.record(Impl::id(l, kQFwd), {cs(A.a1), pp(I.q), pp(I.qb)}, cs(A.q));
      column_linear_forward(tp_, A.a1.data(), T, d, P(I.k), dl, P(I.kb), A.k.data(),
                            m.pt(Impl::id(l, kKFwd)));
      if (m.rec) m.record(Impl::id(l, kKFwd), {cs(A.a1), pp(I.k), pp(I.kb)}, cs(A.k));
      column_linear_forward(tp_, A.a1.data(), T, d, P(I.v), dl, P(I.vb), A.v.data(),
                            m.pt(Impl::id(l, kVFwd)));
      if (m.rec) m.record(Impl::id(l, kVFwd), {cs(A.a1), pp(I.v), pp(I.vb)}, cs(A.v));
    }
    const QkvView qkv(A, dl);

    // ---- attention per (sequence, local head) ----
    A.probs_stored = m.dropout_on || m.rec;
    if (A.probs_stored) ensure(A.probs, mb * Hl * C * C);
    ensure(A.o, T * dl);
    if (m.dropout_on) {
      ensure(A.probs_d, mb * Hl * C * C);
      ensure(A.keep_attn, mb * Hl * C * C);
    }
    const std::uint64_t attn_stream = dropout_stream(step, l + 1, kDropAttn);
    const bool drop = m.dropout_on;
    const CausalGemms cg_s(tp_, C, B, m.pt(Impl::id(l, kScoresFwd)), !m.rec);
    const CausalGemms cg_o(tp_, C, B, m.pt(Impl::id(l, kPvFwd)), !m.rec);
    if (m.rec) ensure(m.rec_scores, mb * Hl * C * C);
    float* scores_copy = m.rec ? m.rec_scores.data() : nullptr;
    const AttnScratch as(C, hd, B, cg_s.rows());
    ensure(m.attn_scratch, static_cast<std::int64_t>(ctx.threads) * as.per_thread);
    const bool stored = A.probs_stored;
#pragma omp parallel num_threads(ctx.threads)
    {
      const KernelCtx ctx1 = tp_.kernel1();
      const int th = omp_get_thread_num();
      float* scratch = as.tmp(m.attn_scratch.data(), th);
      // (sequence, head) tasks are independent and write disjoint outputs: handed out one by
      // one, so a core the VM slows down does not hold the other at the end of the loop.
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t bh = 0; bh < mb * Hl; ++bh) {
        const std::int64_t b = bh / Hl, hh = bh % Hl;
        const float* Q = qkv.q + b * C * qkv.ld + hh * hd;
        const float* K = qkv.k + b * C * qkv.ld + hh * hd;
        const float* V = qkv.v + b * C * qkv.ld + hh * hd;
        float* S = stored ? A.probs.data() + bh * C * C : as.p(m.attn_scratch.data(), th);
        cg_s.nt(hd, Q, qkv.ld, K, qkv.ld, S, scratch);
        if (scores_copy) std::copy_n(S, C * C, scores_copy + bh * C * C);
        softmax_causal_rows(tp_.kernel1(), S, C, 0, C, scale);
        const float* Pv = S;
        if (drop) {
          float* Pd = A.probs_d.data() + bh * C * C;
          std::uint8_t* keep = A.keep_attn.data() + bh * C * C;
          const std::int64_t gh = h0 + hh;
          for (std::int64_t i = 0; i < C; ++i) {
            const std::int64_t first = ((seq_ids[b] * H + gh) * C + i) * C;
            // Only the causal prefix draws: masked probabilities are +0.0 either way.
            dropout_keep_row(ctx1, seed_, attn_stream, first, i + 1, p, keep + i * C);
            for (std::int64_t j = 0; j <= i; ++j)
              Pd[i * C + j] = keep[i * C + j] ? S[i * C + j] * rs : 0.0f;
            for (std::int64_t j = i + 1; j < C; ++j) {
              keep[i * C + j] = 0;
              Pd[i * C + j] = 0.0f;
            }
          }
          Pv = Pd;
        }
        float* O = A.o.data() + b * C * dl + hh * hd;
        cg_o.prefix(hd, Pv, C, V, qkv.ld, O, dl, scratch);
      }
    }
    if (m.rec) {
      m.record(Impl::id(l, kScoresFwd), {cs(A.q), cs(A.k)}, cs(m.rec_scores));
      m.record(Impl::id(l, kSoftmaxFwd), {cs(m.rec_scores)}, cs(A.probs));
      if (drop) m.record(Impl::id(l, kAttnDropFwd), {cs(A.probs)}, cs(A.probs_d));
      m.record(Impl::id(l, kPvFwd), {drop ? cs(A.probs_d) : cs(A.probs), cs(A.v)}, cs(A.o));
    }
    // ---- proj (row-parallel) + dropout + residual ----
    // h += dropout(y) at `site`, its keep mask stored for backward: the mask is applied here,
    // the add is left to the next LayerNorm (pending_res).
    auto dropout_residual = [&](int site, Mask& keep, int rec_id) {
      if (m.rec) m.save(m.rec_a, m.h.data(), T * d);
      if (m.dropout_on) {
        ensure(keep, T * d);
        dropout_keep_tokens(ctx, seed_, dropout_stream(step, l + 1, site), seq_ids, T, C, d, p,
                            keep.data());
        dropout_apply(ctx, m.y.data(), keep.data(), rs, T * d, m.y.data());
      }
      pending_res = rec_id;
    };
    row_linear_forward(tp_, A.o.data(), T, dl, P(I.proj), d, P(I.projb), m.y.data(),
                       m.pt(Impl::id(l, kProjFwd)));
    if (m.rec) m.record(Impl::id(l, kProjFwd), {cs(A.o), pp(I.proj), pp(I.projb)}, cs(m.y));
    dropout_residual(kDropProj, A.keep_proj, Impl::id(l, kAttnResFwd));

    // ---- MLP ----
    ln_forward(P(I.ln2w), P(I.ln2b), A.xhat2, A.rstd2, A.a2);
    if (m.rec) m.record(Impl::id(l, kLn2Fwd), {cs(m.h), pp(I.ln2w), pp(I.ln2b)}, cs(A.a2));
    const std::int64_t fld = m.ffn_ld;
    ensure(A.u, T * fld);
    ensure(A.g, T * fld);
    column_linear_forward(tp_, A.a2.data(), T, d, P(I.fc1), fl, P(I.fc1b), A.u.data(),
                          m.pt(Impl::id(l, kFc1Fwd)), fld);
    if (m.rec) m.record(Impl::id(l, kFc1Fwd), {cs(A.a2), pp(I.fc1), pp(I.fc1b)}, cs(A.u));
    {
      const KernelCtx ctx1 = tp_.kernel1();
      const bool pair = train && !m.rec;
      A.u_holds_grad = pair;
      for_row_pieces(ctx.threads, T, fl, fld, [&](std::int64_t lo, std::int64_t len) {
        if (pair)
          math::gelu_tanh_and_grad(ctx1, A.u.data() + lo, A.g.data() + lo, A.u.data() + lo, len);
        else
          math::gelu_tanh(ctx1, A.u.data() + lo, A.g.data() + lo, len);
      });
    }
    if (m.rec) m.record(Impl::id(l, kGeluFwd), {cs(A.u)}, cs(A.g));
    row_linear_forward(tp_, A.g.data(), T, fl, P(I.fc2), d, P(I.fc2b), m.y.data(),
                       m.pt(Impl::id(l, kFc2Fwd)), fld);
    if (m.rec) m.record(Impl::id(l, kFc2Fwd), {cs(A.g), pp(I.fc2), pp(I.fc2b)}, cs(m.y));
    dropout_residual(kDropFc2, A.keep_fc2, Impl::id(l, kMlpResFwd));
  }

  // ---- final LN, tied LM head, vocab-parallel cross-entropy ----
  ln_forward(P(m.lnfw), P(m.lnfb), m.xhatf, m.rstdf, m.hf);
  if (m.rec) m.record(kFinalLnFwd, {cs(m.h), pp(m.lnfw), pp(m.lnfb)}, cs(m.hf));
  ensure(m.logits, T * vl);
  tp_.gemm(m.pt(kHeadFwd), Trans::N, Trans::T, T, vl, d, m.hf.data(), d, P(m.embed), d,
           m.logits.data(), vl);
  if (m.rec) {
    m.record(kHeadFwd, {cs(m.hf), pp(m.embed)}, cs(m.logits));
    m.save(m.rec_b, m.logits.data(), T * vl);
  }
  ensure(m.cmax, T);
  ensure(m.csumexp, T);
  ensure(m.ce_scratch, 2 * T);
  ensure(m.loss_tok, T);
  vocab_parallel_ce_forward(tp_, m.logits.data(), labels, T, cfg_.vocab, m.cmax.data(),
                            m.csumexp.data(), m.ce_scratch.data(), m.loss_tok.data());
  const float loss = csum(m.loss_tok.data(), T, B);
  if (m.rec) {
    m.record(kLossFwd, {cs(m.rec_b), id_bytes(labels, T)}, cs(m.loss_tok));
    m.record(kLossSumFwd, {cs(m.loss_tok)}, cs(&loss, 1));
  }
  return loss;
}

void Gpt::backward(const std::int32_t* tokens, const std::int32_t* labels, float loss_scale) {
  Impl& m = *impl_;
  const KernelCtx& ctx = tp_.kernel();
  const std::int64_t C = cfg_.context, d = cfg_.d_model, tp = tp_.size();
  const std::int64_t T = m.T, mb = m.mb, dl = d / tp, fl = cfg_.ffn / tp, vl = cfg_.vocab / tp;
  const std::int64_t Hl = cfg_.heads / tp, hd = cfg_.head_dim();
  const float p = cfg_.dropout, rs = m.dropout_on ? 1.0f / (1.0f - p) : 1.0f;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int B = ctx.reduce_block;
  auto P = [&](int i) { return i < 0 ? nullptr : params_[i].data<float>(); };
  auto G = [&](int i, int term = 0) { return i < 0 ? nullptr : grads_[i][term].data<float>(); };
  m.rec = m.obs && m.obs->recording();
  auto pp = [&](int i) {
    return i < 0 ? std::span<const float>() : cs(params_[i].data<float>(), params_[i].numel());
  };
  auto gg = [&](int i, int term = 0) {
    return i < 0 ? std::span<const float>() : cs(G(i, term), grads_[i][term].numel());
  };
  // Records a linear layer's weight and bias gradients (dy: its output gradient, x: input).
  auto rec_wb = [&](std::int64_t l, int wop, int bop, const float* dy, std::int64_t ny,
                    const float* x, std::int64_t nx, int w, int b) {
    m.record(Impl::id(l, wop), {cs(dy, ny), cs(x, nx)}, gg(w));
    if (b >= 0) m.record(Impl::id(l, bop), {cs(dy, ny)}, gg(b));
  };

  // ---- cross-entropy and tied LM head ----
  if (m.rec) m.save(m.rec_b, m.logits.data(), T * vl);
  vocab_parallel_ce_backward(tp_, m.logits.data(), m.csumexp.data(), labels, T, cfg_.vocab,
                             loss_scale);
  if (m.rec) m.record(kLossBwd, {cs(m.rec_b), cs(m.csumexp), id_bytes(labels, T)}, cs(m.logits));
  const float* dlog = m.logits.data();
  tp_.gemm(m.pt(kHeadWgrad), Trans::T, Trans::N, vl, d, T, dlog, vl, m.hf.data(), d, G(m.embed, 0),
           d);
  if (m.rec) m.record(kHeadWgrad, {cs(m.logits), cs(m.hf)}, gg(m.embed, 0));
  ensure(m.dhf, T * d);
  tp_.gemm(m.pt(kHeadDgrad), Trans::N, Trans::N, T, d, vl, dlog, vl, P(m.embed), d, m.dhf.data(),
           d);
  copy_to_tp_backward(tp_, sp(m.dhf));
  if (m.rec) m.record(kHeadDgrad, {cs(m.logits), pp(m.embed)}, cs(m.dhf));
  ensure(m.dh, T * d);
  ensure(m.dy, T * d);
  ensure(m.ln_scratch, T * d);
  layernorm_backward(ctx, m.dhf.data(), m.xhatf.data(), m.rstdf.data(), P(m.lnfw), T, d,
                     m.dh.data(), false, G(m.lnfw), G(m.lnfb), m.ln_scratch.data());
  if (m.rec) {
    m.record(kFinalLnBwd, {cs(m.dhf), cs(m.xhatf), cs(m.rstdf), pp(m.lnfw)}, cs(m.dh));
    m.record(kFinalLnWgrad, {cs(m.dhf), cs(m.xhatf)}, gg(m.lnfw));
    m.record(kFinalLnBgrad, {cs(m.dhf)}, gg(m.lnfb));
  }

  ensure(m.dsmall, T * dl);
  const int nth = ctx.threads;
  const CausalGemms cg(tp_, C, B, false, !m.rec);
  const AttnScratch as(C, hd, B, cg.rows());
  ensure(m.attn_scratch, static_cast<std::int64_t>(nth) * as.per_thread);

  for (std::int64_t l = cfg_.layers - 1; l >= 0; --l) {
    const LayerIdx& I = m.li[l];
    LayerActs& A = m.acts[l];
    // ---- MLP branch ----
    const float* dy = m.dh.data();
    if (m.dropout_on) {
      dropout_apply(ctx, m.dh.data(), A.keep_fc2.data(), rs, T * d, m.dy.data());
      dy = m.dy.data();
    }
    const std::int64_t fld = m.ffn_ld;  // u, g and dbig rows (Impl::ffn_ld)
    ensure(m.dbig, T * fld);
    row_linear_backward(tp_, A.g.data(), dy, T, fl, P(I.fc2), d, G(I.fc2), G(I.fc2b), m.dbig.data(),
                        m.pt(Impl::id(l, kFc2Wgrad)), m.pt(Impl::id(l, kFc2Dgrad)), fld);
    if (m.rec) {
      rec_wb(l, kFc2Wgrad, kFc2Bgrad, dy, T * d, A.g.data(), T * fl, I.fc2, I.fc2b);
      m.record(Impl::id(l, kFc2Dgrad), {cs(dy, T * d), pp(I.fc2)}, cs(m.dbig));
      m.save(m.rec_a, m.dbig.data(), T * fl);
    }
    if (A.u_holds_grad) {
      // du = dg * gelu'(u), gelu'(u) stored in u by the forward.
      if (m.rec)
        fail("Gpt::backward: the op trace started between forward and backward",
             "start recording before forward_backward");
      const float* gp = A.u.data();
      float* dg = m.dbig.data();
      for_row_pieces(nth, T, fl, fld, [&](std::int64_t lo, std::int64_t len) {
        for (std::int64_t e = lo; e < lo + len; ++e) dg[e] = dg[e] * gp[e];
      });
    } else {
      // du = dg * gelu'(u), gelu' staged piece by piece in a per-thread scratch.
      const KernelCtx ctx1 = tp_.kernel1();
      std::vector<Buf> gps(static_cast<std::size_t>(nth));
      for_row_pieces(nth, T, fl, fld, [&](std::int64_t lo, std::int64_t len) {
        Buf& gp = gps[static_cast<std::size_t>(omp_get_thread_num())];
        if (gp.size() < static_cast<std::size_t>(len)) gp.resize(static_cast<std::size_t>(len));
        math::gelu_tanh_grad(ctx1, A.u.data() + lo, gp.data(), len);
        float* dg = m.dbig.data() + lo;
        for (std::int64_t e = 0; e < len; ++e) dg[e] = dg[e] * gp[e];
      });
    }
    if (m.rec) m.record(Impl::id(l, kGeluBwd), {cs(m.rec_a), cs(A.u)}, cs(m.dbig));
    column_linear_backward(tp_, A.a2.data(), m.dbig.data(), T, d, P(I.fc1), fl, G(I.fc1), G(I.fc1b),
                           m.dy.data(), m.pt(Impl::id(l, kFc1Wgrad)), m.pt(Impl::id(l, kFc1Dgrad)),
                           fld);
    copy_to_tp_backward(tp_, sp(m.dy));
    if (m.rec) {
      rec_wb(l, kFc1Wgrad, kFc1Bgrad, m.dbig.data(), T * fl, A.a2.data(), T * d, I.fc1, I.fc1b);
      m.record(Impl::id(l, kFc1Dgrad), {cs(m.dbig), pp(I.fc1)}, cs(m.dy));
      m.save(m.rec_a, m.dh.data(), T * d);
    }
    layernorm_backward(ctx, m.dy.data(), A.xhat2.data(), A.rstd2.data(), P(I.ln2w), T, d,
                       m.dh.data(), true, G(I.ln2w), G(I.ln2b), m.ln_scratch.data());
    if (m.rec) {
      m.record(Impl::id(l, kLn2Bwd), {cs(m.dy), cs(A.xhat2), cs(A.rstd2), pp(I.ln2w), cs(m.rec_a)},
               cs(m.dh));
      m.record(Impl::id(l, kLn2Wgrad), {cs(m.dy), cs(A.xhat2)}, gg(I.ln2w));
      m.record(Impl::id(l, kLn2Bgrad), {cs(m.dy)}, gg(I.ln2b));
    }

    // ---- attention branch ----
    dy = m.dh.data();
    if (m.dropout_on) {
      dropout_apply(ctx, m.dh.data(), A.keep_proj.data(), rs, T * d, m.dy.data());
      dy = m.dy.data();
    }
    row_linear_backward(tp_, A.o.data(), dy, T, dl, P(I.proj), d, G(I.proj), G(I.projb),
                        m.dsmall.data(), m.pt(Impl::id(l, kProjWgrad)),
                        m.pt(Impl::id(l, kProjDgrad)));
    if (m.rec) {
      rec_wb(l, kProjWgrad, kProjBgrad, dy, T * d, A.o.data(), T * dl, I.proj, I.projb);
      m.record(Impl::id(l, kProjDgrad), {cs(dy, T * d), pp(I.proj)}, cs(m.dsmall));
    }
    const bool drop = m.dropout_on;
    if (m.rec && !A.probs_stored)
      fail("Gpt::backward: the op trace started between forward and backward",
           "start recording before forward_backward");
    // The forward's scores GEMM (perturbed or not), to recompute unstored probabilities.
    const CausalGemms cg_s(tp_, C, B, m.pt(Impl::id(l, kScoresFwd)), true);
    const QkvView qkv(A, dl);
    // dq, dk, dv: into dqkv [T, 3 dl] laid out as qkv for the fused projections.
    if (A.qkv_fused) {
      ensure(m.dqkv, T * 3 * dl);
    } else {
      ensure(m.qkv_part, 3 * T * d);
      ensure(m.dq, T * dl);
      ensure(m.dk, T * dl);
      ensure(m.dv, T * dl);
    }
    float* dq0 = A.qkv_fused ? m.dqkv.data() : m.dq.data();
    float* dk0 = A.qkv_fused ? m.dqkv.data() + dl : m.dk.data();
    float* dv0 = A.qkv_fused ? m.dqkv.data() + 2 * dl : m.dv.data();
#pragma omp parallel num_threads(nth)
    {
      const int th = omp_get_thread_num();
      float* dP = as.dp(m.attn_scratch.data(), th);
      float* tree_tmp = as.tmp(m.attn_scratch.data(), th);
#pragma omp for schedule(dynamic, 1)  // independent (sequence, head) tasks, as in forward
      for (std::int64_t bh = 0; bh < mb * Hl; ++bh) {
        const std::int64_t b = bh / Hl, hh = bh % Hl;
        const std::int64_t off = b * C * dl + hh * hd, qoff = b * C * qkv.ld + hh * hd;
        const float* Q = qkv.q + qoff;
        const float* K = qkv.k + qoff;
        const float* V = qkv.v + qoff;
        const float* dO = m.dsmall.data() + off;
        const float* Pm;
        if (A.probs_stored) {
          Pm = A.probs.data() + bh * C * C;
        } else {  // the forward's probabilities, recomputed by the same ops
          float* Pr = as.p(m.attn_scratch.data(), th);
          cg_s.nt(hd, Q, qkv.ld, K, qkv.ld, Pr, tree_tmp);
          softmax_causal_rows(tp_.kernel1(), Pr, C, 0, C, scale);
          Pm = Pr;
        }
        const float* Pv = drop ? A.probs_d.data() + bh * C * C : Pm;
        cg.nt(hd, dO, dl, V, qkv.ld, dP, tree_tmp);
        cg.suffix(hd, Pv, C, dO, dl, dv0 + qoff, qkv.ld, tree_tmp);
        if (drop) {
          for (std::int64_t i = 0; i < C; ++i) {
            const std::uint8_t* keep = A.keep_attn.data() + bh * C * C + i * C;
            float* g = dP + i * C;
            for (std::int64_t j = 0; j <= i; ++j) g[j] = keep[j] ? g[j] * rs : 0.0f;
          }
        }
        softmax_backward_rows(tp_.kernel1(), Pm, dP, C, 0, C, scale);
        cg.prefix(hd, dP, C, K, qkv.ld, dq0 + qoff, qkv.ld, tree_tmp);
        cg.suffix(hd, dP, C, Q, qkv.ld, dk0 + qoff, qkv.ld, tree_tmp);
      }
    }
    if (m.rec) {
      const std::span<const float> attn_in[] = {
          cs(m.dsmall), cs(A.q), cs(A.k), cs(A.v), cs(A.probs), drop ? cs(A.probs_d) : cs(A.probs)};
      m.obs->record(m.op_name[Impl::id(l, kDvBwd)], attn_in, cs(m.dv));
      m.obs->record(m.op_name[Impl::id(l, kDqBwd)], attn_in, cs(m.dq));
      m.obs->record(m.op_name[Impl::id(l, kDkBwd)], attn_in, cs(m.dk));
    }
    if (A.qkv_fused) {
      ensure(m.lin3_scratch, linear3_scratch_floats(tp_, T, d, dl));
      linear3_backward(tp_, A.a1.data(), m.dqkv.data(), T, d,
                       {{P(I.q), P(I.k), P(I.v)}, {P(I.qb), P(I.kb), P(I.vb)}}, dl,
                       {{G(I.q), G(I.k), G(I.v)}, {G(I.qb), G(I.kb), G(I.vb)}}, m.dy.data(),
                       m.lin3_scratch.data());
    } else {
      float* pq = m.qkv_part.data();
      float* pk = pq + T * d;
      float* pv = pk + T * d;
      column_linear_backward(tp_, A.a1.data(), m.dq.data(), T, d, P(I.q), dl, G(I.q), G(I.qb), pq,
                             m.pt(Impl::id(l, kQWgrad)), m.pt(Impl::id(l, kQDgrad)));
      if (m.rec) rec_wb(l, kQWgrad, kQBgrad, m.dq.data(), T * dl, A.a1.data(), T * d, I.q, I.qb);
      column_linear_backward(tp_, A.a1.data(), m.dk.data(), T, d, P(I.k), dl, G(I.k), G(I.kb), pk,
                             m.pt(Impl::id(l, kKWgrad)), m.pt(Impl::id(l, kKDgrad)));
      if (m.rec) rec_wb(l, kKWgrad, kKBgrad, m.dk.data(), T * dl, A.a1.data(), T * d, I.k, I.kb);
      column_linear_backward(tp_, A.a1.data(), m.dv.data(), T, d, P(I.v), dl, G(I.v), G(I.vb), pv,
                             m.pt(Impl::id(l, kVWgrad)), m.pt(Impl::id(l, kVDgrad)));
      if (m.rec) rec_wb(l, kVWgrad, kVBgrad, m.dv.data(), T * dl, A.a1.data(), T * d, I.v, I.vb);
      copy_to_tp_backward(tp_, sp(m.qkv_part));
      if (m.rec) {
        m.record(Impl::id(l, kQDgrad), {cs(m.dq), pp(I.q)}, cs(pq, T * d));
        m.record(Impl::id(l, kKDgrad), {cs(m.dk), pp(I.k)}, cs(pk, T * d));
        m.record(Impl::id(l, kVDgrad), {cs(m.dv), pp(I.v)}, cs(pv, T * d));
        m.save(m.rec_a, m.dh.data(), T * d);
      }
#pragma omp parallel for num_threads(nth) schedule(static)
      for (std::int64_t e = 0; e < T * d; ++e) m.dy[e] = (pq[e] + pk[e]) + pv[e];
    }
    layernorm_backward(ctx, m.dy.data(), A.xhat1.data(), A.rstd1.data(), P(I.ln1w), T, d,
                       m.dh.data(), true, G(I.ln1w), G(I.ln1b), m.ln_scratch.data());
    if (m.rec) {
      m.record(Impl::id(l, kLn1Bwd), {cs(m.dy), cs(A.xhat1), cs(A.rstd1), pp(I.ln1w), cs(m.rec_a)},
               cs(m.dh));
      m.record(Impl::id(l, kLn1Wgrad), {cs(m.dy), cs(A.xhat1)}, gg(I.ln1w));
      m.record(Impl::id(l, kLn1Bgrad), {cs(m.dy)}, gg(I.ln1b));
    }
  }

  // ---- embedding: dx0 = dropout'(dh); position and lookup grads over tokens ----
  const float* dx0 = m.dh.data();
  if (m.dropout_on) {
    dropout_apply(ctx, m.dh.data(), m.keep0.data(), rs, T * d, m.dy.data());
    dx0 = m.dy.data();
  }
  token_row_grad(ctx, m.pos_of.data(), T, dx0, d, d, 0, C, G(m.pos));
  token_row_grad(ctx, tokens, T, dx0, d, d, vl * tp_.rank(), vl, G(m.embed, 1));
  if (m.rec) {
    m.record(kPosWgrad, {cs(dx0, T * d)}, gg(m.pos));
    m.record(kEmbedWgrad, {cs(dx0, T * d), id_bytes(tokens, T)}, gg(m.embed, 1));
  }
}

}  // namespace lockstep
