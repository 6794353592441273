// The CUDA backend on a GPU: every deterministic kernel against its CPU counterpart bit for bit
// (Philox fills, dropout masks, the canonical GEMM, the transcendentals and GELU, LayerNorm, AdamW,
// embedding backward), the fast variants within tolerance, and cuBLAS's deterministic mode
// repeatable. On a machine without a GPU (CI) it checks instead that the backend refuses cleanly
// with a clear message; in a build without the CUDA backend it has nothing to test. The "[.bench]"
// case (hidden; run with `test_cuda_device "[.bench]"`) times the canonical GEMM against cuBLAS.
#include <catch2/catch.hpp>

#ifdef LOCKSTEP_WITH_CUDA

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/gpt_causal_gemms.hpp"
#include "model/kernels/attn_gemm.hpp"
#include "model/kernels/attn_rows.hpp"
#include "model/ops.hpp"
#include "optim/adamw.hpp"
#include "parallel/vocab_parallel.hpp"
#include "runtime/cuda/cublas_gemm.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/cuda/gemm_canonical.hpp"
#include "runtime/cuda/kernels.hpp"
#include "runtime/cuda/tokens_by_row.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/random.hpp"
#include "runtime/transcendental.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::same_bits;

namespace {

template <class T>
cuda::DeviceBuffer<T> to_device(const std::vector<T>& h, const cuda::Stream& s, const char* name) {
  cuda::DeviceBuffer<T> d(h.size(), name);
  d.upload(h, s);
  return d;
}
template <class T>
std::vector<T> to_host(const cuda::DeviceBuffer<T>& d, const cuda::Stream& s) {
  std::vector<T> h(d.size());
  d.download(h, s);
  return h;
}

// True when the GPU checks must run: LOCKSTEP_REQUIRE_GPU=1 (tests/gpu/run_gpu_checks.sh sets
// it) turns a missing GPU into a failure instead of a warning.
bool gpu_or_skip() {
  if (cuda::gpu_available()) return true;
  const char* req = std::getenv("LOCKSTEP_REQUIRE_GPU");
  if (req != nullptr && std::string(req) == "1")
    FAIL("LOCKSTEP_REQUIRE_GPU=1 but no GPU: " << cuda::no_gpu_reason());
  WARN("no GPU: " << cuda::no_gpu_reason() << " (GPU kernel checks not run)");
  return false;
}

}  // namespace

TEST_CASE("CUDA backend: a GPU-less machine gets a clear error, not a crash", "[cuda][device]") {
  if (cuda::gpu_available()) {
    CHECK(cuda::select_device(cuda::local_rank()) >= 0);
    INFO(cuda::describe_device());
    SUCCEED("GPU present: " << cuda::describe_device());
    return;
  }
  CHECK(cuda::device_count() == 0);
  CHECK_FALSE(cuda::no_gpu_reason().empty());
  try {
    cuda::select_device(0);
    FAIL("select_device succeeded without a GPU");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("no usable GPU"));
    CHECK_THAT(e.hint(), Catch::Contains("CPU"));
  }
}

