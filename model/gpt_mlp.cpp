// The GPT MLP block (model/gpt_impl.hpp), forward and backward: LN2, fc1 (column-parallel),
// GELU (tanh), fc2 (row-parallel) and the branch dropout at the residual add.
// Determinism contract (docs/design.md sections 2 and 3): the linear layers are tp_layers'
// canonical GEMMs and csum_rows bias sums; GELU and its derivative are elementwise
// (runtime/transcendental.hpp, same bits on every ISA path), so the pieces threads take never
// change a value; the FFN row stride (State::ffn_ld) changes only speed.
#include <omp.h>

#include <algorithm>

#include "model/gpt_impl.hpp"
#include "model/ops.hpp"
#include "runtime/error.hpp"
#include "runtime/transcendental.hpp"

namespace lockstep::gpt_detail {

namespace {
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

// ---- forward --------------------------------------------------------------------------------

// u = fc1(a2), rows m.ffn_ld apart.
void fc1_forward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  LayerActs& A = m.acts[l];
  const std::int64_t fld = m.ffn_ld;
  ensure(A.u, ps.T * fld);
  ensure(A.g, ps.T * fld);
  column_linear_forward(ps.tp, A.a2.data(), ps.T, ps.d, ps.P(I.fc1), ps.fl, ps.P(I.fc1b),
                        A.u.data(), m.pt(op_id(l, kFc1Fwd)), fld);
  if (m.rec) m.record(op_id(l, kFc1Fwd), {cs(A.a2), ps.pp(I.fc1), ps.pp(I.fc1b)}, cs(A.u));
}

// g = gelu(u); the training forward (op trace off) also overwrites u with gelu'(u).
void gelu_forward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  LayerActs& A = m.acts[l];
  const KernelCtx ctx1 = ps.tp.kernel1();
  const bool pair = m.train && !m.rec;
  A.u_holds_grad = pair;
  for_row_pieces(ps.ctx.threads, ps.T, ps.fl, m.ffn_ld, [&](std::int64_t lo, std::int64_t len) {
    if (pair)
      math::gelu_tanh_and_grad(ctx1, A.u.data() + lo, A.g.data() + lo, A.u.data() + lo, len);
    else
      math::gelu_tanh(ctx1, A.u.data() + lo, A.g.data() + lo, len);
  });
  if (m.rec) m.record(op_id(l, kGeluFwd), {cs(A.u)}, cs(A.g));
}

// y = fc2(g) (row-parallel), then the branch dropout; the residual add is left pending.
void fc2_forward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  LayerActs& A = m.acts[l];
  row_linear_forward(ps.tp, A.g.data(), ps.T, ps.fl, ps.P(I.fc2), ps.d, ps.P(I.fc2b), m.y.data(),
                     m.pt(op_id(l, kFc2Fwd)), m.ffn_ld);
  if (m.rec) m.record(op_id(l, kFc2Fwd), {cs(A.g), ps.pp(I.fc2), ps.pp(I.fc2b)}, cs(m.y));
  branch_residual(ps, l, kDropFc2, A.keep_fc2, op_id(l, kMlpResFwd));
}

// ---- backward -------------------------------------------------------------------------------

// Branch dropout' and fc2 backward: m.dbig = dg (rows m.ffn_ld apart).
void fc2_backward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  const LayerActs& A = m.acts[l];
  const std::int64_t T = ps.T, d = ps.d, fl = ps.fl;
  const float* dy = branch_dropout_backward(ps, A.keep_fc2);
  const std::int64_t fld = m.ffn_ld;  // u, g and dbig rows (State::ffn_ld)
  ensure(m.dbig, T * fld);
  row_linear_backward(ps.tp, A.g.data(), dy, T, fl, ps.P(I.fc2), d, ps.G(I.fc2), ps.G(I.fc2b),
                      m.dbig.data(), m.pt(op_id(l, kFc2Wgrad)), m.pt(op_id(l, kFc2Dgrad)), fld);
  if (m.rec) {
    ps.record_wb(l, kFc2Wgrad, kFc2Bgrad, dy, T * d, A.g.data(), T * fl, I.fc2, I.fc2b);
    m.record(op_id(l, kFc2Dgrad), {cs(dy, T * d), ps.pp(I.fc2)}, cs(m.dbig));
    m.save(m.rec_a, m.dbig.data(), T * fl);
  }
}

