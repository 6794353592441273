// Data-parallel gradient reduction (docs/design.md section 2, "weight gradients"): a step's
// gradient is one canonical sum over all tokens of the global batch. Each microbatch's
// backward yields a subtree over its tokens (a node of this rank's tree, parallel/
// microbatch_plan.hpp); GradReducer merges the microbatches of this rank by that tree's post
// order (a TreeCombiner: under halving over the rank's sequences, under pow2 a binary counter
// over equal microbatches) and then combines the DP ranks with the canonical tree (allreduce,
// or reduce-scatter for the distributed optimizer).
// Determinism contract: in invariant mode the reduced gradient equals the single-process
// gradient bit for bit whenever each DP rank owns a node of the global batch's tree and each
// microbatch a node of the rank's (launch/train/validate.hpp states when). In deterministic
// and fast modes the microbatches are merged by the same tree and ranks by MPI_Allreduce /
// MPI_Reduce_scatter_block: fixed for a layout, not across layouts.
// Op trace (set_observer, runtime/op_observer.hpp): the reduction records itself as the op
// "dp.reduce" with inputs = this rank's microbatch gradient buffers (the leaves, in push
// order) and output = this rank's reduced buffer (the whole gradient, or its ZeRO segment).
// debug.perturb=dp.reduce replaces the canonical combination by a left-to-right chain over
// all leaves of all DP ranks in (rank, microbatch) order, computed identically on every rank
// (the leaves are allgathered): another association of the same sum, as a nondeterministic
// reduction would give. It needs at least 4 leaves in the DP group (with 3 the canonical tree
// is the chain (a + b) + c, with 2 every order gives a + b), else it refuses to run
// (lockstep::Error).
// Leaves are copied only while recording or perturbing; otherwise the cost is one branch.
// Copies: the counter copies a leaf only when it opens a new level of the tree (a leaf that
// completes a subtree is merged where it is). push_microbatch_deferred() only remembers the
// pointer and hands the leaf to the counter when another microbatch follows or the step is
// reduced; a step of one microbatch is then reduced straight from the caller's buffer (no copy
// when that buffer is also the output), and reduce_scatter sends the counter's root as it is.
// Streamed microbatches (open_microbatch) are not copied at all: a microbatch that opens a
// level is written there by the backward, one that merges is merged piece by piece.
// The arithmetic, and so every bit, is the same either way.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "runtime/comm.hpp"
#include "runtime/csum.hpp"
#include "runtime/determinism.hpp"
#include "runtime/op_observer.hpp"

namespace lockstep {

class GradReducer {
 public:
  // `len` floats: the flat gradient buffer (all gradient terms of this rank, in order); the
  // microbatches of a step are nodes of the `tree` over `leaves` leaves (MicrobatchPlan).
  // threads: for the elementwise merges of the microbatches (the bits do not depend on it).
  GradReducer(std::int64_t len, Determinism mode, TreeShape tree, std::int64_t leaves,
              int threads = 1);

  // Starts a new step: forgets all microbatches.
  void reset();
  // Adds one microbatch's gradient subtree (len floats) covering the next `width` leaves of
  // the tree (MicrobatchPlan's Microbatch::width).
  void push_microbatch(const float* grads, std::int64_t width = 1);
  // The same without copying now: `grads` must stay valid and unchanged until the next
  // push_microbatch*() or flush_deferred() call or the end of the step's reduction (the
  // caller may write the next microbatch into the same buffer after flush_deferred()).
  void push_microbatch_deferred(const float* grads, std::int64_t width = 1);
  // Copies a deferred leaf into the counter (no-op if there is none).
  void flush_deferred();
  std::int64_t microbatches() const { return n_pushed_; }

  // Streamed microbatches (TreeCombiner::open_node): the caller's backward writes a microbatch
  // straight into the buffer open_microbatch() returns (it opens a stack level), or, when that
  // is nullptr, hands it over in merge_part() pieces as they finish, then close_microbatch().
  // Not while the leaves are kept (keeps_leaves(): op trace recording or debug.perturb).
  float* open_microbatch(std::int64_t width);
  void merge_part(std::int64_t offset, const float* part, std::int64_t n) {
    counter_.merge_part(offset, part, n);
  }
  void close_microbatch() { counter_.close_node(); }
  // The step's merged gradient is built in `root` (len floats; nullptr: the counter's own
  // buffers), so allreduce(dp, root) copies nothing. Call right after reset().
  void set_root_buffer(float* root) { counter_.set_root_buffer(root); }
  bool keeps_leaves() const;

  // Writes the merged gradient of this rank's microbatches into out (len floats), then
  // sums over `dp` in place: tree allreduce (invariant) or MPI_Allreduce (otherwise).
  // `out` may be the buffer of a deferred single microbatch (then nothing is copied).
  void allreduce(const Communicator& dp, std::span<float> out);
  // The same, but reduce-scatters over dp: `out` receives this DP rank's segment r of
  // size len / dp.size() (len must be a multiple of dp.size(); pad the flat buffer).
  void reduce_scatter(const Communicator& dp, std::span<float> out);

  // The op trace / fault-injection hook (nullptr: none). Not owned.
  void set_observer(OpObserver* observer) { observer_ = observer; }
  static constexpr std::string_view kOpName = "dp.reduce";

 private:
  // debug.perturb: out (len floats) = chain over every rank's leaves in (rank, microbatch)
  // order; collective over dp.
  void perturbed_sum(const Communicator& dp, std::span<float> out) const;
  void record(std::span<const float> out) const;

  std::int64_t len_;
  Determinism mode_;
  TreeCombiner counter_;
  std::int64_t n_pushed_ = 0;
  std::int64_t deferred_width_ = 0;
  OpObserver* observer_ = nullptr;
  std::vector<std::vector<float>> leaves_;  // copies, only while recording or perturbing
  std::int64_t n_leaves_ = 0;
  const float* deferred_ = nullptr;  // the last leaf, not yet in counter_
  std::vector<float> merged_;        // reduce_scatter's send buffer under debug.perturb
};

}  // namespace lockstep
