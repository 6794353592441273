// The residual stream of the GPT model (model/gpt_impl.hpp): the LayerNorms that read it (each
// doing the pending residual add of the branch before it in the same pass), the branch
// dropouts at its adds, and the layers' LayerNorm backward that accumulates into it.
// Determinism contract (docs/design.md sections 2 and 3): h_out = h_in + branch element by
// element and LayerNorm's csums (model/ops.hpp), with the bits of the add and the LayerNorm
// done one after the other; dropout masks are Philox functions of (seed, step, layer, site,
// logical token and feature); the LayerNorm parameter gradients are csum_rows subtrees.
#include "model/gpt_impl.hpp"
#include "model/ops.hpp"

namespace lockstep::gpt_detail {

void stream_layernorm(const Pass& ps, const float* w, const float* b, Buf& xhat, Buf& rstd,
                      Buf& out) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d;
  ensure(xhat, T * d);
  ensure(rstd, T);
  ensure(out, T * d);
  if (m.pending_res >= 0) {
    residual_layernorm_forward(ps.ctx, m.h.data(), m.y.data(), T, d, w, b, ps.cfg.ln_eps,
                               xhat.data(), rstd.data(), out.data());
    if (m.rec) m.record(m.pending_res, {cs(m.rec_a), cs(m.y)}, cs(m.h));
    m.pending_res = -1;
  } else {
    layernorm_forward(ps.ctx, m.h.data(), T, d, w, b, ps.cfg.ln_eps, xhat.data(), rstd.data(),
                      out.data());
  }
}

void branch_residual(const Pass& ps, std::int64_t l, int site, Mask& keep, int rec_id) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d;
  if (m.rec) m.save(m.rec_a, m.h.data(), T * d);
  if (m.dropout_on) {
    ensure(keep, T * d);
    dropout_keep_tokens(ps.ctx, ps.seed, dropout_stream(m.step, l + 1, site), m.seq_ids.data(), T,
                        ps.C, d, ps.p, keep.data());
    dropout_apply(ps.ctx, m.y.data(), keep.data(), ps.rs, T * d, m.y.data());
  }
  m.pending_res = rec_id;
}

void finish_stream(const Pass& ps) {
  State& m = ps.m;
  if (m.pending_res < 0) return;
  const std::int64_t n = ps.T * ps.d;
  float* h = m.h.data();
  const float* y = m.y.data();
#pragma omp parallel for num_threads(ps.ctx.threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) h[i] = h[i] + y[i];
  if (m.rec) m.record(m.pending_res, {cs(m.rec_a), cs(m.y)}, cs(m.h));
  m.pending_res = -1;
}

const float* branch_dropout_backward(const Pass& ps, const Mask& keep) {
  State& m = ps.m;
  if (!m.dropout_on) return m.dh.data();
  dropout_apply(ps.ctx, m.dh.data(), keep.data(), ps.rs, ps.T * ps.d, m.dy.data());
  return m.dy.data();
}

void layer_ln_backward(const Pass& ps, std::int64_t l, const Buf& xhat, const Buf& rstd, int w,
                       int b, int bwd_op) {
  static_assert(kLn1Wgrad == kLn1Bwd + 1 && kLn1Bgrad == kLn1Bwd + 2);
  static_assert(kLn2Wgrad == kLn2Bwd + 1 && kLn2Bgrad == kLn2Bwd + 2);
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d;
  if (m.rec) m.save(m.rec_a, m.dh.data(), T * d);  // dh is updated in place
  layernorm_backward(ps.tok, m.dy.data(), xhat.data(), rstd.data(), ps.P(w), T, d, m.dh.data(),
                     true, ps.G(w), ps.G(b), m.ln_scratch.data());
  if (m.rec) {
    m.record(op_id(l, bwd_op), {cs(m.dy), cs(xhat), cs(rstd), ps.pp(w), cs(m.rec_a)}, cs(m.dh));
    m.record(op_id(l, bwd_op + 1), {cs(m.dy), cs(xhat)}, ps.gg(w));
    m.record(op_id(l, bwd_op + 2), {cs(m.dy)}, ps.gg(b));
  }
}

}  // namespace lockstep::gpt_detail
