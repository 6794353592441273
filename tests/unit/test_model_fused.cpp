// Bit identity of the fused kernels of the training step against the unfused definitions they
// replace (notes/README-perf.md):
//  - math::gelu_tanh_and_grad == math::gelu_tanh + math::gelu_tanh_grad, on every ISA path of
//    this CPU, in place (g == x) or not, any length (vector tails), special values included;
//  - layernorm_backward == the literal definition
//    (column csums of dy*xhat and dy, row csums) for several T, n, blocks and thread counts;
//  - residual_layernorm_forward == (h += res, then layernorm_forward);
//  - the LayerNorm kernels (model/kernels/ln_rows*.cpp: rows in vector lanes, aligned row passes)
//  ==
//    the literal per-row csum definitions, on odd shapes (T, n not multiples of 16 or of B,
//    n < B), blocks 1..300, every ISA path, 1-3 threads, misaligned buffers, residual and
//    accumulate on and off.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "model/ops.hpp"
#include "runtime/csum.hpp"
#include "runtime/random.hpp"
#include "runtime/transcendental.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::same_bits;

namespace {

std::vector<Isa> isas() {
  std::vector<Isa> out{Isa::scalar};
  if (isa_supported(Isa::avx2)) out.push_back(Isa::avx2);
  if (isa_supported(Isa::avx512)) out.push_back(Isa::avx512);
  return out;
}

// Deterministic pseudo-random floats in [-scale, scale) (Philox, so the test is reproducible).
std::vector<float> randoms(std::int64_t n, std::uint64_t stream, float scale) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[static_cast<std::size_t>(i)] = (2.0f * uniform_at(42, stream, i) - 1.0f) * scale;
  return v;
}

// The literal LayerNorm backward (defined with the forward's literal twin below; per-row and
// per-column csum with block B): the definition every fused path is checked against.
void layernorm_backward_literal(int B, const float* dy, const float* xhat, const float* rstd,
                                const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                                bool accumulate, float* dw, float* db);

}  // namespace

TEST_CASE("gelu_tanh_and_grad == gelu_tanh and gelu_tanh_grad, every ISA path", "[model][fused]") {
  std::vector<float> x = randoms(5000, 1, 8.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            20.0f,
                            -20.0f,
                            20.5f,
                            -20.5f,
                            1e-30f,
                            -1e-30f,
                            1e-45f,
                            -0.75f,
                            100.0f,
                            -100.f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            3.0f,
                            -3.0f};
  x.insert(x.begin(), std::begin(specials), std::end(specials));
  for (Isa isa : isas()) {
    for (int threads : {1, 2}) {
      const KernelCtx ctx{isa, threads, 64};
      for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{16}, std::int64_t{33},
                             static_cast<std::int64_t>(x.size())}) {
        std::vector<float> in(x.begin(), x.begin() + n);
        std::vector<float> y_ref(n), g_ref(n), y(n), g(n);
        math::gelu_tanh(KernelCtx{Isa::scalar, 1, 64}, in.data(), y_ref.data(), n);
        math::gelu_tanh_grad(KernelCtx{Isa::scalar, 1, 64}, in.data(), g_ref.data(), n);
        math::gelu_tanh_and_grad(ctx, in.data(), y.data(), g.data(), n);
        CHECK(same_bits(y, y_ref));
        CHECK(same_bits(g, g_ref));
        std::vector<float> inplace = in;  // g over x
        math::gelu_tanh_and_grad(ctx, inplace.data(), y.data(), inplace.data(), n);
        CHECK(same_bits(y, y_ref));
        CHECK(same_bits(inplace, g_ref));
      }
    }
  }
}

TEST_CASE("fused layernorm_backward == the literal definition bit for bit", "[model][fused]") {
  const float eps = 1e-5f;
  for (Isa isa : isas()) {
    for (int threads : {1, 2, 3}) {
      for (int block : {64, 7}) {
        for (auto [T, n] : {std::pair<std::int64_t, std::int64_t>{1, 5},
                            {13, 64},
                            {64, 256},
                            {100, 130},
                            {1024, 256}}) {
          const KernelCtx ctx{isa, threads, block};
          const std::vector<float> x = randoms(T * n, 2, 3.0f), dy = randoms(T * n, 3, 0.5f);
          const std::vector<float> w = randoms(n, 4, 1.5f), b = randoms(n, 5, 0.2f);
          std::vector<float> xhat(T * n), rstd(T), y(T * n);
          layernorm_forward(ctx, x.data(), T, n, w.data(), b.data(), eps, xhat.data(), rstd.data(),
                            y.data());
          for (bool acc : {false, true}) {
            std::vector<float> dx_ref = randoms(T * n, 6, 1.0f), dx = dx_ref;
            std::vector<float> dw_ref(n), db_ref(n), dw(n), db(n), scratch(T * n);
            layernorm_backward_literal(block, dy.data(), xhat.data(), rstd.data(), w.data(), T, n,
                                       dx_ref.data(), acc, dw_ref.data(), db_ref.data());
            layernorm_backward(ctx, dy.data(), xhat.data(), rstd.data(), w.data(), T, n, dx.data(),
                               acc, dw.data(), db.data(), scratch.data());
            INFO("isa " << static_cast<int>(isa) << " threads " << threads << " block " << block
                        << " T " << T << " n " << n << " accumulate " << acc);
            CHECK(same_bits(dx, dx_ref));
            CHECK(same_bits(dw, dw_ref));
            CHECK(same_bits(db, db_ref));
          }
        }
      }
    }
  }
}

