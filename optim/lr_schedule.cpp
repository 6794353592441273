#include "optim/lr_schedule.hpp"

#include <cmath>

#include "runtime/error.hpp"

namespace lockstep {

const char* lr_schedule_name(LrSchedule s) {
  return enum_name(s).data();
}

LrSchedule parse_lr_schedule(std::string_view name) {
  return parse_enum<LrSchedule>(name, "learning-rate schedule");
}

void validate(const LrScheduleConfig& c) {
  check(std::isfinite(c.lr) && c.lr >= 0.0,
        "optim.lr = " + std::to_string(c.lr) + " is not a finite non-negative number",
        "set optim.lr to the peak learning rate, e.g. 3e-4");
  check(std::isfinite(c.min_lr) && c.min_lr >= 0.0 && c.min_lr <= c.lr,
        "optim.min_lr = " + std::to_string(c.min_lr) +
            " is not within [0, optim.lr = " + std::to_string(c.lr) + "]",
        "set optim.min_lr between 0 and optim.lr");
  check(c.warmup >= 0, "optim.warmup = " + std::to_string(c.warmup) + " is negative",
        "set optim.warmup to a step count >= 0");
  // A run shorter than its warmup is allowed (smoke tests): it never leaves the ramp.
}

double lr_cos_pi(double r) {
  // cos(pi r) = -sin(pi (r - 1/2)); x = pi (r - 1/2) lies in [-pi/2, pi/2]. The Taylor
  // series of sin to x^27 has a truncation error below 2^-70 there. Horner in x^2, highest
  // term first, no FMA (the build has -ffp-contract=off).
  const double t = r - 0.5;
  const double x = 3.141592653589793 * t;
  const double x2 = x * x;
  // 1/(2k+1)! for k = 13 down to 1.
  static constexpr double kInvFact[] = {
      1.0 / 10888869450418352160768000000.0,  // 1/27!
      1.0 / 15511210043330985984000000.0,     // 1/25!
      1.0 / 25852016738884976640000.0,        // 1/23!
      1.0 / 51090942171709440000.0,           // 1/21!
      1.0 / 121645100408832000.0,             // 1/19!
      1.0 / 355687428096000.0,                // 1/17!
      1.0 / 1307674368000.0,                  // 1/15!
      1.0 / 6227020800.0,                     // 1/13!
      1.0 / 39916800.0,                       // 1/11!
      1.0 / 362880.0,                         // 1/9!
      1.0 / 5040.0,                           // 1/7!
      1.0 / 120.0,                            // 1/5!
      1.0 / 6.0,                              // 1/3!
  };
  // sin x = x (1 - x^2/3! + x^4/5! - ...): p = sum_k (-1)^k x^(2k) / (2k+1)!
  double p = 0.0;
  double sign = -1.0;  // the x^26 term has k = 13: negative
  for (double c : kInvFact) {
    p = p * x2 + sign * c;
    sign = -sign;
  }
  p = p * x2 + 1.0;
  return -(x * p);
}

float lr_at(const LrScheduleConfig& c, std::int64_t step) {
  validate(c);
  check(step >= 0, "learning rate asked for step " + std::to_string(step),
        "steps count from 1 (0 is before the first update)");
  const double max_lr = c.lr, min_lr = c.min_lr;
  // Megatron: max_lr * float(num_steps) / float(lr_warmup_steps), left to right.
  if (c.warmup > 0 && step <= c.warmup)
    return static_cast<float>(max_lr * static_cast<double>(step) / static_cast<double>(c.warmup));
  if (c.schedule == LrSchedule::constant) return static_cast<float>(max_lr);
  if (step > c.total_steps) return static_cast<float>(min_lr);
  const double num = static_cast<double>(step - c.warmup);
  const double den = static_cast<double>(c.total_steps - c.warmup);
  const double ratio = den > 0.0 ? num / den : 1.0;  // den == 0 only when step == warmup == 0
  const double delta = max_lr - min_lr;
  double coeff;
  if (c.schedule == LrSchedule::linear) {
    coeff = 1.0 - ratio;
  } else {
    coeff = 0.5 * (lr_cos_pi(ratio) + 1.0);
  }
  return static_cast<float>(min_lr + coeff * delta);
}

}  // namespace lockstep
