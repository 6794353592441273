// Tests of AdamW (optim/adamw.hpp): against an independent float64 implementation of the
// same algorithm (tolerance), bitwise against a literal float transcription of torch 1.13's
// operations, and bitwise invariance to slicing, ISA path and thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "optim/adamw.hpp"
#include "runtime/error.hpp"
#include "runtime/isa.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;

namespace {

struct State {
  std::vector<float> p, m, v;
};

State init_state(std::size_t n, std::uint64_t seed) {
  State s;
  s.p = mixed_floats(n, seed);
  s.m.assign(n, 0.0f);
  s.v.assign(n, 0.0f);
  return s;
}

std::vector<float> grads(std::size_t n, int step) {
  return mixed_floats(n, 1000 + step);
}

// Textbook AdamW in float64 (Loshchilov & Hutter with torch's eps placement), written
// independently of optim/adamw.cpp.
void adamw_f64(std::vector<double>& p, const std::vector<float>& g, std::vector<double>& m,
               std::vector<double>& v, double lr, double b1, double b2, double eps, double wd,
               int t, bool decay) {
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (decay) p[i] -= lr * wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * double(g[i]) * g[i];
    const double mhat = m[i] / (1 - std::pow(b1, t));
    const double vhat = v[i] / (1 - std::pow(b2, t));
    p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
  }
}

// torch 1.13 _single_tensor_adamw, op by op, on float32 with float-cast Python scalars.
void adamw_torch_literal(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m,
                         std::vector<float>& v, double lr, double b1, double b2, double eps,
                         double wd, int t, bool decay) {
  const double bc1 = 1 - std::pow(b1, double(t));
  const double bc2 = 1 - std::pow(b2, double(t));
  const double step_size = lr / bc1;
  const double bc2_sqrt = std::sqrt(bc2);
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (decay) p[i] = p[i] * float(1 - lr * wd);      // param.mul_(1 - lr*wd)
    m[i] = m[i] * float(b1);                          // exp_avg.mul_(beta1)
    m[i] = std::fma(g[i], float(1 - b1), m[i]);       // .add_(grad, alpha=1-beta1)
    v[i] = v[i] * float(b2);                          // exp_avg_sq.mul_(beta2)
    v[i] = v[i] + float(1 - b2) * g[i] * g[i];        // .addcmul_(grad, grad, 1-beta2)
    float denom = std::sqrt(v[i]) / float(bc2_sqrt);  // exp_avg_sq.sqrt() / bc2_sqrt
    denom = denom + float(eps);                       // .add_(eps)
    p[i] = p[i] + float(-step_size) * m[i] / denom;   // addcdiv_(value=-step_size)
  }
}

}  // namespace

TEST_CASE("AdamW matches an independent float64 implementation within float tolerance") {
  const std::size_t n = 4099;
  for (bool decay : {true, false}) {
    State s = init_state(n, 5);
    std::vector<double> p(s.p.begin(), s.p.end()), m(n, 0.0), v(n, 0.0);
    std::vector<double> m_scale(n, 0.0);  // the m recurrence on |g|: m's cancellation-free size
    const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
    for (int t = 1; t <= 20; ++t) {
      const double lr = 1e-3 * (1.0 + 0.1 * t);
      const auto g = grads(n, t);
      adamw_step(AdamWHyper::at(cfg, lr, t, decay), s.p, g, s.m, s.v);
      adamw_f64(p, g, m, v, lr, 0.9, 0.95, 1e-8, 0.1, t, decay);
      for (std::size_t i = 0; i < n; ++i) m_scale[i] = 0.9 * m_scale[i] + 0.1 * std::fabs(g[i]);
    }
    double worst_p = 0, worst_m = 0, worst_v = 0;
    for (std::size_t i = 0; i < n; ++i) {
      worst_p = std::max(worst_p, std::fabs(s.p[i] - p[i]) / (std::fabs(p[i]) + 1e-3));
      worst_m = std::max(worst_m, std::fabs(s.m[i] - m[i]) / (m_scale[i] + 1e-30));
      worst_v = std::max(worst_v, std::fabs(s.v[i] - v[i]) / (std::fabs(v[i]) + 1e-30));
    }
    INFO("decay " << decay << ": max rel err p " << worst_p << " m " << worst_m << " v "
                  << worst_v);
    CHECK(worst_p < 2e-5);
    CHECK(worst_m < 1e-5);
    CHECK(worst_v < 1e-5);
  }
}

