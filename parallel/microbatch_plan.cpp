#include "parallel/microbatch_plan.hpp"

#include <string>

#include "runtime/error.hpp"

namespace lockstep {

MicrobatchPlan plan_microbatches(TreeShape tree, std::int64_t sequences, std::int64_t microbatch) {
  check(microbatch >= 1 && microbatch <= sequences,
        "parallel.microbatch " + std::to_string(microbatch) + " is outside [1, " +
            std::to_string(sequences) + "], the sequences per DP rank",
        "choose a microbatch of at most global_batch / dp sequences");
  MicrobatchPlan plan{tree, 0, {}};
  if (tree == TreeShape::pow2) {
    check(sequences % microbatch == 0,
          "parallel.microbatch " + std::to_string(microbatch) + " does not divide the " +
              std::to_string(sequences) + " sequences per DP rank",
          "choose a microbatch size that divides global_batch / dp (or numerics.tree = "
          "\"halving\", where any size works)");
    plan.leaves = sequences / microbatch;
    for (std::int64_t m = 0; m < plan.leaves; ++m) plan.passes.push_back({m * microbatch, microbatch, 1});
    return plan;
  }
  plan.leaves = sequences;
  for (std::int64_t lo = 0; lo < sequences;) {
    const std::int64_t hi = largest_node_from(tree, sequences, lo, sequences, microbatch);
    plan.passes.push_back({lo, hi - lo, hi - lo});
    lo = hi;
  }
  return plan;
}

}  // namespace lockstep
