#include "model/regression_mlp.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/philox.hpp"
#include "runtime/random.hpp"
#include "runtime/transcendental.hpp"

namespace lockstep {
namespace {

constexpr std::int64_t kPool = 4096;   // samples in the synthetic data set
constexpr std::int64_t kTeacher = 16;  // hidden width of the teacher network
// Philox streams (data seed): teacher weights, inputs, target noise; (model seed): init.
constexpr std::uint64_t kStreamTeacher1 = 0x7265670001, kStreamTeacher2 = 0x7265670002,
                        kStreamInputs = 0x7265670003, kStreamNoise = 0x7265670004,
                        kStreamSampler = 0x7265670005, kStreamInit = 0x7265670010;

// Reverses the row order of a [rows, cols] matrix (the lab's reordered reduction).
std::vector<float> reversed_rows(const std::vector<float>& m, std::int64_t rows,
                                 std::int64_t cols) {
  std::vector<float> r(m.size());
  for (std::int64_t i = 0; i < rows; ++i)
    std::copy_n(m.data() + (rows - 1 - i) * cols, cols, r.data() + i * cols);
  return r;
}

}  // namespace

RegressionBatch regression_batch(const RegressionMlpConfig& c, std::uint64_t data_seed,
                                 std::uint64_t sampler_seed, std::int64_t step) {
  check(step >= 0, "regression_batch: negative step " + std::to_string(step));
  const KernelCtx ctx{Isa::scalar, 1, 64};
  std::vector<float> t1(kTeacher * c.inputs), t2(c.outputs * kTeacher);
  fill_normal(data_seed, kStreamTeacher1, 0, t1.data(), t1.size(), 0.0f,
              1.0f / std::sqrt(static_cast<float>(c.inputs)));
  fill_normal(data_seed, kStreamTeacher2, 0, t2.data(), t2.size(), 0.0f, 0.25f);
  RegressionBatch b;
  b.x.resize(c.batch * c.inputs);
  b.y.resize(c.batch * c.outputs);
  const CounterRng sampler(sampler_seed, kStreamSampler);
  for (std::int64_t j = 0; j < c.batch; ++j) {
    const std::int64_t sample =
        sampler.word(static_cast<std::uint64_t>(step * c.batch + j)) % kPool;
    fill_normal(data_seed, kStreamInputs, sample * c.inputs, b.x.data() + j * c.inputs, c.inputs);
    std::vector<float> pre(kTeacher), noise(c.outputs);
    gemm(ctx, GemmImpl::canonical, Trans::N, Trans::T, 1, kTeacher, c.inputs,
         b.x.data() + j * c.inputs, c.inputs, t1.data(), c.inputs, pre.data(), kTeacher);
    math::tanh(ctx, pre.data(), pre.data(), kTeacher);
    gemm(ctx, GemmImpl::canonical, Trans::N, Trans::T, 1, c.outputs, kTeacher, pre.data(), kTeacher,
         t2.data(), kTeacher, b.y.data() + j * c.outputs, c.outputs);
    fill_normal(data_seed, kStreamNoise, sample * c.outputs, noise.data(), c.outputs, 0.0f,
                c.noise);
    for (std::int64_t o = 0; o < c.outputs; ++o) b.y[j * c.outputs + o] += noise[o];
  }
  return b;
}

RegressionMlp::RegressionMlp(const RegressionMlpConfig& cfg, KernelCtx ctx) : cfg_(cfg), ctx_(ctx) {
  check(cfg.inputs > 0 && cfg.hidden > 0 && cfg.outputs > 0 && cfg.batch > 0,
        "regression MLP sizes must be positive", "check the lab's model settings");
  validate(ctx);
  const std::int64_t sizes[] = {cfg.hidden * cfg.inputs, cfg.hidden, cfg.outputs * cfg.hidden,
                                cfg.outputs};
  for (auto n : sizes) {
    params_.emplace_back(n, 0.0f);
    grads_.emplace_back(n, 0.0f);
  }
}

const char* RegressionMlp::param_name(std::size_t i) {
  static const char* names[] = {"w1", "b1", "w2", "b2"};
  return i < 4 ? names[i] : "?";
}

void RegressionMlp::init(std::uint64_t seed) {
  fill_normal(seed, kStreamInit + 0, 0, params_[0].data(), params_[0].size(), 0.0f,
              1.0f / std::sqrt(static_cast<float>(cfg_.inputs)));
  fill_normal(seed, kStreamInit + 2, 0, params_[2].data(), params_[2].size(), 0.0f,
              1.0f / std::sqrt(static_cast<float>(cfg_.hidden)));
  std::fill(params_[1].begin(), params_[1].end(), 0.0f);
  std::fill(params_[3].begin(), params_[3].end(), 0.0f);
}

float RegressionMlp::loss(const RegressionBatch& b) {
  const auto B = cfg_.batch, I = cfg_.inputs, H = cfg_.hidden, O = cfg_.outputs;
  check(static_cast<std::int64_t>(b.x.size()) == B * I &&
            static_cast<std::int64_t>(b.y.size()) == B * O,
        "regression batch of " + std::to_string(b.x.size()) + " inputs / " +
            std::to_string(b.y.size()) + " targets does not match the model's batch " +
            std::to_string(B));
  pre_.assign(B * H, 0.0f);
  h_.assign(B * H, 0.0f);
  out_.assign(B * O, 0.0f);
  gemm(ctx_, GemmImpl::canonical, Trans::N, Trans::T, B, H, I, b.x.data(), I, params_[0].data(), I,
       pre_.data(), H);
  for (std::int64_t i = 0; i < B; ++i)
    for (std::int64_t j = 0; j < H; ++j) pre_[i * H + j] += params_[1][j];
  math::tanh(ctx_, pre_.data(), h_.data(), B * H);
  gemm(ctx_, GemmImpl::canonical, Trans::N, Trans::T, B, O, H, h_.data(), H, params_[2].data(), H,
       out_.data(), O);
  std::vector<float> sq(B * O);
  for (std::int64_t i = 0; i < B; ++i)
    for (std::int64_t o = 0; o < O; ++o) {
      out_[i * O + o] += params_[3][o];
      const float d = out_[i * O + o] - b.y[i * O + o];
      sq[i * O + o] = d * d;
    }
  return csum(sq.data(), B * O, ctx_.rule()) / static_cast<float>(B * O);
}

float RegressionMlp::forward_backward(const RegressionBatch& b, ReductionOrder order) {
  const auto B = cfg_.batch, I = cfg_.inputs, H = cfg_.hidden, O = cfg_.outputs;
  float mse = loss(b);
  const bool rev = order == ReductionOrder::reversed;
  if (rev) {  // the same squared errors summed over the batch in reverse order
    std::vector<float> sq(B * O);
    for (std::int64_t e = 0; e < B * O; ++e) {
      const float d = out_[B * O - 1 - e] - b.y[B * O - 1 - e];
      sq[e] = d * d;
    }
    mse = csum(sq.data(), B * O, ctx_.rule()) / static_cast<float>(B * O);
  }
  // d loss / d out = 2 (out - y) / (B O), per element before any reduction.
  const float scale = 2.0f / static_cast<float>(B * O);
  std::vector<float> dout(B * O), dh(B * H);
  for (std::int64_t e = 0; e < B * O; ++e) dout[e] = (out_[e] - b.y[e]) * scale;
  // Gradients reduce over the batch: canonical sums, or the same sums in reverse row order.
  const auto& dout_r = rev ? reversed_rows(dout, B, O) : dout;
  const auto& h_r = rev ? reversed_rows(h_, B, H) : h_;
  gemm(ctx_, GemmImpl::canonical, Trans::T, Trans::N, O, H, B, dout_r.data(), O, h_r.data(), H,
       grads_[2].data(), H);
  csum_rows(ctx_, dout_r.data(), B, O, O, grads_[3].data());
  gemm(ctx_, GemmImpl::canonical, Trans::N, Trans::N, B, H, O, dout.data(), O, params_[2].data(), H,
       dh.data(), H);
  for (std::int64_t e = 0; e < B * H; ++e) dh[e] = dh[e] * ((1.0f - h_[e]) * (1.0f + h_[e]));
  const auto& dpre_r = rev ? reversed_rows(dh, B, H) : dh;
  const auto& x_r = rev ? reversed_rows(b.x, B, I) : b.x;
  gemm(ctx_, GemmImpl::canonical, Trans::T, Trans::N, H, I, B, dpre_r.data(), H, x_r.data(), I,
       grads_[0].data(), I);
  csum_rows(ctx_, dpre_r.data(), B, H, H, grads_[1].data());
  return mse;
}

}  // namespace lockstep
