// The device transcendentals (runtime/cuda/math_device.hpp: runtime/transcendental_impl.hpp's
// kernels over simd::Scalar, the trait the device compiles), compiled here by the host compiler, against
// lockstep::math's scalar API bit for bit: every function on special values and on a sweep of
// float bit patterns (NaN payloads included), GELU's value-and-gradient pair and exp_shifted
// against the array API. The GPU half (the same source compiled by nvcc) is in
// test_cuda_device's "device transcendentals" section. Needs no GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/cuda/math_device.hpp"
#include "runtime/transcendental.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::from_bits;
using lockstep::testing::same_bits;

namespace {

// Special values, then every 4099th bit pattern (all exponents, both signs, NaNs, subnormals).
std::vector<float> inputs() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          inf,
                          -inf,
                          from_bits(0x7fc00000u),
                          from_bits(0xffc00001u),
                          from_bits(0x7f800001u),
                          from_bits(1u),
                          from_bits(0x807fffffu),
                          0.5f,
                          -0.7518f,
                          88.7f,
                          89.0f,
                          -103.9f,
                          -120.0f,
                          1e-30f,
                          3.0e38f,
                          -3.0e38f};
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 4099)
    x.push_back(from_bits(std::uint32_t(u)));
  return x;
}

template <class Device, class Cpu>
void check_fn(const char* name, Device dev, Cpu cpu) {
  static const std::vector<float> x = inputs();
  std::vector<float> want(x.size()), got(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    want[i] = cpu(x[i]);
    got[i] = dev(x[i]);
  }
  INFO(name << " over " << x.size() << " inputs");
  CHECK(same_bits(got, want));
}

}  // namespace

TEST_CASE("device transcendentals == lockstep::math bit for bit", "[cuda][math]") {
  check_fn("exp", hd::math::exp, math::ls_exp);
  check_fn("log", hd::math::log, math::ls_log);
  check_fn("tanh", hd::math::tanh, math::ls_tanh);
  check_fn("erf", hd::math::erf, math::ls_erf);
  check_fn("sinpi", hd::math::sinpi, math::ls_sinpi);
  check_fn("cospi", hd::math::cospi, math::ls_cospi);
  check_fn("gelu_tanh", hd::math::gelu_tanh, math::ls_gelu_tanh);
  check_fn("gelu_tanh_grad", hd::math::gelu_tanh_grad, math::ls_gelu_tanh_grad);
}

TEST_CASE("device GELU pair and exp_shifted == the CPU array API bit for bit", "[cuda][math]") {
  const std::int64_t n = 10007;
  auto x = testing::mixed_floats(std::size_t(n), 11);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] *= 8.0f;  // the GELU's interesting range
  const KernelCtx ctx = KernelCtx::best();
  std::vector<float> y(x.size()), g(x.size()), e(x.size());
  math::gelu_tanh_and_grad(ctx, x.data(), y.data(), g.data(), n);
  math::exp_shifted(ctx, x.data(), 3.25f, e.data(), n);
  std::vector<float> y2(x.size()), g2(x.size()), e2(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    hd::math::gelu_tanh_and_grad(x[i], y2[i], g2[i]);
    e2[i] = hd::math::exp_shifted(x[i], 3.25f);
  }
  CHECK(same_bits(y, y2));
  CHECK(same_bits(g, g2));
  CHECK(same_bits(e, e2));
}
