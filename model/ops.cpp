#include "model/ops.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/kernels/ln_rows.hpp"
#include "runtime/csum.hpp"
#include "runtime/philox_batch.hpp"

namespace lockstep {

namespace {
constexpr std::int64_t kLnRows = 16;    // rows of one work unit (a multiple of every path's lanes)
constexpr std::int64_t kColChunk = 64;  // columns of one parameter-gradient work unit

// The trees of one LayerNorm call: a feature row's leaves (flat, n features) and, for the
// backward, the token axis' (ctx.rule() over T rows: flat, or sequences).
struct LnTables {
  LeafTable row, tokens;
  LnTables(const KernelCtx& ctx, std::int64_t n, std::int64_t T)
      : row(AxisLeaves(ctx.flat().rule(), n)), tokens(AxisLeaves(ctx.rule(), T)) {}
  ln_detail::LnTrees trees(const KernelCtx& ctx) const {
    return {ctx.reduce_block, row.merges(), tokens.count(), tokens.bounds(), tokens.merges()};
  }
};

// LayerNorm forward of rows [0, T); with res != nullptr each row group first does the residual
// add x = x + res (in place, element by element), so one pass serves both. Rows are
// independent, so how threads split the groups never changes bits.
void layernorm_forward_impl(const KernelCtx& ctx, float* xw, const float* x, const float* res,
                            std::int64_t T, std::int64_t n, const float* w, const float* b,
                            float eps, float* xhat, float* rstd, float* y) {
  validate(ctx);
  const LnTables tables(ctx.flat(), n, 0);
  const ln_detail::LnTrees tr = tables.trees(ctx);
  const std::int64_t groups = (T + kLnRows - 1) / kLnRows;
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t gi = 0; gi < groups; ++gi) {
    const std::int64_t t0 = gi * kLnRows, t1 = std::min(T, t0 + kLnRows);
    ln_detail::forward_rows(ctx, tr, xw, x, res, t0, t1, n, w, b, eps, xhat, rstd, y);
  }
}
}  // namespace

void layernorm_forward(const KernelCtx& ctx, const float* x, std::int64_t T, std::int64_t n,
                       const float* w, const float* b, float eps, float* xhat, float* rstd,
                       float* y) {
  layernorm_forward_impl(ctx, nullptr, x, nullptr, T, n, w, b, eps, xhat, rstd, y);
}

void residual_layernorm_forward(const KernelCtx& ctx, float* h, const float* res, std::int64_t T,
                                std::int64_t n, const float* w, const float* b, float eps,
                                float* xhat, float* rstd, float* y) {
  layernorm_forward_impl(ctx, h, h, res, T, n, w, b, eps, xhat, rstd, y);
}

void layernorm_backward(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                        const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                        bool accumulate, float* dw, float* db, float* scratch) {
  validate(ctx);
  const std::int64_t col_chunks = (n + kColChunk - 1) / kColChunk;
  const LnTables tables(ctx, n, T);
  const ln_detail::LnTrees tr = tables.trees(ctx);
  const std::int64_t blocks = tr.leaves;
  // Fused path: threads split whole token leaves; each leaf's pass computes its rows' dx
  // and its parameter-gradient leaves (dy and xhat read once), kept in scratch (2n floats per
  // block); after the barrier the leaves are merged by csum_rows' tree, column chunks split
  // over threads. It needs the leaves to fit in scratch (T*n floats) and enough blocks to keep
  // every thread busy; otherwise the two-loop path below (same bits).
  const bool fused = 2 * blocks <= T && (ctx.threads == 1 || blocks >= 2 * ctx.threads);
  if (fused) {
#pragma omp parallel num_threads(ctx.threads)
    {
#pragma omp for schedule(static)
      for (std::int64_t u = 0; u < blocks; ++u)
        ln_detail::backward_blocks(ctx, tr, dy, xhat, rstd, w, n, u, u + 1, dx_out, accumulate,
                                   scratch);
#pragma omp for schedule(static)
      for (std::int64_t c = 0; c < col_chunks; ++c) {
        const std::int64_t j0 = c * kColChunk;
        ln_detail::fold_leaves(ctx, tr, scratch, n, j0, std::min(kColChunk, n - j0), dw, db);
      }
    }
    return;
  }
  const std::int64_t groups = (T + kLnRows - 1) / kLnRows;
  // One parallel region: the parameter gradients (column chunks; they read dy and xhat only)
  // and the input gradient (row groups; write dx_out, which aliases neither dy nor xhat) are
  // independent, so the first loop ends without a barrier.
#pragma omp parallel num_threads(ctx.threads)
  {
#pragma omp for schedule(static) nowait
    for (std::int64_t c = 0; c < col_chunks; ++c) {
      const std::int64_t j0 = c * kColChunk;
      ln_detail::param_grad_cols(ctx, tr, dy, xhat, n, j0, std::min(kColChunk, n - j0), dw, db);
    }
#pragma omp for schedule(static)
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      const std::int64_t t0 = gi * kLnRows, t1 = std::min(T, t0 + kLnRows);
      ln_detail::backward_rows(ctx, tr, dy, xhat, rstd, w, t0, t1, n, dx_out, accumulate);
    }
  }
}

std::uint64_t dropout_stream(std::int64_t step, std::int64_t layer_code, int site) {
  return (std::uint64_t{1} << 63) | (static_cast<std::uint64_t>(step) << 24) |
         (static_cast<std::uint64_t>(layer_code) << 4) | static_cast<std::uint64_t>(site);
}

void dropout_keep_row(const KernelCtx& ctx, std::uint64_t seed, std::uint64_t stream,
                      std::int64_t first, std::int64_t n, float p, std::uint8_t* keep) {
  dropout_keep_mask(ctx, seed, stream, first, n, p, keep);
}

void dropout_keep_tokens(const KernelCtx& ctx, std::uint64_t seed, std::uint64_t stream,
                         const std::int64_t* seq_ids, std::int64_t T, std::int64_t context,
                         std::int64_t F, float p, std::uint8_t* keep) {
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t first = (seq_ids[t / context] * context + t % context) * F;
    dropout_keep_row(ctx, seed, stream, first, F, p, keep + t * F);
  }
}

void dropout_apply(const KernelCtx& ctx, const float* x, const std::uint8_t* keep, float scale,
                   std::int64_t n, float* y) {
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) y[i] = keep[i] ? x[i] * scale : 0.0f;
}

}  // namespace lockstep
