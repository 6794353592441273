// Vocab-parallel embedding and cross-entropy (Megatron-LM), and the token-axis gradient of an
// embedding lookup.
//
// TP rank r owns vocab rows [r*V/tp, (r+1)*V/tp) of the (tied) embedding.
//
// Lookup forward: each rank writes its own rows' vectors and -0.0 vectors for tokens it does
// not own (IEEE's additive identity: with +0.0 a -0.0 embedding value would flip sign), then
// the TP allreduce sums one real vector with -0.0s: exact, so the result equals the TP=1
// lookup bit for bit in every mode.
//
// Lookup backward (token_row_grad): the gradient of row r is the canonical sum over the
// microbatch's TOKEN axis (ctx.rule(): pass the token context, KernelCtx::over_sequences) of
// (row_of[t] == r ? dX[t] : -0.0). Computed sparsely with the same bits: per token leaf, each
// touched row is a left-to-right chain from -0.0 over that leaf's tokens touching it (untouched
// rows are exactly -0.0); leaves merge by the tree's post-order schedule (docs/design.md
// section 2), where a row present on one side only is copied (x + -0.0 == x) and a row present
// on both sides is added left + right. Untouched rows end as -0.0. The result is the
// microbatch's subtree of the global token-axis csum.
//
// Cross-entropy forward never gathers logits: per token, M = max over the vocab (local max,
// then exact MPI_MAX over TP; zeros canonicalized to +0.0), S = csum over the vocab of
// exp(l - M) (local csum over the shard, a subtree when V/tp is a node of the vocab row's tree,
// then tree allreduce), the target logit l_y from its owner (-0.0 elsewhere, allreduce;
// exact). loss_t = (log(S) + M) - l_y. Backward: dlogits = (exp(l - M) / S - onehot) * scale,
// the per-token loss_scale applied before any reduction. exp and log are lockstep::math.
#pragma once

#include <cstdint>

#include "parallel/tp_layers.hpp"

namespace lockstep {

// out[t, :] = embedding row tokens[t] (all TP ranks get the full vectors). E_l is this rank's
// shard [V/tp, d] holding rows [vocab_lo, vocab_lo + V/tp). Throws on tokens outside [0, V).
void vocab_embedding_forward(const TpContext& tp, const std::int32_t* tokens, std::int64_t T,
                             const float* E_l, std::int64_t vocab, std::int64_t d, float* out);

// out[r, :] (r in [0, rows)) = canonical token-axis sum of dX[t, :] over tokens t with
// row_of[t] == row_lo + r (see the header comment). dX is [T, width] with leading dim ld.
// Overwrites out [rows, width].
void token_row_grad(const KernelCtx& ctx, const std::int32_t* row_of, std::int64_t T,
                    const float* dX, std::int64_t width, std::int64_t ld, std::int64_t row_lo,
                    std::int64_t rows, float* out);

struct CrossEntropyState {
  // Per token: max (after the TP max), S (after the TP sum).
  float* max = nullptr;
  float* sumexp = nullptr;
};

// logits_l [T, V/tp] is overwritten with exp(l - M). loss_tok[t] = per-token loss.
// scratch must hold 2*T floats. Labels outside [0, V) throw.
void vocab_parallel_ce_forward(const TpContext& tp, float* logits_l, const std::int32_t* labels,
                               std::int64_t T, std::int64_t vocab, float* max, float* sumexp,
                               float* scratch, float* loss_tok);
// exp_l (from the forward) becomes dlogits_l = (exp_l / S - onehot) * loss_scale.
void vocab_parallel_ce_backward(const TpContext& tp, float* exp_l, const float* sumexp,
                                const std::int32_t* labels, std::int64_t T, std::int64_t vocab,
                                float loss_scale);

}  // namespace lockstep