TEST_CASE("CUDA kernels == CPU kernels bit for bit (needs a GPU)", "[cuda][device]") {
  if (!gpu_or_skip()) return;
  cuda::select_device(cuda::local_rank());
  cuda::Stream s;

  SECTION("Philox fill and dropout masks") {
    const std::int64_t n = 100003, first = (std::int64_t{1} << 33) - 17;
    std::vector<float> want(n);
    fill_uniform(42, 9, first, want.data(), n, -1.0f, 2.0f);
    cuda::DeviceBuffer<float> d(n, "uniform");
    cuda::fill_uniform(s.get(), 42, 9, first, n, -1.0f, 2.0f, d.data());
    CHECK(same_bits(to_host(d, s), want));
    std::vector<std::uint8_t> keep(n);
    dropout_keep_row(KernelCtx::best(), 42, 9, first, n, 0.1f, keep.data());
    cuda::DeviceBuffer<std::uint8_t> dk(n, "keep");
    cuda::dropout_keep(s.get(), 42, 9, first, n, 0.1f, dk.data());
    CHECK(to_host(dk, s) == keep);
  }

  SECTION("canonical GEMM, several shapes and transpositions") {
    struct Case {
      std::int64_t M, N, K;
      Trans ta, tb;
      int block;
    };
    for (const Case& c :
         {Case{1, 1, 1, Trans::N, Trans::N, 64}, Case{67, 131, 1000, Trans::N, Trans::N, 64},
          Case{128, 64, 257, Trans::T, Trans::N, 64}, Case{33, 200, 129, Trans::N, Trans::T, 7},
          Case{50, 70, 0, Trans::T, Trans::T, 64}}) {
      INFO("M=" << c.M << " N=" << c.N << " K=" << c.K);
      const std::int64_t lda = c.ta == Trans::N ? c.K : c.M, ldb = c.tb == Trans::N ? c.N : c.K;
      const auto A = testing::mixed_floats(std::size_t(std::max<std::int64_t>(1, c.M * c.K)), 1);
      const auto B = testing::mixed_floats(std::size_t(std::max<std::int64_t>(1, c.K * c.N)), 2);
      std::vector<float> want(std::size_t(c.M * c.N));
      gemm(KernelCtx::best(1, c.block), GemmImpl::canonical, c.ta, c.tb, c.M, c.N, c.K, A.data(),
           std::max<std::int64_t>(lda, 1), B.data(), std::max<std::int64_t>(ldb, 1), want.data(),
           c.N);
      auto dA = to_device(A, s, "A"), dB = to_device(B, s, "B");
      cuda::DeviceBuffer<float> dC(want.size(), "C");
      cuda::gemm_canonical(s.get(), c.ta, c.tb, c.M, c.N, c.K, dA.data(),
                           std::max<std::int64_t>(lda, 1), dB.data(),
                           std::max<std::int64_t>(ldb, 1), dC.data(), c.N,
                           hd_rule(KernelCtx::best(1, c.block).rule()));
      CHECK(same_bits(to_host(dC, s), want));
    }
  }

  SECTION("attention products: full-size canonical GEMMs == the CPU's causal products") {
    // unit.test_cuda_attn_host checks the same on the host-compiled body; here the kernel.
    const std::int64_t hd = 64;
    for (std::int64_t C : {std::int64_t(192), std::int64_t(1024)}) {
      INFO("C=" << C);
      const KernelCtx ctx = KernelCtx::best(1, 64);
      const TpContext tp(nullptr, Determinism::invariant, ctx);
      const gpt_detail::CausalGemms cg(tp, C, 64);
      std::vector<float> scratch(std::size_t(
          std::max<std::int64_t>(8 * cg.rows() * hd, attn_gemm_scratch_floats(C, hd, 64))));
      const auto Q = testing::mixed_floats(std::size_t(C * hd), 31);
      const auto K = testing::mixed_floats(std::size_t(C * hd), 32);
      auto P = testing::mixed_floats(std::size_t(C * C), 33);
      for (std::int64_t i = 0; i < C; ++i)
        for (std::int64_t j = i + 1; j < C; ++j) P[std::size_t(i * C + j)] = 0.0f;
      std::vector<float> S(std::size_t(C * C)), O(std::size_t(C * hd)), dV(O.size());
      cg.nt(hd, Q.data(), hd, K.data(), hd, S.data(), scratch.data());
      cg.prefix(hd, P.data(), C, K.data(), hd, O.data(), hd, scratch.data());
      cg.suffix(hd, P.data(), C, K.data(), hd, dV.data(), hd, scratch.data());
      auto dQ = to_device(Q, s, "Q"), dK = to_device(K, s, "K"), dP = to_device(P, s, "P");
      cuda::DeviceBuffer<float> dS(S.size(), "S"), dO(O.size(), "O"), ddV(O.size(), "dV");
      const auto rule = hd_rule(ctx.rule());
      cuda::gemm_canonical(s.get(), Trans::N, Trans::T, C, C, hd, dQ.data(), hd, dK.data(), hd,
                           dS.data(), C, rule);
      cuda::gemm_canonical(s.get(), Trans::N, Trans::N, C, hd, C, dP.data(), C, dK.data(), hd,
                           dO.data(), hd, rule);
      cuda::gemm_canonical(s.get(), Trans::T, Trans::N, C, hd, C, dP.data(), C, dK.data(), hd,
                           ddV.data(), hd, rule);
      const auto S_dev = to_host(dS, s);
      for (std::int64_t i = 0; i < C; ++i)  // the causal entries of each row
        CHECK(same_bits(&S[std::size_t(i * C)], &S_dev[std::size_t(i * C)], std::size_t(i + 1)));
      CHECK(same_bits(to_host(dO, s), O));
      CHECK(same_bits(to_host(ddV, s), dV));
    }
  }

  SECTION("device transcendentals and GELU == lockstep::math") {
    const std::int64_t n = 1 << 20;
    auto x = testing::mixed_floats(std::size_t(n), 21);
    for (std::size_t i = 0; i < x.size(); i += 3) x[i] *= 64.0f;  // exp's clamps, GELU's tails
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1.0f / 0.0f, x[3] = -1.0f / 0.0f, x[4] = std::nanf("");
    const KernelCtx ctx = KernelCtx::best();
    auto dx = to_device(x, s, "x");
    cuda::DeviceBuffer<float> dy(x.size(), "y"), dg(x.size(), "g");
    struct Fn {
      cuda::MathFn dev;
      void (*cpu)(const KernelCtx&, const float*, float*, int64_t);
      const char* name;
    };
    for (const Fn& f :
         {Fn{cuda::MathFn::exp, math::exp, "exp"}, Fn{cuda::MathFn::log, math::log, "log"},
          Fn{cuda::MathFn::tanh, math::tanh, "tanh"}, Fn{cuda::MathFn::erf, math::erf, "erf"},
          Fn{cuda::MathFn::sinpi, math::sinpi, "sinpi"},
          Fn{cuda::MathFn::cospi, math::cospi, "cospi"},
          Fn{cuda::MathFn::gelu_tanh, math::gelu_tanh, "gelu_tanh"},
          Fn{cuda::MathFn::gelu_tanh_grad, math::gelu_tanh_grad, "gelu_tanh_grad"}}) {
      INFO(f.name);
      std::vector<float> want(x.size());
      f.cpu(ctx, x.data(), want.data(), n);
      cuda::math_apply(s.get(), f.dev, dx.data(), dy.data(), n);
      CHECK(same_bits(to_host(dy, s), want));
    }
    std::vector<float> y(x.size()), g(x.size());
    math::gelu_tanh_and_grad(ctx, x.data(), y.data(), g.data(), n);
    cuda::gelu_tanh_and_grad(s.get(), dx.data(), dy.data(), dg.data(), n);
    CHECK(same_bits(to_host(dy, s), y));
    CHECK(same_bits(to_host(dg, s), g));
  }

  SECTION("LayerNorm forward: canonical exact, fast close") {
    const std::int64_t T = 333, n = 768;
    const auto x = testing::mixed_floats(std::size_t(T * n), 3);
    const auto w = testing::mixed_floats(std::size_t(n), 4),
               b = testing::mixed_floats(std::size_t(n), 5);
    std::vector<float> xh(x.size()), rs(static_cast<std::size_t>(T)), y(x.size());
    layernorm_forward(KernelCtx::best(), x.data(), T, n, w.data(), b.data(), 1e-5f, xh.data(),
                      rs.data(), y.data());
    auto dx = to_device(x, s, "x"), dw = to_device(w, s, "w"), db = to_device(b, s, "b");
    cuda::DeviceBuffer<float> dxh(x.size(), "xhat"), drs(std::size_t(T), "rstd"), dy(x.size(), "y");
    cuda::layernorm_forward_canonical(s.get(), dx.data(), T, n, dw.data(), db.data(), 1e-5f,
                                      hd_rule(KernelCtx::best().rule()), dxh.data(), drs.data(),
                                      dy.data());
    CHECK(same_bits(to_host(dxh, s), xh));
    CHECK(same_bits(to_host(drs, s), rs));
    CHECK(same_bits(to_host(dy, s), y));
    cuda::layernorm_forward_fast(s.get(), dx.data(), T, n, dw.data(), db.data(), 1e-5f, dxh.data(),
                                 drs.data(), dy.data());
    const auto yf = to_host(dy, s);
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i)
      worst = std::max(worst, double(std::fabs(yf[i] - y[i])));
    CHECK(worst < 1e-4);
  }

  SECTION("LayerNorm backward: canonical exact (GPT-2's rows, the token axis in sequences)") {
    const std::int64_t T = 4 * 96, n = 768;
    const KernelCtx ctx = KernelCtx::best().over_sequences(96);
    const auto dy = testing::mixed_floats(std::size_t(T * n), 31);
    const auto xhat = testing::mixed_floats(std::size_t(T * n), 32);
    auto rstd = testing::mixed_floats(std::size_t(T), 33);
    for (float& r : rstd) r = 1.0f + r * r;
    const auto w = testing::mixed_floats(std::size_t(n), 34);
    const auto res = testing::mixed_floats(std::size_t(T * n), 35);
    std::vector<float> dx = res, dw(static_cast<std::size_t>(n)), db(static_cast<std::size_t>(n)),
                       scratch(dy.size());
    layernorm_backward(ctx, dy.data(), xhat.data(), rstd.data(), w.data(), T, n, dx.data(), true,
                       dw.data(), db.data(), scratch.data());
    auto ddy = to_device(dy, s, "dy"), dxh = to_device(xhat, s, "xhat"),
         drs = to_device(rstd, s, "rstd"), dw_in = to_device(w, s, "w"),
         ddx = to_device(res, s, "dx");
    cuda::DeviceBuffer<float> ddw(std::size_t(n), "dw"), ddb(std::size_t(n), "db");
    cuda::layernorm_backward_canonical(s.get(), ddy.data(), dxh.data(), drs.data(), dw_in.data(), T,
                                       n, hd_rule(ctx.flat().rule()), hd_rule(ctx.rule()),
                                       ddx.data(), true, ddw.data(), ddb.data());
    CHECK(same_bits(to_host(ddx, s), dx));
    CHECK(same_bits(to_host(ddw, s), dw));
    CHECK(same_bits(to_host(ddb, s), db));
  }

  SECTION("causal softmax and its backward: canonical exact") {
    const std::int64_t mats = 6, C = 96;  // e.g. 2 sequences x 3 heads, context 96
    const KernelCtx ctx = KernelCtx::best();
    auto S = testing::mixed_floats(std::size_t(mats * C * C), 41);
    for (float& v : S) v *= 16.0f;
    const auto dP = testing::mixed_floats(S.size(), 42);
    std::vector<float> P = S, G = dP;
    for (std::int64_t m = 0; m < mats; ++m) {
      softmax_causal_rows(ctx, P.data() + m * C * C, C, 0, C, 0.125f);
      softmax_backward_rows(ctx, P.data() + m * C * C, G.data() + m * C * C, C, 0, C, 0.125f);
    }
    auto dS = to_device(S, s, "S"), dG = to_device(dP, s, "G");
    cuda::softmax_causal_canonical(s.get(), dS.data(), mats, C, 0.125f, hd_rule(ctx.rule()));
    CHECK(same_bits(to_host(dS, s), P));
    cuda::softmax_backward_canonical(s.get(), dS.data(), dG.data(), mats, C, 0.125f,
                                     hd_rule(ctx.rule()));
    CHECK(same_bits(to_host(dG, s), G));
  }

  SECTION("cross-entropy forward and backward (one GPU): canonical exact") {
    const std::int64_t T = 300, V = 50304;  // GPT-2's padded vocabulary
    const KernelCtx ctx = KernelCtx::best();
    const TpContext tp(nullptr, Determinism::invariant, ctx);
    auto logits = testing::mixed_floats(std::size_t(T * V), 51);
    for (float& v : logits) v *= 12.0f;
    std::vector<std::int32_t> labels(static_cast<std::size_t>(T));
    for (std::int64_t t = 0; t < T; ++t) labels[std::size_t(t)] = std::int32_t((t * 7919) % V);
    const auto Tn = static_cast<std::size_t>(T);
    std::vector<float> l = logits, mx(Tn), se(Tn), loss(Tn), scratch(2 * Tn);
    vocab_parallel_ce_forward(tp, l.data(), labels.data(), T, V, mx.data(), se.data(),
                              scratch.data(), loss.data());
    auto dl = to_device(logits, s, "logits");
    auto dlab = to_device(labels, s, "labels");
    cuda::DeviceBuffer<float> dmx(mx.size(), "max"), dse(se.size(), "sumexp"),
        dloss(loss.size(), "loss");
    cuda::cross_entropy_forward_canonical(s.get(), dl.data(), dlab.data(), T, V,
                                          hd_rule(ctx.rule()), dmx.data(), dse.data(),
                                          dloss.data());
    CHECK(same_bits(to_host(dl, s), l));
    CHECK(same_bits(to_host(dmx, s), mx));
    CHECK(same_bits(to_host(dse, s), se));
    CHECK(same_bits(to_host(dloss, s), loss));
    vocab_parallel_ce_backward(tp, l.data(), se.data(), labels.data(), T, V, 1.0f / 12.0f);
    cuda::cross_entropy_backward_canonical(s.get(), dl.data(), dse.data(), dlab.data(), T, V,
                                           1.0f / 12.0f);
    CHECK(same_bits(to_host(dl, s), l));
  }

  SECTION("AdamW") {
    const std::size_t n = 5000;
    auto p = testing::mixed_floats(n, 6), g = testing::mixed_floats(n, 7);
    auto m = testing::mixed_floats(n, 8), v = testing::mixed_floats(n, 9);
    for (auto& e : v) e = e * e;
    auto dp = to_device(p, s, "p"), dg = to_device(g, s, "g"), dm = to_device(m, s, "m"),
         dv = to_device(v, s, "v");
    const AdamWHyper h = AdamWHyper::at(AdamWConfig{}, 6e-4, 7, true);
    adamw_step(h, p, g, m, v);
    const AdamWScalars a = adamw_scalars(h);
    cuda::adamw_step(s.get(),
                     hd::AdamWScalarsHD{a.decay, a.decay_factor, a.beta1, a.one_minus_beta1,
                                        a.beta2, a.one_minus_beta2, a.bc2_sqrt, a.eps, a.step_size},
                     dp.data(), dg.data(), dm.data(), dv.data(), std::int64_t(n));
    CHECK(same_bits(to_host(dp, s), p));
    CHECK(same_bits(to_host(dm, s), m));
    CHECK(same_bits(to_host(dv, s), v));
  }

  SECTION("embedding backward: canonical exact, atomic close") {
    const std::int64_t T = 4096, rows = 1000, width = 256;
    std::vector<std::int32_t> row_of(T);
    std::uint64_t st = 3;
    for (auto& r : row_of) r = std::int32_t(testing::splitmix64(st) % 1000);
    const auto dX = testing::mixed_floats(std::size_t(T * width), 10);
    std::vector<float> want(std::size_t(rows * width));
    token_row_grad(KernelCtx::best(), row_of.data(), T, dX.data(), width, width, 0, rows,
                   want.data());
    const cuda::TokensByRow grp = cuda::group_tokens_by_row(row_of.data(), T, 0, rows);
    auto doff = to_device(grp.offsets, s, "offsets"), dpos = to_device(grp.positions, s, "pos");
    auto ddx = to_device(dX, s, "dX");
    auto drow = to_device(row_of, s, "row_of");
    cuda::DeviceBuffer<float> dout(want.size(), "dE");
    cuda::embedding_backward_canonical(s.get(), doff.data(), dpos.data(), rows, ddx.data(), width,
                                       width, T, hd_rule(SumRule{64}), dout.data());
    CHECK(same_bits(to_host(dout, s), want));
    cuda::embedding_backward_atomic(s.get(), drow.data(), T, ddx.data(), width, width, 0, rows,
                                    dout.data());
    const auto fast = to_host(dout, s);
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, double(std::fabs(fast[i] - want[i])));
    CHECK(worst < 1e-4);
  }

  SECTION("cuBLAS deterministic: close to the reference and repeatable") {
    const std::int64_t M = 256, N = 384, K = 512;
    const auto A = testing::mixed_floats(std::size_t(M * K), 11);
    const auto B = testing::mixed_floats(std::size_t(K * N), 12);
    std::vector<float> ref(std::size_t(M * N));
    gemm(KernelCtx::best(), GemmImpl::reference, Trans::N, Trans::T, M, N, K, A.data(), K, B.data(),
         K, ref.data(), N);
    auto dA = to_device(A, s, "A"), dB = to_device(B, s, "B");
    cuda::DeviceBuffer<float> dC(ref.size(), "C");
    cuda::Cublas blas(Determinism::deterministic, s);
    blas.gemm(Trans::N, Trans::T, M, N, K, dA.data(), K, dB.data(), K, dC.data(), N);
    const auto c1 = to_host(dC, s);
    blas.gemm(Trans::N, Trans::T, M, N, K, dA.data(), K, dB.data(), K, dC.data(), N);
    CHECK(same_bits(to_host(dC, s), c1));
    double worst = 0;
    for (std::size_t i = 0; i < ref.size(); ++i)
      worst = std::max(worst, double(std::fabs(c1[i] - ref[i])));
    CHECK(worst < 1e-3);
    CHECK_THROWS_AS(cuda::Cublas(Determinism::invariant, s), Error);
  }
}