TEST_CASE("AdamW equals the literal torch 1.13 operation sequence bit for bit") {
  const std::size_t n = 1037;
  for (bool decay : {true, false}) {
    State a = init_state(n, 9), b = a;
    const AdamWConfig cfg{0.9, 0.999, 1e-8, 0.01};
    for (int t = 1; t <= 12; ++t) {
      const double lr = 3e-4;
      const auto g = grads(n, t);
      adamw_step(AdamWHyper::at(cfg, lr, t, decay), a.p, g, a.m, a.v);
      adamw_torch_literal(b.p, g, b.m, b.v, lr, 0.9, 0.999, 1e-8, 0.01, t, decay);
    }
    CHECK(same_bits(a.p.data(), b.p.data(), n));
    CHECK(same_bits(a.m.data(), b.m.data(), n));
    CHECK(same_bits(a.v.data(), b.v.data(), n));
  }
}

TEST_CASE("AdamW bits do not depend on slicing, ISA path or threads") {
  const std::size_t n = 10007;  // odd: vector tails everywhere
  const AdamWConfig cfg{};
  State ref = init_state(n, 21);
  for (int t = 1; t <= 5; ++t)
    adamw_step(KernelCtx{Isa::scalar, 1, 64}, AdamWHyper::at(cfg, 6e-4, t, true), ref.p,
               grads(n, t), ref.m, ref.v);
  for (Isa isa : supported_isas())
    for (int threads : {1, 2})
      for (int pieces : {1, 2, 4, 3}) {
        INFO(isa_name(isa) << " threads " << threads << " pieces " << pieces);
        State s = init_state(n, 21);
        for (int t = 1; t <= 5; ++t) {
          const auto g = grads(n, t);
          std::size_t lo = 0;
          for (int k = 0; k < pieces; ++k) {
            const std::size_t hi = (k + 1 == pieces) ? n : lo + n / pieces + (k % 2);
            const std::size_t len = hi - lo;
            adamw_step(
                KernelCtx{isa, threads, 64}, AdamWHyper::at(cfg, 6e-4, t, true),
                std::span<float>(s.p.data() + lo, len), std::span<const float>(g.data() + lo, len),
                std::span<float>(s.m.data() + lo, len), std::span<float>(s.v.data() + lo, len));
            lo = hi;
          }
        }
        CHECK(same_bits(s.p.data(), ref.p.data(), n));
        CHECK(same_bits(s.m.data(), ref.m.data(), n));
        CHECK(same_bits(s.v.data(), ref.v.data(), n));
      }
}

TEST_CASE("AdamW scalars: float casts of the float64 expressions") {
  const AdamWHyper h = AdamWHyper::at(AdamWConfig{0.9, 0.95, 1e-8, 0.1}, 1e-3, 3, true);
  const AdamWScalars s = adamw_scalars(h);
  CHECK(s.one_minus_beta1 == static_cast<float>(1.0 - 0.9));
  CHECK(s.one_minus_beta1 != 1.0f - 0.9f);  // float arithmetic would give another value
  CHECK(s.decay_factor == static_cast<float>(1.0 - 1e-3 * 0.1));
  CHECK(s.step_size == static_cast<float>(1e-3 / (1.0 - 0.9 * 0.9 * 0.9)));
  CHECK(s.bc2_sqrt == static_cast<float>(std::sqrt(1.0 - 0.95 * 0.95 * 0.95)));
  CHECK(s.eps == 1e-8f);
  // Double-double powers agree with libm's pow to within one ulp (usually exactly).
  int inexact = 0;
  for (double beta : {0.9, 0.95, 0.98, 0.999})
    for (std::int64_t t = 0; t <= 20000; t += 13) {
      const double a = adamw_pow(beta, t), b = std::pow(beta, double(t));
      CHECK(std::fabs(a - b) <= std::max(std::fabs(b) * 0x1p-52, 0x1p-1074));
      inexact += a != b;
    }
  WARN("adamw_pow differs from libm pow by one ulp at " << inexact << " of 6160 points");
}

