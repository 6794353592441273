#include "parallel/dp_grad.hpp"

#include <string>
#include <vector>

#include "runtime/collectives.hpp"
#include "runtime/error.hpp"

namespace lockstep {

GradReducer::GradReducer(std::int64_t len, Determinism mode)
    : len_(len), mode_(mode), counter_(len) {}

void GradReducer::reset() {
  counter_.clear();
}

void GradReducer::push_microbatch(const float* grads) {
  counter_.push(grads);
}

void GradReducer::allreduce(const Communicator& dp, std::span<float> out) const {
  check(static_cast<std::int64_t>(out.size()) == len_,
        "GradReducer::allreduce: output of " + std::to_string(out.size()) + " floats for a " +
            std::to_string(len_) + "-float gradient");
  check(counter_.leaves() > 0, "GradReducer: no microbatch was pushed this step",
        "call push_microbatch() for every microbatch before reducing");
  counter_.result(out.data());
  allreduce_sum(mode_, dp, out);
}

void GradReducer::reduce_scatter(const Communicator& dp, std::span<float> out) const {
  check(len_ % dp.size() == 0 && static_cast<std::int64_t>(out.size()) == len_ / dp.size(),
        "GradReducer::reduce_scatter: " + std::to_string(len_) + " floats over " +
            std::to_string(dp.size()) + " DP ranks into a segment of " + std::to_string(out.size()),
        "pad the flat gradient to a multiple of the DP size");
  check(counter_.leaves() > 0, "GradReducer: no microbatch was pushed this step",
        "call push_microbatch() for every microbatch before reducing");
  std::vector<float> merged(static_cast<std::size_t>(len_));
  counter_.result(merged.data());
  reduce_scatter_sum(mode_, dp, merged, out);
}

}  // namespace lockstep
