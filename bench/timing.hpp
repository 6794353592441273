// The timing loops and statistics the benchmarks share (header-only; bench/ only):
//   wall_s(), cpu_s()   the steady clock and a CPU-time clock (default: this process's, all
//                       threads; CLOCK_THREAD_CPUTIME_ID: the calling thread's), seconds;
//   median(v)           the median (the mean of the two middle values for an even count);
//   spread(v)           {min, median, max} of a set of trials;
//   time_trials(...)    `trials` timed trials of `calls` calls each, every trial after an
//                       untimed prepare(): {min, median, max} seconds per call.
// On a VM whose speed drifts the minimum is the steadiest figure; the benchmarks print both.
// Timing only: nothing here touches the values a benchmark computes.
#pragma once

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/median.hpp"

namespace lockstep::bench {

inline double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double cpu_s(clockid_t clock = CLOCK_PROCESS_CPUTIME_ID) {
  timespec ts{};
  check(::clock_gettime(clock, &ts) == 0, "clock_gettime failed",
        "a CPU-time clock this kernel does not offer");
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

using lockstep::median;

struct Spread {
  double min = 0.0, median = 0.0, max = 0.0;
};

inline Spread spread(const std::vector<double>& v) {
  if (v.empty()) return {};
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return {*lo, median(v), *hi};
}

// Seconds per call of run(): `trials` trials of `calls` back-to-back calls, each trial after an
// untimed prepare() (null: none). The caller warms up first where the first call is special.
inline Spread time_trials(int trials, int calls, const std::function<void()>& run,
                          const std::function<void()>& prepare = {}) {
  std::vector<double> per_call;
  for (int t = 0; t < trials; ++t) {
    if (prepare) prepare();
    const double t0 = wall_s();
    for (int c = 0; c < calls; ++c) run();
    per_call.push_back((wall_s() - t0) / calls);
  }
  return spread(per_call);
}

}  // namespace lockstep::bench
