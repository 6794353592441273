// Tests of the Megatron learning-rate schedule (optim/lr_schedule.hpp): hand values,
// monotonicity, agreement with a math.cos-based transcription of Megatron's get_lr, and
// config validation.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "optim/lr_schedule.hpp"
#include "runtime/error.hpp"

using namespace lockstep;

namespace {

// Megatron's OptimizerParamScheduler.get_lr transcribed with libm's cos (the reference).
double megatron_lr(const LrScheduleConfig& c, std::int64_t step) {
  if (c.warmup > 0 && step <= c.warmup) return c.lr * double(step) / double(c.warmup);
  if (c.schedule == LrSchedule::constant) return c.lr;
  if (step > c.total_steps) return c.min_lr;
  const double ratio = double(step - c.warmup) / double(c.total_steps - c.warmup);
  const double delta = c.lr - c.min_lr;
  const double coeff = c.schedule == LrSchedule::linear
                           ? 1.0 - ratio
                           : 0.5 * (std::cos(3.141592653589793 * ratio) + 1.0);
  return c.min_lr + coeff * delta;
}

std::int64_t ulp_distance(float a, float b) {
  std::int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::llabs(std::int64_t{ia} - std::int64_t{ib});
}

}  // namespace

TEST_CASE("cosine schedule: hand values") {
  LrScheduleConfig c{1e-3, 1e-4, 10, 110, LrSchedule::cosine};
  CHECK(lr_at(c, 0) == 0.0f);
  CHECK(lr_at(c, 1) == static_cast<float>(1e-3 * 1.0 / 10.0));
  CHECK(lr_at(c, 5) == static_cast<float>(5e-3 / 10.0));
  CHECK(lr_at(c, 10) == static_cast<float>(1e-3));
  CHECK(lr_at(c, 60) == Approx(5.5e-4).epsilon(1e-6));  // ratio 1/2: halfway
  CHECK(lr_at(c, 110) == static_cast<float>(1e-4));     // cos(pi) = -1: min_lr exactly
  CHECK(lr_at(c, 111) == static_cast<float>(1e-4));
  CHECK(lr_at(c, 1000000) == static_cast<float>(1e-4));
}

TEST_CASE("linear and constant schedules: hand values") {
  LrScheduleConfig c{1e-3, 1e-4, 10, 110, LrSchedule::linear};
  CHECK(lr_at(c, 60) == static_cast<float>(1e-4 + 0.5 * (1e-3 - 1e-4)));
  CHECK(lr_at(c, 35) == static_cast<float>(1e-4 + 0.75 * (1e-3 - 1e-4)));
  CHECK(lr_at(c, 110) == static_cast<float>(1e-4));
  c.schedule = LrSchedule::constant;
  CHECK(lr_at(c, 5) == static_cast<float>(5e-4));
  CHECK(lr_at(c, 11) == static_cast<float>(1e-3));
  CHECK(lr_at(c, 5000) == static_cast<float>(1e-3));
  // No warmup: step 0 and 1 already decay from the peak.
  LrScheduleConfig n{3e-4, 3e-5, 0, 100, LrSchedule::cosine};
  CHECK(lr_at(n, 0) == static_cast<float>(3e-4));
}

TEST_CASE("schedules are monotone: rising in warmup, falling after") {
  for (LrSchedule s : {LrSchedule::cosine, LrSchedule::linear, LrSchedule::constant}) {
    LrScheduleConfig c{6e-4, 6e-5, 100, 2000, s};
    float prev = lr_at(c, 0);
    for (std::int64_t t = 1; t <= 100; ++t) {
      const float lr = lr_at(c, t);
      CHECK(lr > prev);
      prev = lr;
    }
    for (std::int64_t t = 101; t <= 2100; ++t) {
      const float lr = lr_at(c, t);
      CHECK(lr <= prev);
      CHECK(lr >= static_cast<float>(c.min_lr));
      prev = lr;
    }
  }
}

TEST_CASE("agrees with Megatron's math.cos formula rounded to float") {
  int differing = 0;
  for (LrSchedule s : {LrSchedule::cosine, LrSchedule::linear}) {
    for (std::int64_t total : {7, 100, 1000, 60000}) {
      LrScheduleConfig c{6e-4, 6e-5, total / 10, total, s};
      for (std::int64_t t = 0; t <= total + 2; t += (total > 2000 ? 7 : 1)) {
        const float ours = lr_at(c, t);
        const float ref = static_cast<float>(megatron_lr(c, t));
        CHECK(ulp_distance(ours, ref) <= 1);
        differing += ours != ref;
      }
    }
  }
  INFO("steps whose float lr differs from the libm-cos value by one ulp: " << differing);
  CHECK(differing <= 2);
  for (int k = 0; k <= 1000; ++k) {
    const double r = k / 1000.0;
    CHECK(std::fabs(lr_cos_pi(r) - std::cos(3.141592653589793 * r)) <= 4e-16);
  }
  CHECK(lr_cos_pi(0.0) == 1.0);
  CHECK(lr_cos_pi(1.0) == -1.0);
}

TEST_CASE("bad schedule configs are rejected with the field named") {
  CHECK_THROWS_AS(lr_at(LrScheduleConfig{1e-4, 1e-3, 0, 10, LrSchedule::cosine}, 1),
                  lockstep::Error);  // min_lr > lr
  // A run shorter than its warmup stays on the ramp (allowed for smoke tests).
  CHECK(lr_at(LrScheduleConfig{1e-3, 0.0, 20, 10, LrSchedule::cosine}, 10) ==
        static_cast<float>(1e-3 * 10.0 / 20.0));
  CHECK_THROWS_AS(lr_at(LrScheduleConfig{1e-3, 0.0, 0, 10, LrSchedule::cosine}, -1),
                  lockstep::Error);
  CHECK(parse_lr_schedule("cosine") == LrSchedule::cosine);
  CHECK(parse_lr_schedule("linear") == LrSchedule::linear);
  CHECK(parse_lr_schedule("constant") == LrSchedule::constant);
  CHECK_THROWS_AS(parse_lr_schedule("exp"), lockstep::Error);
  CHECK(std::string(lr_schedule_name(LrSchedule::cosine)) == "cosine");
}
