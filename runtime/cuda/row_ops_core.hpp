// Host/device bodies of the deterministic elementwise and row kernels (runtime/cuda/kernels.cu),
// each the CPU operation's order of IEEE operations written once more, so the CPU tests
// (tests/unit/test_cuda_ops_host.cpp) can hold them to the CPU kernels bit for bit:
//   layernorm_row_forward  == lockstep::layernorm_forward (model/ops.hpp) for one row
//   softmax_causal_row, softmax_backward_row
//                          == lockstep::softmax_causal_rows / softmax_backward_rows
//                             (model/kernels/attn_rows.hpp) for one row
//   row_max, ce_max_signed_zero, ce_row_exp, ce_row_loss, ce_row_backward
//                          == lockstep::vocab_parallel_ce_forward / _backward
//                             (parallel/vocab_parallel.cpp) for one token, phase by phase
//   layernorm_row_backward, layernorm_param_grad_column
//                          == lockstep::layernorm_backward's dx for one row, and its dw, db
//                             for one column
//   adamw_element          == one lane of lockstep::detail::adamw_lanes (optim/adamw_kernel.hpp)
//   embedding_grad_column  == lockstep::token_row_grad (parallel/vocab_parallel.hpp) for one
//                             (row, column)
// Determinism contract: every reduction is the canonical csum (or cdot) under its SumRuleHD
// (block, tree, token sequences; runtime/cuda/tree_counter.hpp), every transcendental Lockstep's
// own (runtime/cuda/math_device.hpp); no operation is contracted or reassociated (hd.hpp's build
// flags).
#pragma once

#include <cstdint>

#include "runtime/cuda/math_device.hpp"
#include "runtime/cuda/tree_counter.hpp"
#include "runtime/hd.hpp"

