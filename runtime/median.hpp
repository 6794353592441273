// The median of a set of timings (header-only): the middle value, the mean of the two middle
// values for an even count, 0 for an empty set. The watchdog's automatic timeout, the
// trainer's closing per-rank line, `lockstep tax` and the benchmarks summarise their timings
// with it, so each figure a user reads is the same statistic.
// Determinism contract: timing summaries only; no value that training computes passes here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace lockstep {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const std::size_t mid = v.size() / 2;
  const auto at = v.begin() + static_cast<std::ptrdiff_t>(mid);
  std::nth_element(v.begin(), at, v.end());
  if (v.size() % 2 == 1) return *at;
  return 0.5 * (*std::max_element(v.begin(), at) + *at);
}

}  // namespace lockstep
