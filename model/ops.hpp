// Row-wise kernels of the GPT model: canonical row sums, LayerNorm forward/backward and
// Philox dropout masks.
// Determinism contract (docs/design.md section 2): every reduction over features is the canonical
// csum of runtime/csum.hpp (block ctx.reduce_block, chains from -0.0, the tree ctx.tree over a
// flat row), computed per row; rows are independent, so threads (which split rows) never change
// bits. LayerNorm parameter gradients reduce over tokens with csum_rows under ctx.rule() (pass
// a token context, KernelCtx::over_sequences; one microbatch node = one subtree).
#pragma once

#include <cstdint>

#include "runtime/isa.hpp"

namespace lockstep {

// LayerNorm over the last dimension (n features) of T rows, per row:
//   mean = csum(x)/n; c = x - mean; var = csum(c*c)/n; rstd = 1/sqrt(var + eps);
//   xhat = c * rstd; y = xhat * w + b   (no FMA anywhere).
// Stores xhat [T, n] and rstd [T] for the backward. Computed by model/kernels/ln_rows.hpp's per-ISA
// kernels (row sums across rows in vector lanes); same bits on every path and thread count.
void layernorm_forward(const KernelCtx& ctx, const float* x, std::int64_t T, std::int64_t n,
                       const float* w, const float* b, float eps, float* xhat, float* rstd,
                       float* y);
// h = h + res (element by element, the residual stream), then layernorm_forward(h): the bits of
// the two passes done one after the other, in one pass over each row group. res must not
// alias h, xhat or y.
void residual_layernorm_forward(const KernelCtx& ctx, float* h, const float* res, std::int64_t T,
                                std::int64_t n, const float* w, const float* b, float eps,
                                float* xhat, float* rstd, float* y);
// Backward, per row: g = dy * w; c1 = csum(g)/n; c2 = csum(g*xhat)/n;
//   dx = (g - (xhat*c2 + c1)) * rstd.   Parameter grads (over tokens, overwritten):
//   dw = csum_rows(dy * xhat), db = csum_rows(dy) (the bits of runtime/csum.hpp's csum_rows,
//   computed in the same parallel region as dx: when T >= 2 * (token leaves) and there are
//   enough leaves, threads split token leaves and each leaf's column chains are summed in
//   the same pass as its dx, then merged by csum_rows' tree; otherwise column chunks split
//   over threads). `scratch` holds T*n floats of workspace (the token leaves, 2n per leaf);
//   its contents afterwards are unspecified. dy must not alias dx_out or scratch.
// If accumulate, dx_out = dx_out + dx (the residual stream), else dx_out = dx.
void layernorm_backward(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                        const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                        bool accumulate, float* dw, float* db, float* scratch);

// Dropout randomness (docs/design.md section 3). Stream from (step, layer code, site):
//   stream = 2^63 | step << 24 | layer_code << 4 | site
// (init streams are the small parameter-table indices, so they never collide). layer_code 0
// is the embedding, layer i has code i + 1. Sites: 0 embedding output, 1 attention
// probabilities, 2 attention proj output, 3 fc2 output.
enum DropoutSite : int { kDropEmbed = 0, kDropAttn = 1, kDropProj = 2, kDropFc2 = 3 };
std::uint64_t dropout_stream(std::int64_t step, std::int64_t layer_code, int site);
// keep[k] = uniform_at(seed, stream, first + k) >= p for k in [0, n)  (uniform in [0, 1) with
// 2^24 levels, runtime/random.hpp), generated in batches by runtime/philox_batch.hpp (same
// bits on every ISA path). Single thread.
void dropout_keep_row(const KernelCtx& ctx, std::uint64_t seed, std::uint64_t stream,
                      std::int64_t first, std::int64_t n, float p, std::uint8_t* keep);
// Token-site masks for T = mb * context rows of F logical features: the element (token t,
// feature f) has logical index (seq_ids[t / context] * context + t % context) * F + f.
void dropout_keep_tokens(const KernelCtx& ctx, std::uint64_t seed, std::uint64_t stream,
                         const std::int64_t* seq_ids, std::int64_t T, std::int64_t context,
                         std::int64_t F, float p, std::uint8_t* keep);
// y = keep ? x * scale : +0.0 (in place allowed), n elements.
void dropout_apply(const KernelCtx& ctx, const float* x, const std::uint8_t* keep, float scale,
                   std::int64_t n, float* y);

}  // namespace lockstep