namespace lockstep::hd {

// One row of n features: mean = csum(x)/n; c = x - mean; var = csum(c*c)/n;
// rstd = 1/sqrt(var + eps); xhat = c*rstd; y = xhat*w + b. y doubles as the c*c scratch.
LOCKSTEP_HD inline void layernorm_row_forward(const float* x, std::int64_t n, const float* w,
                                              const float* b, float eps, const SumRuleHD& rule,
                                              float* xhat, float* rstd, float* y) {
  const float fn = static_cast<float>(n);
  const float m = div(csum(x, n, rule), fn);
  for (std::int64_t k = 0; k < n; ++k) {
    xhat[k] = x[k] - m;
    y[k] = xhat[k] * xhat[k];
  }
  const float v = div(csum(y, n, rule), fn);
  const float rs = div(1.0f, sqrt(v + eps));
  *rstd = rs;
  for (std::int64_t k = 0; k < n; ++k) {
    xhat[k] = xhat[k] * rs;
    y[k] = xhat[k] * w[k] + b[k];
  }
}

// The input gradient of one row of n features (rule: the feature axis): g = dy*w;
// c1 = csum(g)/n; c2 = csum(g*xhat)/n; dx = (g - (xhat*c2 + c1))*rstd, added to dx when
// `accumulate` (the residual stream).
LOCKSTEP_HD inline void layernorm_row_backward(const float* dy, const float* xhat, float rstd,
                                               const float* w, std::int64_t n,
                                               const SumRuleHD& rule, bool accumulate, float* dx) {
  const float fn = static_cast<float>(n);
  const float c1 = div(csum_of(n, rule, [dy, w](std::int64_t k) { return dy[k] * w[k]; }), fn);
  const float c2 =
      div(csum_of(n, rule, [dy, w, xhat](std::int64_t k) { return (dy[k] * w[k]) * xhat[k]; }), fn);
  for (std::int64_t k = 0; k < n; ++k) {
    const float g = dy[k] * w[k];
    const float d = (g - (xhat[k] * c2 + c1)) * rstd;
    dx[k] = accumulate ? dx[k] + d : d;
  }
}

// Column j of the parameter gradients over T token rows of n features (rule: the token axis):
// dw = csum over t of dy[t][j]*xhat[t][j], db = csum over t of dy[t][j].
LOCKSTEP_HD inline void layernorm_param_grad_column(const float* dy, const float* xhat,
                                                    std::int64_t T, std::int64_t n, std::int64_t j,
                                                    const SumRuleHD& tokens, float* dw, float* db) {
  const float* d = dy + j;
  const float* x = xhat + j;
  *dw = csum_of(T, tokens, [d, x, n](std::int64_t t) { return d[t * n] * x[t * n]; });
  *db = csum_of(T, tokens, [d, n](std::int64_t t) { return d[t * n]; });
}

// The maximum of x[0..n), n >= 1, as the CPU rows scan it: m = x[0], then m = x[j] > m ? x[j] : m.
LOCKSTEP_HD inline float row_max(const float* x, std::int64_t n) {
  float m = x[0];
  for (std::int64_t j = 1; j < n; ++j) m = x[j] > m ? x[j] : m;
  return m;
}

// Row i of a causal softmax, in place over the row's C scores (n = i + 1 keys):
// s[j] = s[j]*scale; m = s[0], then m = s[j] > m ? s[j] : m; e[j] = exp(s[j] - m) (Lockstep's
// exp); P[j] = e[j] / csum(e[0..n)) under `rule` (the feature axis); P[j] = +0.0 for j > i.
LOCKSTEP_HD inline void softmax_causal_row(float* s, std::int64_t C, std::int64_t i, float scale,
                                           const SumRuleHD& rule) {
  const std::int64_t n = i + 1;
  for (std::int64_t j = 0; j < n; ++j) s[j] = s[j] * scale;
  const float m = row_max(s, n);
  for (std::int64_t j = 0; j < n; ++j) s[j] = math::exp_shifted(s[j], m);
  const float sum = csum(s, n, rule);
  for (std::int64_t j = 0; j < n; ++j) s[j] = div(s[j], sum);
  for (std::int64_t j = n; j < C; ++j) s[j] = 0.0f;
}

// Row i of the causal softmax's backward, in place over g (dP in, dS out; n = i + 1):
// dot = cdot(p[0..n), g[0..n)); g[j] = (p[j] * (g[j] - dot)) * scale for j < n, +0.0 after.
LOCKSTEP_HD inline void softmax_backward_row(const float* p, float* g, std::int64_t C,
                                             std::int64_t i, float scale, const SumRuleHD& rule) {
  const std::int64_t n = i + 1;
  const float dot = cdot(p, g, n, rule);
  for (std::int64_t j = 0; j < n; ++j) g[j] = (p[j] * (g[j] - dot)) * scale;
  for (std::int64_t j = n; j < C; ++j) g[j] = 0.0f;
}

// The vocab-parallel cross-entropy of one token over this rank's vl logits l, in the phases
// around the TP exchanges (with TP = 1 the exchanges are the identity):
// 1. the local max, row_max(l, vl) (then the TP max gives M);
//    the TP max ends with a zero maximum made +0.0 (MPI_MAX may pick either zero:
//    TpContext::allreduce_max), also at TP = 1;
LOCKSTEP_HD inline float ce_max_signed_zero(float M) {
  return M == 0.0f ? 0.0f : M;
}
// 2. the target logit (l[y] when this rank holds the label's row, y in [0, vl), else -0.0),
//    then l = exp(l - M) in place and *part = csum(l) under `rule` (the TP sum of the parts
//    gives S, of the targets the target logit);
LOCKSTEP_HD inline void ce_row_exp(float* l, std::int64_t vl, float M, std::int64_t y,
                                   const SumRuleHD& rule, float* part, float* target) {
  *target = (y >= 0 && y < vl) ? l[y] : kNegZero;
  for (std::int64_t v = 0; v < vl; ++v) l[v] = math::exp_shifted(l[v], M);
  *part = csum(l, vl, rule);
}
// 3. the token's loss (log(S) + M) - target (Lockstep's log);
LOCKSTEP_HD inline float ce_row_loss(float S, float M, float target) {
  return (math::log(S) + M) - target;
}
// and the backward over the exponentials e of phase 2, in place: g = (e / S) * loss_scale, and
// at the label's row ((e_y / S) - 1) * loss_scale.
LOCKSTEP_HD inline void ce_row_backward(float* g, std::int64_t vl, float S, std::int64_t y,
                                        float loss_scale) {
  const bool owner = y >= 0 && y < vl;
  const float ey = owner ? g[y] : 0.0f;
  for (std::int64_t v = 0; v < vl; ++v) g[v] = div(g[v], S) * loss_scale;
  if (owner) g[y] = (div(ey, S) - 1.0f) * loss_scale;
}

// The float32 scalars of one AdamW step (lockstep::AdamWScalars, copied field by field by the
// caller so runtime/ does not depend on optim/).
struct AdamWScalarsHD {
  bool decay;
  float decay_factor, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps, step_size;
};

LOCKSTEP_HD inline void adamw_element(const AdamWScalarsHD& s, float& p, float g, float& m,
                                      float& v) {
  float pi = p;
  if (s.decay) pi = pi * s.decay_factor;
  float mi = m * s.beta1;
  mi = fma(g, s.one_minus_beta1, mi);
  float vi = v * s.beta2;
  vi = vi + (s.one_minus_beta2 * g) * g;
  float denom = div(sqrt(vi), s.bc2_sqrt);
  denom = denom + s.eps;
  pi = pi - div(s.step_size * mi, denom);
  p = pi;
  m = mi;
  v = vi;
}

// Gradient of one embedding row r, column c: the canonical sum over tokens t = 0 .. T-1 of
// (row_of[t] == r ? dX[t * ld + c] : -0.0) under `rule` (the token axis). Only the tokens of
// row r are read: `pos[0 .. count)` lists them in ascending order (a counting sort by row gives
// it); leaves without one are -0.0, which this pushes as the largest -0.0 nodes of the tree that
// fit (x + -0.0 == x exactly, so a -0.0 node is the identity and costs no arithmetic beyond the
// merges the full tree would do).
LOCKSTEP_HD inline float embedding_grad_column(const std::int32_t* pos, std::int64_t count,
                                               const float* dX, std::int64_t ld, std::int64_t c,
                                               std::int64_t T, const SumRuleHD& rule) {
  const AxisHD axis(rule, T);
  float value[2 * kTreeLevels + 2] = {};
  int depth = 0;
  std::int64_t pushed = 0;  // leaves pushed so far
  auto push = [&](float v, std::int64_t width) {
    for (int k = axis.merges_after_node(pushed, pushed + width); k > 0; --k) v = value[--depth] + v;
    value[depth++] = v;
    pushed += width;
  };
  // Pushes -0.0 nodes until `pushed == target`, each the largest node that fits.
  auto skip_to = [&](std::int64_t target) {
    while (pushed < target) push(kNegZero, axis.node_end(pushed, target, target) - pushed);
  };
  // The leaf of token t: its sequence's leaves, then its block in the sequence.
  auto leaf_of = [&](std::int64_t t) {
    return (t / axis.seg_len) * axis.per_seg + (t % axis.seg_len) / axis.block;
  };
  std::int64_t i = 0;
  while (i < count) {
    const std::int64_t leaf = leaf_of(pos[i]);
    skip_to(leaf);
    float acc = kNegZero;
    for (; i < count && leaf_of(pos[i]) == leaf; ++i) acc = acc + dX[pos[i] * ld + c];
    push(acc, 1);
  }
  skip_to(axis.count());
  if (depth == 0) return kNegZero;
  float acc = value[depth - 1];
  for (int l = depth - 2; l >= 0; --l) acc = value[l] + acc;
  return acc;
}

}  // namespace lockstep::hd