// du = dg * gelu'(u) in m.dbig: gelu'(u) stored in u by the forward, or evaluated piece by
// piece into a per-thread scratch.
void gelu_backward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerActs& A = m.acts[l];
  const int nth = ps.ctx.threads;
  const std::int64_t T = ps.T, fl = ps.fl, fld = m.ffn_ld;
  if (A.u_holds_grad) {
    if (m.rec)
      fail("Gpt::backward: the op trace started between forward and backward",
           "start recording before forward_backward");
    const float* gp = A.u.data();
    float* dg = m.dbig.data();
    for_row_pieces(nth, T, fl, fld, [&](std::int64_t lo, std::int64_t len) {
      for (std::int64_t e = lo; e < lo + len; ++e) dg[e] = dg[e] * gp[e];
    });
  } else {
    const KernelCtx ctx1 = ps.tp.kernel1();
    std::vector<Buf> gps(static_cast<std::size_t>(nth));
    for_row_pieces(nth, T, fl, fld, [&](std::int64_t lo, std::int64_t len) {
      Buf& gp = gps[static_cast<std::size_t>(omp_get_thread_num())];
      if (gp.size() < static_cast<std::size_t>(len)) gp.resize(static_cast<std::size_t>(len));
      math::gelu_tanh_grad(ctx1, A.u.data() + lo, gp.data(), len);
      float* dg = m.dbig.data() + lo;
      for (std::int64_t e = 0; e < len; ++e) dg[e] = dg[e] * gp[e];
    });
  }
  if (m.rec) m.record(op_id(l, kGeluBwd), {cs(m.rec_a), cs(A.u)}, cs(m.dbig));
}

// fc1 backward: m.dy = d(a2), TP-reduced.
void fc1_backward(const Pass& ps, std::int64_t l) {
  State& m = ps.m;
  const LayerIdx& I = m.li[l];
  const LayerActs& A = m.acts[l];
  const std::int64_t T = ps.T, d = ps.d, fl = ps.fl;
  column_linear_backward(ps.tp, A.a2.data(), m.dbig.data(), T, d, ps.P(I.fc1), fl, ps.G(I.fc1),
                         ps.G(I.fc1b), m.dy.data(), m.pt(op_id(l, kFc1Wgrad)),
                         m.pt(op_id(l, kFc1Dgrad)), m.ffn_ld);
  copy_to_tp_backward(ps.tp, sp(m.dy));
  if (m.rec) {
    ps.record_wb(l, kFc1Wgrad, kFc1Bgrad, m.dbig.data(), T * fl, A.a2.data(), T * d, I.fc1, I.fc1b);
    m.record(op_id(l, kFc1Dgrad), {cs(m.dbig), ps.pp(I.fc1)}, cs(m.dy));
  }
}
}  // namespace

void mlp_forward(const Pass& ps, std::int64_t l) {
  const LayerIdx& I = ps.m.li[l];
  LayerActs& A = ps.m.acts[l];
  stream_layernorm(ps, ps.P(I.ln2w), ps.P(I.ln2b), A.xhat2, A.rstd2, A.a2);
  if (ps.m.rec)
    ps.m.record(op_id(l, kLn2Fwd), {cs(ps.m.h), ps.pp(I.ln2w), ps.pp(I.ln2b)}, cs(A.a2));
  fc1_forward(ps, l);
  gelu_forward(ps, l);
  fc2_forward(ps, l);
}

void mlp_backward(const Pass& ps, std::int64_t l) {
  const LayerIdx& I = ps.m.li[l];
  const LayerActs& A = ps.m.acts[l];
  fc2_backward(ps, l);
  gelu_backward(ps, l);
  fc1_backward(ps, l);
  layer_ln_backward(ps, l, A.xhat2, A.rstd2, I.ln2w, I.ln2b, kLn2Bwd);
}

}  // namespace lockstep::gpt_detail
