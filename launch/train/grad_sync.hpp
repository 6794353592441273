// Gradient synchronisation and optimizer state of one rank (the middle of docs/design.md section
// 4's training step): microbatch subtrees -> canonical DP reduction (tree allreduce, or the
// ZeRO-1 tree reduce-scatter) -> gradient terms combined -> update slices (whole local
// parameters, or this DP rank's segments under ZeRO) -> after AdamW, ZeRO allgathers the
// parameters. It also describes all of this state as StatePieces (runtime/state_piece.hpp)
// for fingerprints and checkpoints, with exactly one owner rank per logical element.
// Determinism contract: ZeRO on and off give identical bits (parallel/zero.hpp); the exact
// global norm is summed with integer additions over DP segments and TP shards, so it is the
// same on every layout; the state pieces are pure geometry.
// Pipeline parallelism: a rank holds, reduces and updates only its stage's parameters (the others
// are empty tensors, listed as empty non-owner pieces so every rank has the same piece list);
// the tied embed.weight's two terms, reduced on the first and the last stage, are exchanged
// between them and combined on both in table order, and the first stage owns it; the norm adds
// the stages' exact sums over pp_comm.
// Memory: without ZeRO the model's gradient terms are views into the flat buffer the reduction
// runs on (when every term starts on a 64-byte boundary there, as for every model whose sizes
// are multiples of 16), so a microbatch's backward writes its gradients where the reducer reads
// them: no second copy of the gradient. The caller calls begin_microbatch() before each
// backward, which moves the previous microbatch out of that buffer first.
// Streaming (no ZeRO, more than one microbatch a step, op trace and debug.perturb of
// dp.reduce off): that buffer is the combiner's level 0, where the step's
// merged gradient ends; a microbatch that opens a stack level is written by the backward
// straight into that level, and one that merges is written into a scratch of one parameter
// group (a layer's terms, or the head's or the embedding's) and merged into the stack as each
// group finishes (Gpt::set_grads_ready); a pipeline stage's terms of other stages are zeros
// in every level, as in the copying path. So a step of m microbatches holds
// TreeCombiner::peak_levels buffers of the gradient plus one group, not one buffer more.
// Speed: one microbatch per step is packed straight into the reduction's output buffer and
// reduced there (GradReducer::push_microbatch_deferred); a parameter with one gradient term
// has its update slice's grad pointing into that buffer (no combine copy); only tied
// parameters (several terms) are combined into their own buffer. The norm's square sums run
// on `threads` threads and, without ZeRO, are split over the DP replicas (exact integer sums
// completed by an integer allreduce, so neither split changes a bit).
#pragma once

#include <cstdint>
#include <vector>

#include "model/gpt.hpp"
#include "parallel/dp_grad.hpp"
#include "parallel/zero.hpp"
#include "runtime/aligned_vector.hpp"
#include "runtime/grid.hpp"
#include "runtime/state_piece.hpp"

namespace lockstep {

// One slice of optimizer work: the elements of one parameter this rank updates.
struct UpdateSlice {
  float* param;  // [n] this rank's elements of the local (TP-shard) parameter
  float* grad;   // [n] reduced, combined gradient of those elements
  float* m;      // [n] AdamW first moment
  float* v;      // [n] AdamW second moment
  std::int64_t n;
  std::int64_t first;  // first element inside the local parameter (ZeRO segment start)
  bool decay;          // weight decay (2-D weights)
  bool count_in_norm;  // counted by this rank in the global norm (replicas count once)
};

// The state groups of the trace and the checkpoint, in phase order.
enum class StateKind { grad, adam_m, adam_v, param };
const char* state_prefix(StateKind k);  // "grad/", "adam_m/", "adam_v/", "param/"

class GradSync {
 public:
  // tree, leaves: the tree the step's microbatches are nodes of (MicrobatchPlan).
  GradSync(Gpt& model, const Grid& grid, Determinism mode, bool zero, int threads, TreeShape tree,
           std::int64_t leaves);
  ~GradSync();
  GradSync(const GradSync&) = delete;  // the model's grads-ready hook points here
  GradSync& operator=(const GradSync&) = delete;

