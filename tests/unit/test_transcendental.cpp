// Accuracy, special values and ISA bit-identity of runtime/transcendental.hpp.
// Accuracy: max error in ulp (of the float nearest the reference) against long double references,
// over a sweep of float bit patterns (every LOCKSTEP_MATH_SWEEP_STRIDE-th pattern, default 4093,
// i.e. ~1M inputs spread over all exponents, both signs) plus 2^18 random inputs in each
// function's core range. Set LOCKSTEP_MATH_SWEEP_STRIDE=1 for the exhaustive run (minutes).
// Bit identity: the same inputs through every ISA path of this CPU, compared bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/philox.hpp"
#include "runtime/random.hpp"
#include "runtime/transcendental.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::bits;
using lockstep::testing::from_bits;
using LD = long double;

namespace {

enum Fid { kExp, kLog, kTanh, kErf, kSinpi, kCospi, kGelu, kGeluGrad, kCount };
const char* kNames[kCount] = {"exp",   "log",   "tanh",      "erf",
                              "sinpi", "cospi", "gelu_tanh", "gelu_tanh_grad"};
using ArrayFn = void (*)(const KernelCtx&, const float*, float*, int64_t);
const ArrayFn kArray[kCount] = {math::exp,   math::log,   math::tanh,      math::erf,
                                math::sinpi, math::cospi, math::gelu_tanh, math::gelu_tanh_grad};
using ScalarFn = float (*)(float);
const ScalarFn kScalar[kCount] = {math::ls_exp,       math::ls_log,           math::ls_tanh,
                                  math::ls_erf,       math::ls_sinpi,         math::ls_cospi,
                                  math::ls_gelu_tanh, math::ls_gelu_tanh_grad};

const LD kPi = 3.141592653589793238462643383279502884L;
const LD kSqrt2OverPi = std::sqrt(2.0L / kPi);

// sin(pi x), cos(pi x) with exact reduction to |t| <= 1/2 in long double.
LD sinpi_ref(LD x) {
  LD r = std::fmod(x, 2.0L);  // exact
  if (r > 1) r -= 2;
  if (r < -1) r += 2;
  if (r == 0 || std::fabs(r) == 1) return std::copysign(0.0L, x);
  LD t = r > 0.5L ? 1 - r : (r < -0.5L ? -1 - r : r);
  return std::sin(kPi * t);
}
LD cospi_ref(LD x) {
  LD a = std::fabs(std::fmod(x, 2.0L));
  if (a > 1) a = 2 - a;
  if (a == 0.5L) return 0;
  return a > 0.5L ? -std::cos(kPi * (1 - a)) : std::cos(kPi * a);
}
// gelu and its derivative through the stable sigmoid form (no cancellation in the reference).
void gelu_ref(LD x, LD& g, LD& dg) {
  LD w = 2 * kSqrt2OverPi * (x + 0.044715L * x * x * x);
  LD s, oms;
  if (w >= 0) {
    LD e = std::exp(-w);
    s = 1 / (1 + e);
    oms = e / (1 + e);
  } else {
    LD e = std::exp(w);
    s = e / (1 + e);
    oms = 1 / (1 + e);
  }
  g = x * s;
  dg = s + x * s * oms * 2 * kSqrt2OverPi * (1 + 3 * 0.044715L * x * x);
}
LD reference(int f, float xf) {
  LD x = xf, g, dg;
  switch (f) {
    case kExp:
      return std::exp(x);
    case kLog:
      return std::log(x);
    case kTanh:
      return std::tanh(x);
    case kErf:
      return std::erf(x);
    case kSinpi:
      return sinpi_ref(x);
    case kCospi:
      return cospi_ref(x);
    case kGelu:
      gelu_ref(x, g, dg);
      return g;
    case kGeluGrad:
      gelu_ref(x, g, dg);
      return dg;
  }
  return 0;
}

// |y - r| in units of the ulp of the float nearest r (subnormal ulp 2^-149 below 2^-126).
LD ulp_error(float y, LD r) {
  if (std::isnan(y) || std::isnan(r)) return (std::isnan(y) && std::isnan(r)) ? 0 : 1e30L;
  LD rf = LD(float(r));  // the correctly rounded result; handles overflow to Inf
  if (std::isinf(y) || std::isinf(rf)) return LD(y) == rf ? 0 : 1e30L;
  LD a = std::fabs(r);
  int e = a == 0 ? -126 : std::ilogb(a);
  if (e < -126) e = -126;
  return std::fabs(LD(y) - r) / std::ldexp(1.0L, e - 23);
}

int64_t sweep_stride() {
  const char* s = std::getenv("LOCKSTEP_MATH_SWEEP_STRIDE");
  int64_t v = s ? std::atoll(s) : 4093;
  return v < 1 ? 1 : v;
}

// Sweep inputs: every stride-th bit pattern (finite values only), plus random values in [lo, hi].
std::vector<float> sweep_inputs(float lo, float hi, uint64_t stream) {
  std::vector<float> x;
  const int64_t stride = sweep_stride();
  for (int64_t u = 0; u < (int64_t(1) << 32); u += stride) {
    float f = from_bits(uint32_t(u));
    if (std::isfinite(f)) x.push_back(f);
  }
  const int64_t nr = int64_t(1) << 18;
  std::vector<float> r(nr);
  fill_uniform(2024, stream, 0, r.data(), nr, lo, hi);
  x.insert(x.end(), r.begin(), r.end());
  return x;
}

struct Stats {
  LD max_ulp = 0;
  float worst_x = 0;
  LD max_abs = 0;
  int64_t count = 0;
};

// Evaluates f on x through every ISA path, checks all paths agree bitwise with the scalar API,
// and returns the ulp statistics over inputs accepted by `use`.
template <class Use>
Stats measure(int f, const std::vector<float>& x, Use use) {
  const int64_t n = int64_t(x.size());
  std::vector<float> y(n), z(n);
  KernelCtx ctx;
  ctx.isa = Isa::scalar;
  kArray[f](ctx, x.data(), y.data(), n);
  for (Isa isa : supported_isas()) {
    if (isa == Isa::scalar) continue;
    ctx.isa = isa;
    kArray[f](ctx, x.data(), z.data(), n);
    int64_t mismatch = 0, first = -1;
    for (int64_t i = 0; i < n; ++i)
      if (bits(y[i]) != bits(z[i])) {
        if (first < 0) first = i;
        ++mismatch;
      }
    INFO(kNames[f] << " on " << isa_name(isa) << ": " << mismatch << " results differ from scalar"
                   << (first >= 0 ? ", first at x = " + std::to_string(x[first]) : ""));
    CHECK(mismatch == 0);
  }
  Stats s;
  for (int64_t i = 0; i < n; ++i) {
    LD r = reference(f, x[i]);
    if (!use(x[i], r)) continue;
    ++s.count;
    LD e = ulp_error(y[i], r);
    if (e > s.max_ulp) {
      s.max_ulp = e;
      s.worst_x = x[i];
    }
    if (std::isfinite(r)) {
      LD ab = std::fabs(LD(y[i]) - r);
      if (ab > s.max_abs) s.max_abs = ab;
    }
  }
  WARN(kNames[f] << ": " << s.count << " inputs, max error " << double(s.max_ulp)
                 << " ulp at x = " << s.worst_x << " (" << std::hexfloat << s.worst_x
                 << std::defaultfloat << "), max abs error " << double(s.max_abs));
  return s;
}

auto all = [](float, LD) { return true; };
constexpr LD kMinNormal = 1.17549435082228750797e-38L;

}  // namespace

