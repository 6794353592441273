// The replay lab's regression MLP: gradients against an independent float64 implementation,
// bitwise reproducibility, the reversed-order reduction (same values, other bits), pure
// batches, and that Adam training lowers the loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/regression_mlp.hpp"
#include "optim/adamw.hpp"

using namespace lockstep;

namespace {
// Float64 forward/backward of the same network, written independently.
std::vector<std::vector<double>> grads_f64(const RegressionMlpConfig& c,
                                           const std::vector<std::vector<float>>& p,
                                           const RegressionBatch& b, double* loss) {
  const auto B = c.batch, I = c.inputs, H = c.hidden, O = c.outputs;
  std::vector<std::vector<double>> g = {std::vector<double>(H * I), std::vector<double>(H),
                                        std::vector<double>(O * H), std::vector<double>(O)};
  *loss = 0;
  for (std::int64_t n = 0; n < B; ++n) {
    std::vector<double> h(H), out(O);
    for (std::int64_t j = 0; j < H; ++j) {
      double s = p[1][j];
      for (std::int64_t k = 0; k < I; ++k) s += double(b.x[n * I + k]) * p[0][j * I + k];
      h[j] = std::tanh(s);
    }
    for (std::int64_t o = 0; o < O; ++o) {
      double s = p[3][o];
      for (std::int64_t j = 0; j < H; ++j) s += h[j] * p[2][o * H + j];
      out[o] = s;
    }
    std::vector<double> dh(H, 0.0);
    for (std::int64_t o = 0; o < O; ++o) {
      const double d = out[o] - b.y[n * O + o];
      *loss += d * d / double(B * O);
      const double dout = 2 * d / double(B * O);
      g[3][o] += dout;
      for (std::int64_t j = 0; j < H; ++j)
        g[2][o * H + j] += dout * h[j], dh[j] += dout * p[2][o * H + j];
    }
    for (std::int64_t j = 0; j < H; ++j) {
      const double dpre = dh[j] * (1 - h[j] * h[j]);
      g[1][j] += dpre;
      for (std::int64_t k = 0; k < I; ++k) g[0][j * I + k] += dpre * b.x[n * I + k];
    }
  }
  return g;
}
}  // namespace

TEST_CASE("regression MLP gradients match a float64 reference") {
  RegressionMlpConfig c;
  RegressionMlp m(c, KernelCtx::best());
  m.init(7);
  const auto batch = regression_batch(c, 11, 13, 0);
  const float loss = m.forward_backward(batch);
  double ref_loss = 0;
  const auto ref = grads_f64(c, m.params(), batch, &ref_loss);
  REQUIRE(std::fabs(loss - ref_loss) <= 1e-5 * ref_loss);
  for (std::size_t t = 0; t < 4; ++t) {
    double max_ref = 0, max_err = 0;
    for (std::size_t i = 0; i < ref[t].size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(ref[t][i]));
      max_err = std::max(max_err, std::fabs(ref[t][i] - m.grads()[t][i]));
    }
    INFO(RegressionMlp::param_name(t) << ": max err " << max_err << " of max " << max_ref);
    REQUIRE(max_err <= 1e-5 * max_ref);
  }
}

TEST_CASE("regression MLP: bitwise reproducible; reversed order changes bits, not values") {
  RegressionMlpConfig c;
  RegressionMlp a(c, KernelCtx::best()), b(c, KernelCtx{Isa::scalar, 2, 64}),
      r(c, KernelCtx::best());
  for (auto* m : {&a, &b, &r}) m->init(3);
  const auto batch = regression_batch(c, 5, 6, 9);
  const float la = a.forward_backward(batch), lb = b.forward_backward(batch);
  const float lr = r.forward_backward(batch, ReductionOrder::reversed);
  REQUIRE(std::memcmp(&la, &lb, 4) == 0);
  std::size_t differing = 0, total = 0;
  for (std::size_t t = 0; t < 4; ++t) {
    REQUIRE(std::memcmp(a.grads()[t].data(), b.grads()[t].data(), a.grads()[t].size() * 4) == 0);
    for (std::size_t i = 0; i < a.grads()[t].size(); ++i) {
      ++total;
      differing += std::memcmp(&a.grads()[t][i], &r.grads()[t][i], 4) != 0;
      REQUIRE(std::fabs(a.grads()[t][i] - r.grads()[t][i]) <=
              1e-5f * (std::fabs(a.grads()[t][i]) + 1e-6f));
    }
  }
  REQUIRE(std::fabs(la - lr) <= 1e-6f * la);
  REQUIRE(differing > 0);  // another tree: some gradient bits move
  WARN("reversed reduction order: " << differing << " of " << total
                                    << " gradient values differ in bits");
}

TEST_CASE("regression batches are pure functions of (data seed, sampler seed, step)") {
  RegressionMlpConfig c;
  const auto a = regression_batch(c, 1, 2, 40), b = regression_batch(c, 1, 2, 40);
  const auto other = regression_batch(c, 1, 3, 40);
  REQUIRE(std::memcmp(a.x.data(), b.x.data(), a.x.size() * 4) == 0);
  REQUIRE(std::memcmp(a.y.data(), b.y.data(), a.y.size() * 4) == 0);
  REQUIRE(std::memcmp(a.x.data(), other.x.data(), a.x.size() * 4) != 0);
}

TEST_CASE("Adam training of the regression MLP lowers the loss") {
  RegressionMlpConfig c;
  RegressionMlp m(c, KernelCtx::best());
  m.init(1);
  std::vector<std::vector<float>> mom, vel;
  for (const auto& p : m.params())
    mom.emplace_back(p.size(), 0.0f), vel.emplace_back(p.size(), 0.0f);
  const AdamWConfig adam{0.9, 0.999, 1e-8, 0.0};
  const float first = m.loss(regression_batch(c, 1, 2, 1000));
  for (std::int64_t step = 1; step <= 100; ++step) {
    m.forward_backward(regression_batch(c, 1, 2, step));
    for (std::size_t t = 0; t < 4; ++t)
      adamw_step(AdamWHyper::at(adam, 1e-2, step, false), m.params()[t], m.grads()[t], mom[t],
                 vel[t]);
  }
  const float last = m.loss(regression_batch(c, 1, 2, 1000));
  INFO("held-out batch loss " << first << " -> " << last);
  REQUIRE(last < 0.5f * first);
}