  void begin_step() { reducer_.reset(); }
  // Before each microbatch's backward (the node of `width` leaves): the previous microbatch's
  // gradients leave the buffer the model writes into (and, on a pipeline stage, the terms this
  // stage does not compute are zeros again, as in a model that owns its gradients); streaming,
  // the model's terms are pointed where this microbatch goes.
  void begin_microbatch(std::int64_t width);
  // Adds the model's current gradients (one microbatch, covering `width` leaves of the tree, as
  // given to begin_microbatch) to the step's counter.
  void push_microbatch(std::int64_t width);
  // The model's gradient terms live in the reduction's buffer (see the header comment).
  bool grads_in_place() const { return in_place_; }
  // Floats of the streaming scratch (the largest parameter group; 0 until a step merges).
  std::int64_t scratch_floats() const { return std::ssize(scratch_); }
  // Canonical DP reduction and term combination: fills the slices' grad.
  void reduce();
  // Exact global gradient norm over all slices (collective over DP and TP).
  float grad_norm() const;
  std::vector<UpdateSlice>& slices() { return slices_; }
  // ZeRO: allgather the updated parameter segments (no-op otherwise).
  void publish_params();
  GradReducer& reducer() { return reducer_; }
  const Gpt& model() const { return model_; }
  bool zero() const { return zero_; }

  // This rank's pieces of one state group, in parameter-table order, each named
  // "<prefix><param name>". Owners: TP-replicated tensors are owned by TP rank p % tp;
  // DP-replicated ones (everything without ZeRO, parameters always) by DP rank p % dp, so
  // checkpoint writes spread over the ranks.
  std::vector<StatePiece> pieces(StateKind kind);

 private:
  void exchange_stage_terms(std::size_t p, const std::vector<float*>& terms);
  void place_grads_in_buffer();
  // Points every model gradient term at base + offset[param][term].
  void point_terms(float* base, const std::vector<std::vector<std::int64_t>>& offset);
  void group_ready(int group);  // streaming: merges the group's finished terms
  StatePiece absent_piece(const std::string& name, const ParamSpec& spec) const;

  Gpt& model_;
  const Grid& grid_;
  bool zero_;
  int threads_;
  std::vector<std::vector<std::int64_t>> term_offset_;  // [param][term] in the flat buffer
  std::int64_t flat_len_ = 0;
  ZeroPartition part_;
  GradReducer reducer_;
  AlignedVector<float> flat_;     // [dp * grad_block] (ZeRO only): one microbatch
  AlignedVector<float> reduced_;  // [grad_block] (ZeRO) or [flat_len]; without ZeRO also the
                                  // microbatch buffer (the model's terms, reduced in place)
  bool in_place_ = false;         // the model's gradient terms are views into reduced_
  std::int64_t leaves_;
  bool can_stream_ = false;  // the terms are in place (no ZeRO)
  bool streaming_ = false;   // this step
  bool merging_ = false;     // this microbatch's terms are in scratch_, merged group by group
  std::vector<std::vector<GradTermId>> groups_;
  std::vector<std::vector<std::int64_t>> scratch_offset_;  // [param][term] in scratch_
  std::int64_t scratch_len_ = 0;
  AlignedVector<float> scratch_;
  struct Span {
    std::int64_t offset, n;
  };
  std::vector<Span> absent_terms_;  // in reduced_: terms of held parameters this stage skips
  std::vector<float> param_block_, all_params_;     // ZeRO allgather buffers
  std::vector<AlignedVector<float>> grad_, m_, v_;  // [param][slice elements]; grad_ only
                                                    // for parameters of several terms
  std::vector<UpdateSlice> slices_;
};

}  // namespace lockstep