TEST_CASE("exp: <= 1.25 ulp on all finite floats, ISA paths identical", "[math]") {
  auto x = sweep_inputs(-104.0f, 89.0f, 1);
  CHECK(measure(kExp, x, all).max_ulp <= 1.25L);
}

TEST_CASE("log: <= 2 ulp on all positive floats, ISA paths identical", "[math]") {
  auto x = sweep_inputs(0.0f, 4.0f, 2);
  CHECK(measure(kLog, x, [](float v, LD) { return v > 0; }).max_ulp <= 2.0L);
}

TEST_CASE("tanh: <= 1.5 ulp on all finite floats, ISA paths identical", "[math]") {
  auto x = sweep_inputs(-10.0f, 10.0f, 3);
  CHECK(measure(kTanh, x, all).max_ulp <= 1.5L);
}

TEST_CASE("erf: <= 1.5 ulp on all finite floats, ISA paths identical", "[math]") {
  auto x = sweep_inputs(-4.5f, 4.5f, 4);
  CHECK(measure(kErf, x, all).max_ulp <= 1.5L);
}

TEST_CASE("sinpi, cospi: <= 1.25 ulp on all finite floats, ISA paths identical", "[math]") {
  auto x = sweep_inputs(-4.0f, 4.0f, 5);
  CHECK(measure(kSinpi, x, all).max_ulp <= 1.25L);
  CHECK(measure(kCospi, x, all).max_ulp <= 1.25L);
}

