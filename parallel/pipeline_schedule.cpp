#include "parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace lockstep {

std::vector<PipeAction> pipeline_actions(PipeSchedule schedule, int stages, int stage,
                                         std::int64_t microbatches) {
  const std::int64_t m = microbatches;
  std::vector<PipeAction> out;
  out.reserve(static_cast<std::size_t>(2 * m));
  if (schedule == PipeSchedule::gpipe) {
    for (std::int64_t i = 0; i < m; ++i) out.push_back({true, i});
    for (std::int64_t i = 0; i < m; ++i) out.push_back({false, i});
    return out;
  }
  const std::int64_t warmup = std::min<std::int64_t>(stages - stage - 1, m);
  std::int64_t f = 0, b = 0;
  for (; f < warmup; ++f) out.push_back({true, f});
  for (; f < m; ++f, ++b) {
    out.push_back({true, f});
    out.push_back({false, b});
  }
  for (; b < m; ++b) out.push_back({false, b});
  return out;
}

std::int64_t pipeline_slots(PipeSchedule schedule, int stages, int stage,
                            std::int64_t microbatches) {
  if (schedule == PipeSchedule::gpipe) return std::max<std::int64_t>(1, microbatches);
  return std::max<std::int64_t>(1, std::min<std::int64_t>(stages - stage, microbatches));
}

double pipeline_bubble(int stages, std::int64_t microbatches) {
  if (stages <= 1) return 0.0;
  return static_cast<double>(stages - 1) / static_cast<double>(microbatches + stages - 1);
}

std::int64_t microbatches_for_bubble(int stages, double fraction) {
  if (stages <= 1) return 1;
  // (p - 1) / (m + p - 1) <= f  <=>  m >= (p - 1) (1 - f) / f
  const double need = (stages - 1) * (1.0 - fraction) / fraction;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(need - 1e-9)));
}

}  // namespace lockstep
