// Pipeline schedules (docs/design.md section 8): the order in which one pipeline stage runs
// the forward (F) and backward (B) passes of a step's microbatches, for 1F1B (PipeDream-flush,
// Megatron's default: stage s runs min(pp - s - 1, m) forwards, then alternates one forward
// and one backward, then drains the remaining backwards) and GPipe (all forwards, then all
// backwards). Also how many microbatches a stage holds activations for at once (its
// activation slots) and the bubble fraction of the model: (p - 1) / (m + p - 1).
// Determinism contract: a schedule only orders passes; under both, every stage runs the
// backwards in microbatch order 0, 1, ..., m - 1, so the gradient combiner receives its nodes
// in token order whatever the schedule, and the schedule cannot change a bit.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/enum_names.hpp"

namespace lockstep {

enum class PipeSchedule : std::uint8_t { one_f_one_b, gpipe };
constexpr std::array<EnumName<PipeSchedule>, 2> enum_names(PipeSchedule) {
  return {{{PipeSchedule::one_f_one_b, "1f1b"}, {PipeSchedule::gpipe, "gpipe"}}};
}

struct PipeAction {
  bool forward;             // F (true) or B (false)
  std::int64_t microbatch;  // 0-based index in the step's plan
  bool operator==(const PipeAction&) const = default;
};

// The passes stage `stage` (0-based, of `stages`) runs for `microbatches` microbatches, in
// order: each microbatch appears once as F and once as B, B after F, backwards in order.
std::vector<PipeAction> pipeline_actions(PipeSchedule schedule, int stages, int stage,
                                         std::int64_t microbatches);

// The most microbatches whose activations the stage holds at once under the schedule
// (1F1B: min(stages - stage, m); GPipe: m). Microbatch i uses slot i % slots.
std::int64_t pipeline_slots(PipeSchedule schedule, int stages, int stage,
                            std::int64_t microbatches);

// The idle fraction of the ideal pipeline (every pass the same length, free communication):
// (p - 1) / (m + p - 1); 0 for one stage.
double pipeline_bubble(int stages, std::int64_t microbatches);

// The smallest microbatch count whose bubble is at most `fraction` at this stage count.
std::int64_t microbatches_for_bubble(int stages, double fraction);

}  // namespace lockstep
