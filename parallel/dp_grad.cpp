#include "parallel/dp_grad.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "runtime/collectives.hpp"
#include "runtime/error.hpp"

namespace lockstep {

GradReducer::GradReducer(std::int64_t len, Determinism mode, TreeShape tree, std::int64_t leaves,
                         int threads)
    : len_(len), mode_(mode), counter_(len, tree, leaves, threads) {}

void GradReducer::reset() {
  counter_.clear();
  n_leaves_ = 0;
  n_pushed_ = 0;
  deferred_ = nullptr;
}

bool GradReducer::keeps_leaves() const {
  return observer_ && (observer_->recording() || observer_->perturb(kOpName));
}

void GradReducer::flush_deferred() {
  if (!deferred_) return;
  counter_.push_node(deferred_, deferred_width_);
  deferred_ = nullptr;
}

void GradReducer::push_microbatch_deferred(const float* grads, std::int64_t width) {
  flush_deferred();
  deferred_ = grads;
  deferred_width_ = width;
  ++n_pushed_;
  if (keeps_leaves()) {
    if (static_cast<std::int64_t>(leaves_.size()) <= n_leaves_) leaves_.emplace_back();
    leaves_[n_leaves_++].assign(grads, grads + len_);
  }
}

float* GradReducer::open_microbatch(std::int64_t width) {
  check(!keeps_leaves(), "GradReducer: a streamed microbatch while its leaves are kept",
        "push whole microbatches (push_microbatch) while recording or perturbing");
  flush_deferred();
  ++n_pushed_;
  return counter_.open_node(width);
}

void GradReducer::push_microbatch(const float* grads, std::int64_t width) {
  flush_deferred();
  counter_.push_node(grads, width);
  ++n_pushed_;
  if (keeps_leaves()) {
    if (static_cast<std::int64_t>(leaves_.size()) <= n_leaves_) leaves_.emplace_back();
    leaves_[n_leaves_++].assign(grads, grads + len_);
  }
}

void GradReducer::perturbed_sum(const Communicator& dp, std::span<float> out) const {
  check(n_leaves_ == microbatches(),
        "GradReducer: debug.perturb=dp.reduce was switched on in the middle of a step",
        "set the observer before the first push_microbatch of a step");
  const std::int64_t total = n_leaves_ * dp.size();
  check(total >= 4,
        "debug.perturb=dp.reduce: the DP group holds only " + std::to_string(total) +
            " microbatch gradient(s); with fewer than 4 the chain is the canonical tree ((a + b) "
            "+ c) and every order of two gives the same bits",
        "use more microbatches per step (smaller parallel.microbatch or larger data.global_batch)");
  std::vector<float> mine(static_cast<std::size_t>(n_leaves_ * len_));
  for (std::int64_t i = 0; i < n_leaves_; ++i)
    std::copy(leaves_[i].begin(), leaves_[i].end(), mine.begin() + i * len_);
  std::vector<float> all(static_cast<std::size_t>(total * len_));
  allgather(dp, mine, all);
  std::copy_n(all.data(), len_, out.data());
  for (std::int64_t l = 1; l < total; ++l) {
    const float* x = all.data() + l * len_;
    for (std::int64_t e = 0; e < len_; ++e) out[e] = out[e] + x[e];
  }
}

void GradReducer::record(std::span<const float> out) const {
  if (!observer_ || !observer_->recording()) return;
  std::vector<std::span<const float>> in;
  for (std::int64_t i = 0; i < n_leaves_; ++i) in.emplace_back(leaves_[i]);
  observer_->record(kOpName, in, out);
}

void GradReducer::allreduce(const Communicator& dp, std::span<float> out) {
  check(static_cast<std::int64_t>(out.size()) == len_,
        "GradReducer::allreduce: output of " + std::to_string(out.size()) + " floats for a " +
            std::to_string(len_) + "-float gradient");
  check(microbatches() > 0, "GradReducer: no microbatch was pushed this step",
        "call push_microbatch() for every microbatch before reducing");
  if (observer_ && observer_->perturb(kOpName)) {
    perturbed_sum(dp, out);
  } else {
    if (deferred_ && counter_.leaves() == 0) {  // one microbatch: its node is the root
      if (deferred_ != out.data()) std::copy_n(deferred_, len_, out.data());
    } else {
      flush_deferred();
      counter_.result(out.data());
    }
    allreduce_sum(mode_, dp, out);
  }
  record(out);
}

void GradReducer::reduce_scatter(const Communicator& dp, std::span<float> out) {
  check(len_ % dp.size() == 0 && static_cast<std::int64_t>(out.size()) == len_ / dp.size(),
        "GradReducer::reduce_scatter: " + std::to_string(len_) + " floats over " +
            std::to_string(dp.size()) + " DP ranks into a segment of " + std::to_string(out.size()),
        "pad the flat gradient to a multiple of the DP size");
  check(microbatches() > 0, "GradReducer: no microbatch was pushed this step",
        "call push_microbatch() for every microbatch before reducing");
  if (observer_ && observer_->perturb(kOpName)) {
    merged_.resize(static_cast<std::size_t>(len_));
    perturbed_sum(dp, merged_);
    const std::int64_t seg = len_ / dp.size();
    std::copy_n(merged_.data() + dp.rank() * seg, seg, out.data());
  } else if (deferred_ && counter_.leaves() == 0) {  // one microbatch: send it as it is
    reduce_scatter_sum(mode_, dp, std::span<const float>(deferred_, static_cast<std::size_t>(len_)),
                       out);
  } else {
    flush_deferred();
    reduce_scatter_sum(
        mode_, dp, std::span<const float>(counter_.root(), static_cast<std::size_t>(len_)), out);
  }
  record(out);
}

}  // namespace lockstep
