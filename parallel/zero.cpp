#include "parallel/zero.hpp"

#include <algorithm>
#include <string>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"

namespace lockstep {

ZeroPartition::ZeroPartition(std::vector<std::int64_t> numel, std::vector<int> terms, int dp,
                             int rank)
    : numel_(std::move(numel)), terms_(std::move(terms)), dp_(dp), rank_(rank) {
  check(dp >= 1 && rank >= 0 && rank < dp,
        "ZeroPartition: rank " + std::to_string(rank) + " of " + std::to_string(dp));
  check(numel_.size() == terms_.size(), "ZeroPartition: one term count per parameter");
  for (std::size_t p = 0; p < numel_.size(); ++p) {
    seg_.push_back((numel_[p] + dp - 1) / dp);
    grad_off_.push_back(grad_block_);
    param_off_.push_back(param_block_);
    grad_block_ += terms_[p] * seg_[p];
    param_block_ += seg_[p];
  }
}

std::int64_t ZeroPartition::owned(std::size_t p) const {
  return std::clamp<std::int64_t>(numel_[p] - first(p), 0, seg_[p]);
}

void ZeroPartition::pack_grads(const std::vector<std::vector<const float*>>& grads,
                               float* out) const {
  for (int r = 0; r < dp_; ++r) {
    float* block = out + r * grad_block_;
    for (std::size_t p = 0; p < numel_.size(); ++p) {
      const std::int64_t lo = seg_[p] * r;
      const std::int64_t n = std::clamp<std::int64_t>(numel_[p] - lo, 0, seg_[p]);
      for (int t = 0; t < terms_[p]; ++t) {
        float* dst = block + grad_offset(p, t);
        std::copy_n(grads[p][t] + lo, n, dst);
        std::fill(dst + n, dst + seg_[p], kAdditiveIdentity);
      }
    }
  }
}

void ZeroPartition::pack_params(const std::vector<const float*>& params, float* out) const {
  for (std::size_t p = 0; p < numel_.size(); ++p) {
    const std::int64_t n = owned(p);
    std::copy_n(params[p] + first(p), n, out + param_off_[p]);
    std::fill(out + param_off_[p] + n, out + param_off_[p] + seg_[p], kAdditiveIdentity);
  }
}

void ZeroPartition::unpack_params(const float* all, const std::vector<float*>& params) const {
  for (int r = 0; r < dp_; ++r)
    for (std::size_t p = 0; p < numel_.size(); ++p) {
      const std::int64_t lo = seg_[p] * r;
      const std::int64_t n = std::clamp<std::int64_t>(numel_[p] - lo, 0, seg_[p]);
      std::copy_n(all + r * param_block_ + param_off_[p], n, params[p] + lo);
    }
}

}  // namespace lockstep
