// bench_ln: speed of the LayerNorm kernels of model/ops.hpp (layernorm_forward,
// residual_layernorm_forward, layernorm_backward) against the previous implementation (a
// verbatim copy below, namespace legacy: 8 rows per group, scalar csum chains), which is also
// the bitwise reference: every trial's outputs must equal legacy's bit for bit (else exit 1).
// Prints one JSON object per line:
//   {"bench":"ln","op","impl","isa","threads","T","n","block","wall_ms","cpu_ms","reps"}
// wall_ms / cpu_ms: medians over --reps calls (cpu_ms is the process CPU time of the call,
// all threads together), implementations interleaved call by call. Default shape: bench-small
// (T = 4096 tokens per microbatch, d_model 256, reduce_block 64).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "model/ops.hpp"
#include "runtime/csum.hpp"
#include "runtime/csum_counter.hpp"
#include "runtime/isa.hpp"

using namespace lockstep;

namespace legacy {
// ---- the implementation before bench_ln existed (model/ops.cpp at a2f1e08) ----
constexpr int kR = 8;
using RowCounters = csum_detail::RowCounters<kR>;

void csum_each_row(const float* X, std::int64_t rows, std::int64_t n, std::int64_t ld, int block,
                   float* out) {
  std::int64_t r0 = 0;
  for (; r0 + kR <= rows; r0 += kR) {
    RowCounters c;
    const std::int64_t leaves = (n + block - 1) / block;
    for (std::int64_t lo = 0; lo < n; lo += block) {
      const std::int64_t hi = std::min<std::int64_t>(n, lo + block);
      float acc[kR];
      for (int r = 0; r < kR; ++r) acc[r] = kAdditiveIdentity;
      for (std::int64_t k = lo; k < hi; ++k)
        for (int r = 0; r < kR; ++r) acc[r] += X[(r0 + r) * ld + k];
      const int merges = merges_after_leaf(TreeShape::halving, leaves, lo / block);
      for (int r = 0; r < kR; ++r) c.push(r, acc[r], merges);
    }
    for (int r = 0; r < kR; ++r) out[r0 + r] = c.result(r);
  }
  for (; r0 < rows; ++r0) out[r0] = csum(X + r0 * ld, n, SumRule{block});
}

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
      float* yr = y + (t0 + r) * n;
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

constexpr std::int64_t kColChunk = 64;
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

void layernorm_backward(const KernelCtx& ctx, const float* dy, const float* xhat, const float* rstd,
                        const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                        bool accumulate, float* dw, float* db, float* scratch) {
  const std::int64_t groups = (T + kR - 1) / kR;
  const std::int64_t col_chunks = (n + kColChunk - 1) / kColChunk;
  const int B = ctx.reduce_block;
  const float fn = static_cast<float>(n);
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
      float* g = scratch + t0 * n;
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
}  // namespace legacy

namespace {

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_ln: LayerNorm forward/backward speed, new vs previous implementation"};
  std::int64_t T = 4096, n = 256;
  int block = 64, reps = 51;
  std::vector<int> thread_list{1, 2};
  std::string isa_name_opt = "auto", only_op;
  app.add_option("--T", T, "rows (tokens)")->capture_default_str();
  app.add_option("--n", n, "features (d_model)")->capture_default_str();
  app.add_option("--block", block, "reduce_block B")->capture_default_str();
  app.add_option("--reps", reps, "timed calls per implementation")->capture_default_str();
  app.add_option("--threads", thread_list, "thread counts")->capture_default_str();
  app.add_option("--isa", isa_name_opt, "scalar, avx2, avx512 or auto")->capture_default_str();
  app.add_option("--op", only_op,
                 "run only this op (forward, residual_forward, backward_accumulate)");
  CLI11_PARSE(app, argc, argv);
  const Isa isa = parse_isa(isa_name_opt);
  const std::size_t TN = static_cast<std::size_t>(T * n);
  std::vector<float> x(TN), res(TN), dy(TN), w(n), b(n);
  for (std::size_t i = 0; i < TN; ++i) {
    x[i] = std::sin(0.001f * static_cast<float>(i)) * 3.0f + static_cast<float>(i % 7) * 0.1f;
    res[i] = std::cos(0.0007f * static_cast<float>(i));
    dy[i] = std::sin(0.0013f * static_cast<float>(i) + 1.0f) * 0.01f;
  }
  for (std::int64_t k = 0; k < n; ++k) {
    w[k] = 1.0f + 0.01f * static_cast<float>(k % 13);
    b[k] = 0.001f * static_cast<float>(k % 5);
  }
  bool all_same = true;
  for (int threads : thread_list) {
    const KernelCtx ctx{isa, threads, block};
    struct Out {
      std::vector<float> h, xhat, rstd, y, dx, dw, db, scratch;
    };
    auto fresh = [&] {
      Out o;
      o.h = x;
      o.xhat.resize(TN);
      o.rstd.resize(T);
      o.y.resize(TN);
      o.dx.assign(TN, 0.5f);
      o.dw.resize(n);
      o.db.resize(n);
      o.scratch.resize(TN);
      return o;
    };
    Out on = fresh(), ol = fresh();
    using Fn = std::function<void(Out&)>;
    struct Op {
      const char* name;
      Fn fresh_fn, legacy_fn;
    };
    const float eps = 1e-5f;
    std::vector<Op> ops{
        {"forward",
         [&](Out& o) {
           layernorm_forward(ctx, x.data(), T, n, w.data(), b.data(), eps, o.xhat.data(),
                             o.rstd.data(), o.y.data());
         },
         [&](Out& o) {
           legacy::layernorm_forward_impl(ctx, nullptr, x.data(), nullptr, T, n, w.data(), b.data(),
                                          eps, o.xhat.data(), o.rstd.data(), o.y.data());
         }},
        {"residual_forward",
         [&](Out& o) {
           residual_layernorm_forward(ctx, o.h.data(), res.data(), T, n, w.data(), b.data(), eps,
                                      o.xhat.data(), o.rstd.data(), o.y.data());
         },
         [&](Out& o) {
           legacy::layernorm_forward_impl(ctx, o.h.data(), o.h.data(), res.data(), T, n, w.data(),
                                          b.data(), eps, o.xhat.data(), o.rstd.data(), o.y.data());
         }},
        {"backward_accumulate",
         [&](Out& o) {
           layernorm_backward(ctx, dy.data(), o.xhat.data(), o.rstd.data(), w.data(), T, n,
                              o.dx.data(), true, o.dw.data(), o.db.data(), o.scratch.data());
         },
         [&](Out& o) {
           legacy::layernorm_backward(ctx, dy.data(), o.xhat.data(), o.rstd.data(), w.data(), T, n,
                                      o.dx.data(), true, o.dw.data(), o.db.data(),
                                      o.scratch.data());
         }},
    };
    for (const Op& op : ops) {
      if (!only_op.empty() && only_op != op.name) continue;
      std::vector<double> wall[2], cpu[2];
      for (int rep = 0; rep < reps + 1; ++rep) {
        for (int impl = 0; impl < 2; ++impl) {
          Out& o = impl == 0 ? on : ol;
          // Untimed: the same inputs every call (h for the residual add, dx to accumulate into).
          if (op.name[0] == 'r') std::copy(x.begin(), x.end(), o.h.begin());
          if (op.name[0] == 'b') std::fill(o.dx.begin(), o.dx.end(), 0.5f);
          const double c0 = bench::cpu_s(), w0 = bench::wall_s();
          (impl == 0 ? op.fresh_fn : op.legacy_fn)(o);
          const double w1 = bench::wall_s(), c1 = bench::cpu_s();
          if (rep > 0) {  // the first call warms caches and thread pools
            wall[impl].push_back(1e3 * (w1 - w0));
            cpu[impl].push_back(1e3 * (c1 - c0));
          }
        }
      }
      const bool ok = same(on.h, ol.h) && same(on.xhat, ol.xhat) && same(on.rstd, ol.rstd) &&
                      same(on.y, ol.y) && same(on.dx, ol.dx) && same(on.dw, ol.dw) &&
                      same(on.db, ol.db);
      all_same = all_same && ok;
      for (int impl = 0; impl < 2; ++impl)
        std::printf(
            "{\"bench\":\"ln\",\"op\":\"%s\",\"impl\":\"%s\",\"isa\":\"%s\",\"threads\":%d,"
            "\"T\":%lld,\"n\":%lld,\"block\":%d,\"wall_ms\":%.4f,\"cpu_ms\":%.4f,\"reps\":%d,"
            "\"bits_equal_legacy\":%s}\n",
            op.name, impl == 0 ? "new" : "legacy", isa_name(isa), threads,
            static_cast<long long>(T), static_cast<long long>(n), block, bench::median(wall[impl]),
            bench::median(cpu[impl]), reps, ok ? "true" : "false");
      std::fflush(stdout);
    }
  }
  if (!all_same) {
    std::fprintf(stderr, "bench_ln: new outputs differ from the legacy implementation\n");
    return 1;
  }
  return 0;
}
