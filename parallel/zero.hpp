// The distributed optimizer (ZeRO-1) partition: every parameter's elements are split into
// dp equal segments (the last padded), and DP rank r owns segment r of every parameter:
// it receives the reduced gradient of those elements (tree reduce-scatter), keeps the AdamW
// moments of those elements only, updates them, and the ranks allgather the parameters.
// The gradient buffer is laid out rank-major — [rank][param][term][segment] — so one
// reduce-scatter hands each rank all gradient terms of its own elements.
// Determinism contract: each element's reduced gradient is the same canonical tree over DP
// ranks as in the allreduce (reduce-scatter evaluates the identical per-element tree), and
// AdamW is elementwise, so ZeRO on and off give identical bits; allgather moves bits only.
#pragma once

#include <cstdint>
#include <vector>

namespace lockstep {

class ZeroPartition {
 public:
  // numel[p]: local elements of parameter p; terms[p]: its gradient terms.
  ZeroPartition(std::vector<std::int64_t> numel, std::vector<int> terms, int dp, int rank);

  int dp() const { return dp_; }
  std::int64_t segment(std::size_t p) const { return seg_[p]; }  // ceil(numel / dp)
  // This rank's first element of parameter p and how many real (unpadded) elements it owns.
  std::int64_t first(std::size_t p) const { return seg_[p] * rank_; }
  std::int64_t owned(std::size_t p) const;
  // Floats per rank in the gradient buffer (sum over params of terms x segment) and in the
  // parameter buffer (sum of segments).
  std::int64_t grad_block() const { return grad_block_; }
  std::int64_t param_block() const { return param_block_; }
  // Offset of (param p, term t) inside one rank's gradient block / of p in a param block.
  std::int64_t grad_offset(std::size_t p, int t) const { return grad_off_[p] + t * seg_[p]; }
  std::int64_t param_offset(std::size_t p) const { return param_off_[p]; }

  // grads[p][t] -> rank-major buffer of dp * grad_block() floats; padding is -0.0.
  void pack_grads(const std::vector<std::vector<const float*>>& grads, float* out) const;
  // This rank's parameter segments -> one param block (padding -0.0).
  void pack_params(const std::vector<const float*>& params, float* out) const;
  // All ranks' param blocks (dp * param_block(), rank order) -> full local parameters.
  void unpack_params(const float* all, const std::vector<float*>& params) const;

 private:
  std::vector<std::int64_t> numel_, seg_, grad_off_, param_off_;
  std::vector<int> terms_;
  int dp_, rank_;
  std::int64_t grad_block_ = 0, param_block_ = 0;
};

}  // namespace lockstep