TEST_CASE("residual_layernorm_forward == residual add then layernorm_forward", "[model][fused]") {
  for (int threads : {1, 2}) {
    const KernelCtx ctx = KernelCtx::best(threads, 64);
    for (auto [T, n] : {std::pair<std::int64_t, std::int64_t>{3, 32}, {77, 256}}) {
      const std::vector<float> h0 = randoms(T * n, 7, 2.0f), r = randoms(T * n, 8, 2.0f);
      const std::vector<float> w = randoms(n, 9, 1.0f), b = randoms(n, 10, 1.0f);
      std::vector<float> h_ref = h0, xh_ref(T * n), rs_ref(T), y_ref(T * n);
      for (std::int64_t e = 0; e < T * n; ++e) h_ref[e] = h_ref[e] + r[e];
      layernorm_forward(ctx, h_ref.data(), T, n, w.data(), b.data(), 1e-5f, xh_ref.data(),
                        rs_ref.data(), y_ref.data());
      std::vector<float> h = h0, xh(T * n), rs(T), y(T * n);
      residual_layernorm_forward(ctx, h.data(), r.data(), T, n, w.data(), b.data(), 1e-5f,
                                 xh.data(), rs.data(), y.data());
      CHECK(same_bits(h, h_ref));
      CHECK(same_bits(xh, xh_ref));
      CHECK(same_bits(rs, rs_ref));
      CHECK(same_bits(y, y_ref));
    }
  }
}

namespace {

// The literal per-row definitions of model/ops.hpp, one row at a time with lockstep::csum, and
// the parameter gradients as literal column csums (stride n) of the staged product and of dy.
void layernorm_forward_literal(int B, const float* x, std::int64_t T, std::int64_t n,
                               const float* w, const float* b, float eps, float* xhat, float* rstd,
                               float* y) {
  const float fn = static_cast<float>(n);
  std::vector<float> c(static_cast<std::size_t>(n)), cc(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < T; ++t) {
    const float* xr = x + t * n;
    const float m = csum(xr, n, SumRule{B}) / fn;
    for (std::int64_t k = 0; k < n; ++k) {
      c[k] = xr[k] - m;
      cc[k] = c[k] * c[k];
    }
    const float v = csum(cc.data(), n, SumRule{B}) / fn;
    const float rs = 1.0f / std::sqrt(v + eps);
    rstd[t] = rs;
    for (std::int64_t k = 0; k < n; ++k) {
      xhat[t * n + k] = c[k] * rs;
      y[t * n + k] = xhat[t * n + k] * w[k] + b[k];
    }
  }
}

void layernorm_backward_literal(int B, const float* dy, const float* xhat, const float* rstd,
                                const float* w, std::int64_t T, std::int64_t n, float* dx_out,
                                bool accumulate, float* dw, float* db) {
  std::vector<float> prod(static_cast<std::size_t>(T * n));
  for (std::int64_t e = 0; e < T * n; ++e) prod[e] = dy[e] * xhat[e];
  for (std::int64_t j = 0; j < n; ++j) {
    dw[j] = csum(prod.data() + j, T, SumRule{B}, n);
    db[j] = csum(dy + j, T, SumRule{B}, n);
  }
  const float fn = static_cast<float>(n);
  std::vector<float> g(static_cast<std::size_t>(n)), gx(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t k = 0; k < n; ++k) {
      g[k] = dy[t * n + k] * w[k];
      gx[k] = g[k] * xhat[t * n + k];
    }
    const float c1 = csum(g.data(), n, SumRule{B}) / fn, c2 = csum(gx.data(), n, SumRule{B}) / fn;
    for (std::int64_t k = 0; k < n; ++k) {
      const float d = (g[k] - (xhat[t * n + k] * c2 + c1)) * rstd[t];
      dx_out[t * n + k] = accumulate ? dx_out[t * n + k] + d : d;
    }
  }
}