TEST_CASE("gelu_tanh: <= 2.5 ulp on normal results, ISA paths identical", "[math]") {
  auto x = sweep_inputs(-12.0f, 12.0f, 6);
  CHECK(measure(kGelu, x, [](float, LD r) {
          return std::fabs(r) >= kMinNormal || r == 0;
        }).max_ulp <= 2.5L);
  // Subnormal results (x in about [-10.9, -10.1]): within 3 subnormal ulps.
  CHECK(measure(kGelu, x, [](float, LD r) { return std::fabs(r) < kMinNormal; }).max_ulp <= 3.0L);
}

TEST_CASE("gelu_tanh_grad: <= 8 ulp away from its zero, 2^-22 absolute everywhere", "[math]") {
  auto x = sweep_inputs(-12.0f, 12.0f, 7);
  // The derivative crosses zero at x = -0.7518 through a cancellation 1 + x (1 - s) w'(x); float
  // evaluation gives ~1e-7 absolute error there, unbounded in ulps. Elsewhere it is a few ulp.
  CHECK(measure(kGeluGrad, x, [](float v, LD) { return !(v > -1.5f && v < -0.3f); }).max_ulp <=
        8.0L);
  CHECK(measure(kGeluGrad, x, all).max_abs <= 0x1p-22L);
}

TEST_CASE("special values follow libm", "[math]") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto is_neg0 = [](float v) { return v == 0.0f && std::signbit(v); };
  auto is_pos0 = [](float v) { return v == 0.0f && !std::signbit(v); };
  using namespace lockstep::math;
  for (int f = 0; f < kCount; ++f) CHECK(std::isnan(kScalar[f](nan)));
  CHECK(ls_exp(0.0f) == 1.0f);
  CHECK(ls_exp(-0.0f) == 1.0f);
  CHECK(ls_exp(inf) == inf);
  CHECK(is_pos0(ls_exp(-inf)));
  CHECK(ls_exp(88.72283172607421875f) == float(std::exp(88.72283172607421875L)));  // max finite
  CHECK(std::isfinite(ls_exp(88.72283172607421875f)));
  CHECK(ls_exp(88.72283935546875f) == inf);
  CHECK(ls_exp(100.0f) == inf);
  CHECK(ls_exp(-103.0f) == float(std::exp(-103.0L)));  // subnormal, correctly rounded
  CHECK(ls_exp(-103.0f) > 0.0f);
  CHECK(is_pos0(ls_exp(-104.0f)));
  CHECK(is_pos0(ls_exp(-1000.0f)));
  CHECK(ls_exp(1.0f) == 2.71828174591064453125f);
  CHECK(ls_log(0.0f) == -inf);
  CHECK(ls_log(-0.0f) == -inf);
  CHECK(std::isnan(ls_log(-1.0f)));
  CHECK(std::isnan(ls_log(-inf)));
  CHECK(std::isnan(ls_log(-0x1p-149f)));
  CHECK(ls_log(inf) == inf);
  CHECK(is_pos0(ls_log(1.0f)));
  CHECK(ls_log(0x1p-149f) == float(std::log(LD(0x1p-149f))));
  CHECK(ls_tanh(inf) == 1.0f);
  CHECK(ls_tanh(-inf) == -1.0f);
  CHECK(is_neg0(ls_tanh(-0.0f)));
  CHECK(ls_tanh(0x1p-140f) == 0x1p-140f);
  CHECK(ls_erf(inf) == 1.0f);
  CHECK(ls_erf(-inf) == -1.0f);
  CHECK(is_neg0(ls_erf(-0.0f)));
  CHECK(ls_erf(-10.0f) == -1.0f);
  CHECK(std::isnan(ls_sinpi(inf)));
  CHECK(std::isnan(ls_cospi(-inf)));
  CHECK(is_neg0(ls_sinpi(-0.0f)));
  CHECK(is_pos0(ls_sinpi(1.0f)));
  CHECK(is_neg0(ls_sinpi(-3.0f)));
  CHECK(is_pos0(ls_sinpi(0x1p30f)));
  CHECK(ls_sinpi(0.5f) == 1.0f);
  CHECK(ls_sinpi(-1.5f) == 1.0f);
  CHECK(ls_sinpi(0.25f) == float(std::sqrt(0.5L)));
  CHECK(ls_cospi(1.0f) == -1.0f);
  CHECK(ls_cospi(0x1p23f + 1.0f) == -1.0f);
  CHECK(ls_cospi(0x1p25f) == 1.0f);
  CHECK(is_pos0(ls_cospi(0.5f)));
  CHECK(is_pos0(ls_cospi(-2.5f)));
  CHECK(ls_gelu_tanh(inf) == inf);
  CHECK(is_neg0(ls_gelu_tanh(-inf)));
  CHECK(is_neg0(ls_gelu_tanh(-0.0f)));
  CHECK(is_neg0(ls_gelu_tanh(-1e30f)));
  CHECK(ls_gelu_tanh(1e30f) == 1e30f);
  CHECK(ls_gelu_tanh_grad(0.0f) == 0.5f);
  CHECK(ls_gelu_tanh_grad(inf) == 1.0f);
  CHECK(is_neg0(ls_gelu_tanh_grad(-inf)));
  CHECK(ls_gelu_tanh_grad(1e30f) == 1.0f);
}

