// The GPT LM head and loss (model/gpt_impl.hpp), forward and backward: the final LayerNorm,
// the vocab-parallel LM head tied to the token embedding, and the vocab-parallel
// cross-entropy with the microbatch's loss csum.
// Determinism contract (docs/design.md section 2): the head's GEMMs are this mode's GEMM
// (canonical in invariant mode), the cross-entropy's reductions over the vocab are csums
// (parallel/vocab_parallel.hpp), and the microbatch's loss is the csum over its tokens (a
// subtree of the global sum); the head's weight gradient is embed.weight's "head" term, kept
// apart from the lookup's (gpt.hpp's GRADIENT CONTRACT).
#include "model/gpt_impl.hpp"
#include "model/ops.hpp"
#include "parallel/vocab_parallel.hpp"
#include "runtime/csum.hpp"

namespace lockstep::gpt_detail {

namespace {
// logits [T, vl] = hf embed_local^T (this rank's vocab slice).
void logits_forward(const Pass& ps) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d, vl = ps.vl;
  ensure(m.logits, T * vl);
  ps.tp.gemm(m.pt(kHeadFwd), Trans::N, Trans::T, T, vl, d, m.hf.data(), d, ps.P(m.embed), d,
             m.logits.data(), vl);
  if (m.rec) {
    m.record(kHeadFwd, {cs(m.hf), ps.pp(m.embed)}, cs(m.logits));
    m.save(m.rec_b, m.logits.data(), T * vl);
  }
}

// Per-token cross-entropy into m.loss_tok; returns its csum over the microbatch.
float cross_entropy_forward(const Pass& ps, const std::int32_t* labels) {
  State& m = ps.m;
  const std::int64_t T = ps.T;
  ensure(m.cmax, T);
  ensure(m.csumexp, T);
  ensure(m.ce_scratch, 2 * T);
  ensure(m.loss_tok, T);
  vocab_parallel_ce_forward(ps.tp, m.logits.data(), labels, T, ps.cfg.padded_vocab(), m.cmax.data(),
                            m.csumexp.data(), m.ce_scratch.data(), m.loss_tok.data());
  const float loss = csum(m.loss_tok.data(), T, ps.tok.rule());
  if (m.rec) {
    m.record(kLossFwd, {cs(m.rec_b), id_bytes(labels, T)}, cs(m.loss_tok));
    m.record(kLossSumFwd, {cs(m.loss_tok)}, cs(&loss, 1));
  }
  return loss;
}

// dlogits (in place in m.logits), seeded per token with loss_scale.
void cross_entropy_backward(const Pass& ps, const std::int32_t* labels, float loss_scale) {
  State& m = ps.m;
  const std::int64_t T = ps.T;
  if (m.rec) m.save(m.rec_b, m.logits.data(), T * ps.vl);
  vocab_parallel_ce_backward(ps.tp, m.logits.data(), m.csumexp.data(), labels, T,
                             ps.cfg.padded_vocab(), loss_scale);
  if (m.rec) m.record(kLossBwd, {cs(m.rec_b), cs(m.csumexp), id_bytes(labels, T)}, cs(m.logits));
}

// The head's weight gradient (embed.weight's "head" term) and m.dhf = d(hf), TP-reduced.
void logits_backward(const Pass& ps) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d, vl = ps.vl;
  const float* dlog = m.logits.data();
  ps.tp.gemm_tokens(m.pt(kHeadWgrad), Trans::T, Trans::N, vl, d, T, dlog, vl, m.hf.data(), d,
             ps.G(m.embed, 0), d);
  if (m.rec) m.record(kHeadWgrad, {cs(m.logits), cs(m.hf)}, ps.gg(m.embed, 0));
  ensure(m.dhf, T * d);
  ps.tp.gemm(m.pt(kHeadDgrad), Trans::N, Trans::N, T, d, vl, dlog, vl, ps.P(m.embed), d,
             m.dhf.data(), d);
  copy_to_tp_backward(ps.tp, sp(m.dhf));
  if (m.rec) m.record(kHeadDgrad, {cs(m.logits), ps.pp(m.embed)}, cs(m.dhf));
}

// The final LayerNorm's backward: m.dh = d(residual stream) (overwritten).
void final_ln_backward(const Pass& ps) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d;
  ensure(m.dh, T * d);
  ensure(m.dy, T * d);
  ensure(m.ln_scratch, T * d);
  layernorm_backward(ps.tok, m.dhf.data(), m.xhatf.data(), m.rstdf.data(), ps.P(m.lnfw), T, d,
                     m.dh.data(), false, ps.G(m.lnfw), ps.G(m.lnfb), m.ln_scratch.data());
  if (m.rec) {
    m.record(kFinalLnBwd, {cs(m.dhf), cs(m.xhatf), cs(m.rstdf), ps.pp(m.lnfw)}, cs(m.dh));
    m.record(kFinalLnWgrad, {cs(m.dhf), cs(m.xhatf)}, ps.gg(m.lnfw));
    m.record(kFinalLnBgrad, {cs(m.dhf)}, ps.gg(m.lnfb));
  }
}
}  // namespace

float lm_head_forward(const Pass& ps, const std::int32_t* labels) {
  State& m = ps.m;
  stream_layernorm(ps, ps.P(m.lnfw), ps.P(m.lnfb), m.xhatf, m.rstdf, m.hf);
  if (m.rec) m.record(kFinalLnFwd, {cs(m.h), ps.pp(m.lnfw), ps.pp(m.lnfb)}, cs(m.hf));
  logits_forward(ps);
  return cross_entropy_forward(ps, labels);
}

void lm_head_backward(const Pass& ps, const std::int32_t* labels, float loss_scale) {
  cross_entropy_backward(ps, labels, loss_scale);
  logits_backward(ps);
  final_ln_backward(ps);
}

}  // namespace lockstep::gpt_detail