TEST_CASE("bench: canonical GEMM vs cuBLAS on the GPU", "[.bench]") {
  if (!gpu_or_skip()) return;
  cuda::select_device(cuda::local_rank());
  cuda::Stream s;
  WARN(cuda::describe_device());
  for (std::int64_t d : {1024, 4096}) {
    const std::int64_t M = 8192, N = d, K = d;  // tokens x d_model . d_model x d_model
    const auto A = testing::mixed_floats(std::size_t(M * K), 1);
    const auto B = testing::mixed_floats(std::size_t(K * N), 2);
    auto dA = to_device(A, s, "A"), dB = to_device(B, s, "B");
    cuda::DeviceBuffer<float> dC(std::size_t(M * N), "C");
    auto time = [&](auto&& f) {
      f();
      s.synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      const int reps = 5;
      for (int r = 0; r < reps; ++r) f();
      s.synchronize();
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
      return 2.0 * double(M) * double(N) * double(K) / sec * 1e-12;
    };
    const double canon = time([&] {
      cuda::gemm_canonical(s.get(), Trans::N, Trans::N, M, N, K, dA.data(), K, dB.data(), N,
                           dC.data(), N, hd_rule(SumRule{64}));
    });
    cuda::Cublas det(Determinism::deterministic, s), fast(Determinism::fast, s);
    const double tdet = time(
        [&] { det.gemm(Trans::N, Trans::N, M, N, K, dA.data(), K, dB.data(), N, dC.data(), N); });
    const double tfast = time(
        [&] { fast.gemm(Trans::N, Trans::N, M, N, K, dA.data(), K, dB.data(), N, dC.data(), N); });
    WARN("GEMM " << M << "x" << N << "x" << K << " TFLOP/s: canonical " << canon
                 << ", cuBLAS deterministic " << tdet << ", cuBLAS fast " << tfast);
  }
}

#else

TEST_CASE("CUDA backend not built (LOCKSTEP_CUDA=OFF or no nvcc): nothing to test",
          "[cuda][device]") {
  SUCCEED("built without the CUDA backend");
}

#endif