namespace {
// One array call on x[off, off + n) (threads 2 past 1,000 elements): every result has the
// scalar function's bits, nothing outside [0, n) of the output is written (sentinels), and
// the in-place call gives the same bits.
bool array_gives_scalar_bits(
    const std::function<void(const KernelCtx&, const float*, float*, int64_t)>& array,
    const std::function<float(float)>& scalar, Isa isa, const std::vector<float>& x, int64_t off,
    int64_t n) {
  KernelCtx ctx;
  ctx.isa = isa;
  ctx.threads = n > 1000 ? 2 : 1;
  std::vector<float> y(n + 2, 42.0f);
  array(ctx, x.data() + off, y.data() + 1, n);
  bool ok = y[0] == 42.0f && y[n + 1] == 42.0f;
  for (int64_t i = 0; i < n; ++i) ok &= bits(y[i + 1]) == bits(scalar(x[off + i]));
  std::vector<float> inplace(x.begin() + off, x.begin() + off + n);
  array(ctx, inplace.data(), inplace.data(), n);
  for (int64_t i = 0; i < n; ++i) ok &= bits(inplace[i]) == bits(y[i + 1]);
  return ok;
}
}  // namespace

TEST_CASE("array API: any length, offset, thread count and in-place call gives scalar bits",
          "[math]") {
  std::vector<float> x(3000);
  fill_normal(9, 9, 0, x.data(), int64_t(x.size()), 0.0f, 6.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[17] = -std::numeric_limits<float>::infinity();
  x[33] = -0.0f;
  x[40] = 0x1p-140f;
  for (int f = 0; f < kCount; ++f) {
    for (Isa isa : supported_isas()) {
      for (int64_t off : {0, 1, 3}) {
        for (int64_t n : {0, 1, 7, 15, 16, 17, 31, 33, 47, 64, 2900}) {
          INFO(kNames[f] << " isa " << isa_name(isa) << " off " << off << " n " << n);
          CHECK(array_gives_scalar_bits(kArray[f], kScalar[f], isa, x, off, n));
        }
      }
    }
  }
  KernelCtx ctx;
  float v = 1.0f;
  CHECK_THROWS(math::exp(ctx, &v, &v, -1));
}

TEST_CASE("exp_shifted == ls_exp(x - shift) for any length, offset, shift and in-place call",
          "[math]") {
  std::vector<float> x(3000);
  fill_normal(9, 10, 0, x.data(), int64_t(x.size()), 0.0f, 30.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[17] = -std::numeric_limits<float>::infinity();
  x[18] = std::numeric_limits<float>::infinity();
  x[33] = -0.0f;
  x[34] = 0.0f;
  x[40] = 0x1p-140f;
  const float inf = std::numeric_limits<float>::infinity();
  for (float shift : {0.0f, -0.0f, 3.25f, -70.5f, 100.0f, 0x1p-140f, inf}) {
    for (Isa isa : supported_isas()) {
      for (int64_t off : {0, 1, 3}) {
        // Lengths around the vector widths (tails of 1..15 lanes, one and two vectors).
        for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 2900}) {
          INFO("shift " << shift << " isa " << isa_name(isa) << " off " << off << " n " << n);
          CHECK(array_gives_scalar_bits(
              [shift](const KernelCtx& c, const float* in, float* out, int64_t len) {
                math::exp_shifted(c, in, shift, out, len);
              },
              [shift](float v) { return math::ls_exp(v - shift); }, isa, x, off, n));
        }
      }
    }
  }
  KernelCtx ctx;
  float v = 1.0f;
  CHECK_THROWS(math::exp_shifted(ctx, &v, 0.0f, &v, -1));
}
