// Elementwise and row kernels of the CUDA backend, in the pairs Megatron-Core's op catalog
// uses: a deterministic version with a fixed reduction order (no float atomics) and, where the
// op reduces across threads, an atomic-based fast version as the determinism-tax baseline.
// All pointers are device memory; everything runs on `stream`.
//
// Determinism contract:
//   *_canonical / deterministic versions run the host/device bodies of
//   runtime/cuda/philox_core.hpp and row_ops_core.hpp, which the CPU tests hold to the CPU
//   kernels bit for bit (fill_uniform, dropout masks, LayerNorm forward and backward, the
//   causal softmax and its backward, the cross-entropy, AdamW, embedding backward); a thread's
//   result never depends on the launch shape.
//   layernorm_forward_fast: warp-shuffle reductions (a fixed order, so repeatable on one GPU
//   model, but not the canonical sum: different bits from the CPU).
//   embedding_backward_atomic: float atomicAdd in whatever order the hardware applies them:
//   not repeatable; this is the fast-mode baseline only.
//   math_apply / gelu_tanh_and_grad: lockstep::math's kernels compiled for the device
//   (runtime/cuda/math_device.hpp), element by element: the CPU's bits.
// The attention products run as full-size canonical GEMMs (gemm_canonical.hpp; the CPU's
// causal products' bits, unit.test_cuda_attn_host). Not here yet: their causal skip, the TP
// exchanges of the vocab-parallel cross-entropy (one GPU: cross_entropy_*_canonical).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include "runtime/cuda/row_ops_core.hpp"

namespace lockstep::cuda {

// out[k] = fma(uniform_at(seed, stream_id, first + k), hi - lo, lo), k in [0, n): the bits of
// lockstep::fill_uniform.
void fill_uniform(cudaStream_t stream, std::uint64_t seed, std::uint64_t stream_id,
                  std::int64_t first, std::int64_t n, float lo, float hi, float* out);
// keep[k] = uniform_at(seed, stream_id, first + k) >= p: lockstep::dropout_keep_row's bits.
void dropout_keep(cudaStream_t stream, std::uint64_t seed, std::uint64_t stream_id,
                  std::int64_t first, std::int64_t n, float p, std::uint8_t* keep);

// LayerNorm forward over T rows of n features (model/ops.hpp layernorm_forward, bit for bit):
// one thread per row running hd::layernorm_row_forward.
void layernorm_forward_canonical(cudaStream_t stream, const float* x, std::int64_t T,
                                 std::int64_t n, const float* w, const float* b, float eps,
                                 const hd::SumRuleHD& rule, float* xhat, float* rstd, float* y);
// The same formula with one warp per row and shuffle reductions (fast mode).
void layernorm_forward_fast(cudaStream_t stream, const float* x, std::int64_t T, std::int64_t n,
                            const float* w, const float* b, float eps, float* xhat, float* rstd,
                            float* y);

// LayerNorm backward over T rows of n features (model/ops.hpp layernorm_backward, bit for
// bit): dx (added to dx_out when accumulate) with one thread per row running
// hd::layernorm_row_backward under `features`, and dw, db (overwritten) with one thread per
// column running hd::layernorm_param_grad_column under `tokens` (the token axis).
void layernorm_backward_canonical(cudaStream_t stream, const float* dy, const float* xhat,
                                  const float* rstd, const float* w, std::int64_t T, std::int64_t n,
                                  const hd::SumRuleHD& features, const hd::SumRuleHD& tokens,
                                  float* dx_out, bool accumulate, float* dw, float* db);

// Causal softmax over `mats` row-major C x C score matrices (one per sequence and head), in
// place: model/kernels/attn_rows.hpp softmax_causal_rows over rows [0, C) of each, bit for bit
// (one thread per row running hd::softmax_causal_row; rule: the feature axis).
void softmax_causal_canonical(cudaStream_t stream, float* S, std::int64_t mats, std::int64_t C,
                              float scale, const hd::SumRuleHD& rule);
// Its backward: G (dP in, dS out) from P, softmax_backward_rows' bits.
void softmax_backward_canonical(cudaStream_t stream, const float* P, float* G, std::int64_t mats,
                                std::int64_t C, float scale, const hd::SumRuleHD& rule);

// Cross-entropy of T tokens over the full vocabulary V on one GPU (TP = 1):
// lockstep::vocab_parallel_ce_forward's bits (one thread per token running hd::row_max,
// ce_row_exp and ce_row_loss; rule: the feature axis). logits becomes exp(logits - max).
// Labels must lie in [0, V) (the host checks them before the upload).
void cross_entropy_forward_canonical(cudaStream_t stream, float* logits, const std::int32_t* labels,
                                     std::int64_t T, std::int64_t V, const hd::SumRuleHD& rule,
                                     float* max, float* sumexp, float* loss);
// Its backward in place over the exponentials: vocab_parallel_ce_backward's bits.
void cross_entropy_backward_canonical(cudaStream_t stream, float* exp_logits, const float* sumexp,
                                      const std::int32_t* labels, std::int64_t T, std::int64_t V,
                                      float loss_scale);

// One AdamW step over n elements in place (optim/adamw.hpp's operation order, bit for bit).
void adamw_step(cudaStream_t stream, const hd::AdamWScalarsHD& s, float* param, const float* grad,
                float* m, float* v, std::int64_t n);

// out[r, c] (rows x width, overwritten) = the canonical sum over tokens of row r of
// dX[t * ld + c] under rule (the token axis): lockstep::token_row_grad's bits. offsets/positions: a TokensByRow
// (runtime/cuda/tokens_by_row.hpp) uploaded.
void embedding_backward_canonical(cudaStream_t stream, const std::int32_t* offsets,
                                  const std::int32_t* positions, std::int64_t rows, const float* dX,
                                  std::int64_t width, std::int64_t ld, std::int64_t T,
                                  const hd::SumRuleHD& rule, float* out);
// out = 0, then atomicAdd of every token's row of dX into its embedding row (fast mode).
void embedding_backward_atomic(cudaStream_t stream, const std::int32_t* row_of, std::int64_t T,
                               const float* dX, std::int64_t width, std::int64_t ld,
                               std::int64_t row_lo, std::int64_t rows, float* out);

// The functions of lockstep::math (runtime/transcendental.hpp) on the device.
enum class MathFn : int { exp, log, tanh, erf, sinpi, cospi, gelu_tanh, gelu_tanh_grad };
// y[i] = fn(x[i]) for i in [0, n) (y may alias x): lockstep::math's array API, bit for bit.
void math_apply(cudaStream_t stream, MathFn fn, const float* x, float* y, std::int64_t n);
// y[i] = gelu_tanh(x[i]), g[i] = gelu_tanh_grad(x[i]) in one evaluation
// (math::gelu_tanh_and_grad's bits; g may alias x, y may not).
void gelu_tanh_and_grad(cudaStream_t stream, const float* x, float* y, float* g, std::int64_t n);

// out[i] = lower[i] + upper[i] (one node of the canonical tree over ranks; out may alias
// either input).
void tree_add(cudaStream_t stream, const float* lower, const float* upper, float* out,
              std::int64_t n);

}  // namespace lockstep::cuda
