#include "model/ops.hpp"
#include "runtime/csum_counter.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/csum.hpp"
#include "runtime/philox_batch.hpp"

namespace lockstep {

namespace {
constexpr int kR = 8;  // rows advanced together

using RowCounters = csum_detail::RowCounters<kR>;
}  // namespace

void csum_each_row(const float* X, std::int64_t rows, std::int64_t n, std::int64_t ld, int block,
                   float* out) {
  std::int64_t r0 = 0;
  for (; r0 + kR <= rows; r0 += kR) {
    RowCounters c;
    for (std::int64_t lo = 0; lo < n; lo += block) {
      const std::int64_t hi = std::min<std::int64_t>(n, lo + block);
      float acc[kR];
      for (int r = 0; r < kR; ++r) acc[r] = kAdditiveIdentity;
      for (std::int64_t k = lo; k < hi; ++k)
        for (int r = 0; r < kR; ++r) acc[r] += X[(r0 + r) * ld + k];
      for (int r = 0; r < kR; ++r) c.push(r, acc[r]);
    }
    for (int r = 0; r < kR; ++r) out[r0 + r] = c.result(r);
  }
  for (; r0 < rows; ++r0) out[r0] = csum(X + r0 * ld, n, block);
}

namespace {
// LayerNorm forward of rows [0, T); with res != nullptr each row group first does the residual
// add x = x + res (in place, element by element), so one pass serves both.
void layernorm_forward_impl(const KernelCtx& ctx, float* xw, const float* x, const float* res,
                            std::int64_t T, std::int64_t n, const float* w, const float* b,
                            float eps, float* xhat, float* rstd, float* y) {
  const std::int64_t groups = (T + kR - 1) / kR;
  const int B = ctx.reduce_block;
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t gi = 0; gi < groups; ++gi) {
    const std::int64_t t0 = gi * kR, rows = std::min<std::int64_t>(kR, T - t0);
    if (res) {
      float* hw = xw + t0 * n;
      const float* rr = res + t0 * n;
      for (std::int64_t e = 0; e < rows * n; ++e) hw[e] = hw[e] + rr[e];
    }
    float mean[kR], var[kR];
    csum_each_row(x + t0 * n, rows, n, n, B, mean);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float m = mean[r] / static_cast<float>(n);
      const float* xr = x + (t0 + r) * n;
      float* c = xhat + (t0 + r) * n;
      for (std::int64_t k = 0; k < n; ++k) c[k] = xr[k] - m;
      float* yr = y + (t0 + r) * n;  // c*c staged in y (overwritten below)
      for (std::int64_t k = 0; k < n; ++k) yr[k] = c[k] * c[k];
    }
    csum_each_row(y + t0 * n, rows, n, n, B, var);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float v = var[r] / static_cast<float>(n);
      const float rs = 1.0f / std::sqrt(v + eps);
      rstd[t0 + r] = rs;
      float* c = xhat + (t0 + r) * n;
      float* yr = y + (t0 + r) * n;
      for (std::int64_t k = 0; k < n; ++k) {
        c[k] = c[k] * rs;
        yr[k] = c[k] * w[k] + b[k];
      }
    }
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

namespace {
constexpr std::int64_t kColChunk = 64;  // columns of one parameter-gradient work unit

// dw[j] = csum over rows t of (dy[t,j] * xhat[t,j]) and db[j] = csum over t of dy[t,j] for the
// columns [j0, j0 + w): the bits of csum_rows (runtime/csum.cpp) on the staged product and on
// dy: per column a chain from -0.0 over each block of B rows, blocks merged by the same binary
// counter (left + right), the remaining levels folded from the top down. The product is rounded
// before the add exactly as the staged buffer was (-ffp-contract=off: no FMA).
void ln_param_grad_cols(const float* dy, const float* xhat, std::int64_t T, std::int64_t n,
                        std::int64_t j0, std::int64_t w, int B, float* dw, float* db) {
  float lw[64][kColChunk], lb[64][kColChunk];
  std::int64_t weight[64];
  float leaf_w[kColChunk], leaf_b[kColChunk];
  int depth = 0;
  for (std::int64_t lo = 0; lo < T; lo += B) {
    const std::int64_t hi = std::min<std::int64_t>(T, lo + B);
    for (std::int64_t j = 0; j < w; ++j) leaf_w[j] = leaf_b[j] = kAdditiveIdentity;
    for (std::int64_t i = lo; i < hi; ++i) {
      const float* dr = dy + i * n + j0;
      const float* xr = xhat + i * n + j0;
      for (std::int64_t j = 0; j < w; ++j) {
        const float prod = dr[j] * xr[j];
        leaf_w[j] += prod;
        leaf_b[j] += dr[j];
      }
    }
    std::int64_t wt = 1;
    while (depth > 0 && weight[depth - 1] == wt) {
      --depth;
      for (std::int64_t j = 0; j < w; ++j) {
        leaf_w[j] = lw[depth][j] + leaf_w[j];
        leaf_b[j] = lb[depth][j] + leaf_b[j];
      }
      wt *= 2;
    }
    std::copy(leaf_w, leaf_w + w, lw[depth]);
    std::copy(leaf_b, leaf_b + w, lb[depth]);
    weight[depth++] = wt;
  }
  float* ow = dw + j0;
  float* ob = db + j0;
  if (depth == 0) {
    std::fill(ow, ow + w, kAdditiveIdentity);
    std::fill(ob, ob + w, kAdditiveIdentity);
    return;
  }
  std::copy(lw[depth - 1], lw[depth - 1] + w, ow);
  std::copy(lb[depth - 1], lb[depth - 1] + w, ob);
  for (int l = depth - 2; l >= 0; --l)
    for (std::int64_t j = 0; j < w; ++j) {
      ow[j] = lw[l][j] + ow[j];
      ob[j] = lb[l][j] + ob[j];
    }
}
}  // namespace

void layernorm_backward(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                        const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                        bool accumulate, float* dw, float* db, float* scratch) {
  validate(ctx);
  const std::int64_t groups = (T + kR - 1) / kR;
  const std::int64_t col_chunks = (n + kColChunk - 1) / kColChunk;
  const int B = ctx.reduce_block;
  const float fn = static_cast<float>(n);
  // One parallel region: the parameter gradients (column chunks; they read dy and xhat only)
  // and the input gradient (row groups; writes scratch and dx_out, which alias neither dy
  // nor xhat) are independent, so the first loop ends without a barrier.
#pragma omp parallel num_threads(ctx.threads)
  {
#pragma omp for schedule(static) nowait
    for (std::int64_t c = 0; c < col_chunks; ++c) {
      const std::int64_t j0 = c * kColChunk;
      ln_param_grad_cols(dy, xhat, T, n, j0, std::min(kColChunk, n - j0), B, dw, db);
    }
    static thread_local std::vector<float> gx_buf;
    if (gx_buf.size() < static_cast<std::size_t>(kR * n))
      gx_buf.resize(static_cast<std::size_t>(kR * n));
    float* gx = gx_buf.data();
#pragma omp for schedule(static)
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      const std::int64_t t0 = gi * kR, rows = std::min<std::int64_t>(kR, T - t0);
      float s1[kR], s2[kR];
      float* g = scratch + t0 * n;  // g = dy * w in this group's rows of scratch
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < n; ++k) {
          g[r * n + k] = dy[(t0 + r) * n + k] * w[k];
          gx[r * n + k] = g[r * n + k] * xhat[(t0 + r) * n + k];
        }
      csum_each_row(g, rows, n, n, B, s1);
      csum_each_row(gx, rows, n, n, B, s2);
      for (std::int64_t r = 0; r < rows; ++r) {
        const float c1 = s1[r] / fn, c2 = s2[r] / fn, rs = rstd[t0 + r];
        const float* xh = xhat + (t0 + r) * n;
        float* o = dx_out + (t0 + r) * n;
        const float* gr = g + r * n;
        if (accumulate) {
          for (std::int64_t k = 0; k < n; ++k) o[k] = o[k] + (gr[k] - (xh[k] * c2 + c1)) * rs;
        } else {
          for (std::int64_t k = 0; k < n; ++k) o[k] = (gr[k] - (xh[k] * c2 + c1)) * rs;
        }
      }
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
