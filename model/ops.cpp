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

void layernorm_forward(const KernelCtx& ctx, const float* x, std::int64_t T, std::int64_t n,
                       const float* w, const float* b, float eps, float* xhat, float* rstd,
                       float* y) {
  const std::int64_t groups = (T + kR - 1) / kR;
  const int B = ctx.reduce_block;
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t gi = 0; gi < groups; ++gi) {
    const std::int64_t t0 = gi * kR, rows = std::min<std::int64_t>(kR, T - t0);
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

void layernorm_backward(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                        const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                        bool accumulate, float* dw, float* db, float* scratch) {
  // Parameter grads first (they read dy and xhat only).
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t k = 0; k < n; ++k) scratch[t * n + k] = dy[t * n + k] * xhat[t * n + k];
  csum_rows(ctx, scratch, T, n, n, dw);
  csum_rows(ctx, dy, T, n, n, db);
  const std::int64_t groups = (T + kR - 1) / kR;
  const int B = ctx.reduce_block;
  const float fn = static_cast<float>(n);
#pragma omp parallel num_threads(ctx.threads)
  {
    std::vector<float> gx(static_cast<std::size_t>(kR * n));
#pragma omp for schedule(static)
    for (std::int64_t gi = 0; gi < groups; ++gi) {
      const std::int64_t t0 = gi * kR, rows = std::min<std::int64_t>(kR, T - t0);
      float s1[kR], s2[kR];
      float* g = scratch + t0 * n;  // g = dy * w, reusing this group's rows of scratch
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < n; ++k) {
          g[r * n + k] = dy[(t0 + r) * n + k] * w[k];
          gx[r * n + k] = g[r * n + k] * xhat[(t0 + r) * n + k];
        }
      csum_each_row(g, rows, n, n, B, s1);
      csum_each_row(gx.data(), rows, n, n, B, s2);
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