// A copy of v starting `off` floats into its own buffer (so row starts take every alignment).
struct Shifted {
  std::vector<float> buf;
  float* p;
  Shifted(const std::vector<float>& v, std::size_t off) : buf(v.size() + 16) {
    p = buf.data() + off;
    std::copy(v.begin(), v.end(), p);
  }
  std::vector<float> get(std::size_t n) const { return std::vector<float>(p, p + n); }
};

}  // namespace

TEST_CASE("LayerNorm kernels == the literal per-row csum definitions, every ISA path",
          "[model][fused][layernorm]") {
  const float eps = 1e-5f;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {
      {1, 1}, {1, 5}, {3, 17}, {17, 40}, {33, 64}, {31, 100}, {48, 256}, {100, 130}, {130, 7}};
  for (auto [T, n] : shapes) {
    for (int B : {64, 7, 16, 1, 300}) {
      const std::vector<float> x0 = randoms(T * n, 11, 3.0f), res = randoms(T * n, 12, 1.0f);
      const std::vector<float> dy = randoms(T * n, 13, 0.5f), dx0 = randoms(T * n, 14, 1.0f);
      const std::vector<float> w = randoms(n, 15, 1.5f), b = randoms(n, 16, 0.2f);
      // References (literal definitions, no ISA, one thread).
      std::vector<float> h_ref = x0;
      for (std::int64_t e = 0; e < T * n; ++e) h_ref[e] = h_ref[e] + res[e];
      std::vector<float> xh_ref(T * n), rs_ref(T), y_ref(T * n), xh_res_ref(T * n), rs_res_ref(T),
          y_res_ref(T * n);
      layernorm_forward_literal(B, x0.data(), T, n, w.data(), b.data(), eps, xh_ref.data(),
                                rs_ref.data(), y_ref.data());
      layernorm_forward_literal(B, h_ref.data(), T, n, w.data(), b.data(), eps, xh_res_ref.data(),
                                rs_res_ref.data(), y_res_ref.data());
      std::vector<float> dx_ref[2] = {dx0, dx0}, dw_ref[2], db_ref[2];
      for (int acc = 0; acc < 2; ++acc) {
        dw_ref[acc].resize(n);
        db_ref[acc].resize(n);
        layernorm_backward_literal(B, dy.data(), xh_ref.data(), rs_ref.data(), w.data(), T, n,
                                   dx_ref[acc].data(), acc == 1, dw_ref[acc].data(),
                                   db_ref[acc].data());
      }
      for (Isa isa : isas()) {
        for (int threads : {1, 2, 3}) {
          const KernelCtx ctx{isa, threads, B};
          const std::size_t off = static_cast<std::size_t>(threads + 3 * static_cast<int>(isa));
          INFO("isa " << isa_name(isa) << " threads " << threads << " B " << B << " T " << T
                      << " n " << n << " offset " << off);
          const std::size_t TN = static_cast<std::size_t>(T * n);
          Shifted x(x0, off), xh(std::vector<float>(TN), (off + 5) % 16),
              y(std::vector<float>(TN), (off + 9) % 16);
          std::vector<float> rs(T);
          layernorm_forward(ctx, x.p, T, n, w.data(), b.data(), eps, xh.p, rs.data(), y.p);
          CHECK(same_bits(x.get(TN), x0));
          CHECK(same_bits(xh.get(TN), xh_ref));
          CHECK(same_bits(rs, rs_ref));
          CHECK(same_bits(y.get(TN), y_ref));
          Shifted h(x0, (off + 2) % 16), r(res, (off + 7) % 16);
          residual_layernorm_forward(ctx, h.p, r.p, T, n, w.data(), b.data(), eps, xh.p, rs.data(),
                                     y.p);
          CHECK(same_bits(h.get(TN), h_ref));
          CHECK(same_bits(xh.get(TN), xh_res_ref));
          CHECK(same_bits(rs, rs_res_ref));
          CHECK(same_bits(y.get(TN), y_res_ref));
          for (int acc = 0; acc < 2; ++acc) {
            Shifted dyv(dy, (off + 1) % 16), xhv(xh_ref, (off + 11) % 16), dx(dx0, (off + 4) % 16);
            std::vector<float> dw(n), db(n), scratch(TN);
            layernorm_backward(ctx, dyv.p, xhv.p, rs_ref.data(), w.data(), T, n, dx.p, acc == 1,
                               dw.data(), db.data(), scratch.data());
            INFO("accumulate " << acc);
            CHECK(same_bits(dx.get(TN), dx_ref[acc]));
            CHECK(same_bits(dw, dw_ref[acc]));
            CHECK(same_bits(db, db_ref[acc]));
          }
        }
      }
    }
  }
}