TEST_CASE("AdamW first step and edge cases") {
  // Step 1 from zero moments: update = lr * g/|g| / (1 + eps/|g|...) ~= lr * sign(g).
  std::vector<float> p{1.0f, 1.0f, 1.0f}, g{0.5f, -2.0f, 0.0f}, m(3, 0.0f), v(3, 0.0f);
  adamw_step(AdamWHyper::at(AdamWConfig{0.9, 0.95, 1e-8, 0.0}, 1e-2, 1, true), p, g, m, v);
  CHECK(p[0] == Approx(0.99f).epsilon(1e-6));
  CHECK(p[1] == Approx(1.01f).epsilon(1e-6));
  CHECK(p[2] == 1.0f);  // zero gradient, no decay: unchanged
  // lr = 0: nothing moves, moments still update.
  std::vector<float> q{0.25f, -3.0f}, h{1.0f, 1.0f}, m2(2, 0.0f), v2(2, 0.0f);
  adamw_step(AdamWHyper::at(AdamWConfig{}, 0.0, 1, true), q, h, m2, v2);
  CHECK(q == std::vector<float>{0.25f, -3.0f});
  CHECK(m2[0] == static_cast<float>(1.0 - 0.9));
  // Errors name the problem.
  std::vector<float> short_v(2, 0.0f);
  CHECK_THROWS_AS(adamw_step(AdamWHyper::at(AdamWConfig{}, 1e-3, 1, true), p, g, m, short_v),
                  lockstep::Error);
  CHECK_THROWS_AS(adamw_step(AdamWHyper::at(AdamWConfig{}, 1e-3, 0, true), p, g, m, v),
                  lockstep::Error);
  CHECK_THROWS_AS(validate(AdamWConfig{1.0, 0.95, 1e-8, 0.1}), lockstep::Error);
}

TEST_CASE("clip_and_adamw_step equals apply_clip + adamw_step per tensor, bit for bit") {
  // Tensors of uneven sizes (below, at and across the 2^14-element chunk), decay on some.
  const std::vector<std::int64_t> sizes = {1, 17, 16384, 16385, 70001, 300};
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    if (!isa_supported(isa)) continue;
    for (int threads : {1, 2, 3}) {
      for (float coef : {1.0f, 0.37f}) {
        const ClipResult clip{2.0f, coef, coef < 1.0f};
        std::vector<State> a, b;
        std::vector<std::vector<float>> ga, gb;
        for (std::size_t t = 0; t < sizes.size(); ++t) {
          const auto n = static_cast<std::size_t>(sizes[t]);
          a.push_back(init_state(n, 40 + t));
          a.back().m = mixed_floats(n, 60 + t);
          a.back().v = mixed_floats(n, 80 + t);
          for (float& x : a.back().v) x = std::fabs(x);
          ga.push_back(mixed_floats(n, 100 + t));
        }
        b = a;
        gb = ga;
        const AdamWConfig c;
        const KernelCtx ctx{isa, threads, 64};
        for (std::int64_t step : {1, 7}) {
          std::vector<AdamWTensor> tensors;
          for (std::size_t t = 0; t < sizes.size(); ++t) {
            const bool decay = t % 2 == 0;
            apply_clip(clip, ga[t]);
            adamw_step(ctx, AdamWHyper::at(c, 1e-3, step, decay), a[t].p, ga[t], a[t].m, a[t].v);
            tensors.push_back(
                {b[t].p.data(), gb[t].data(), b[t].m.data(), b[t].v.data(), sizes[t], decay});
          }
          clip_and_adamw_step(ctx, c, 1e-3, step, clip, tensors);
          INFO("isa=" << isa_name(isa) << " threads=" << threads << " coef=" << coef);
          for (std::size_t t = 0; t < sizes.size(); ++t) {
            CHECK(same_bits(a[t].p.data(), b[t].p.data(), sizes[t]));
            CHECK(same_bits(a[t].m.data(), b[t].m.data(), sizes[t]));
            CHECK(same_bits(a[t].v.data(), b[t].v.data(), sizes[t]));
            CHECK(same_bits(ga[t].data(), gb[t].data(), sizes[t]));  // clipped in place alike
          }
        }
      }
    }
  }
}
