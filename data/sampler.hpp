// The global sample order (docs/design.md section 3): per epoch, a Philox-keyed permutation of the
// GPT samples; each step consumes one global batch of G consecutive entries of that order; DP
// rank r of dp takes the contiguous slice [r*G/dp, (r+1)*G/dp) and splits it into consecutive
// microbatches. The state is {epoch, cursor} (+ consumed_samples), serializable to JSON.
//
// Permutation of epoch e over n samples (fixed; changing it changes every run's data order):
//   key = {lo32(seed), hi32(seed)}, stream = 0x44415441'00000000 | e ("DATA" tag, e < 2^32),
//   rng = CounterRng(seed, stream) (runtime/philox.hpp).
//   Fisher-Yates: order = [0, 1, ..., n-1]; for k = 0 .. n-2: i = n-1-k,
//     j = bounded(k, i + 1), swap(order[i], order[j]).
//   bounded(k, s) (unbiased, Lemire's multiply-and-reject on 64 bits): candidate c = 0, 1, ...
//     is x_c = w[2(c%2)] | w[2(c%2)+1] << 32 from rng.block((c/2) << 48 | k); the first c with
//     lo64(x_c * s) >= (2^64 - s) mod s is accepted and j = hi64(x_c * s) (128-bit product).
//     n < 2^48. In practice c = 0 (rejection probability < s / 2^64).
// Batches: the next global batch is order_epoch[cursor, cursor + G). After a step,
// cursor += G and consumed_samples += G; when fewer than G samples remain in the epoch, the
// remainder is dropped and the state rolls to (epoch + 1, cursor 0). So with a fixed G, step s
// is epoch s / (n / G), cursor (s % (n / G)) * G.
// Determinism contract: the sample indices of (state, dp rank, microbatch) are a pure function
// of (seed, n, G, state); the union over ranks and microbatches, in rank-then-microbatch
// order, is the global batch whatever dp and mb are (G3 for data).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/gpt_dataset.hpp"

namespace lockstep::data {

struct SamplerState {
  uint64_t epoch = 0;
  int64_t cursor = 0;            // samples of this epoch's order already consumed
  int64_t consumed_samples = 0;  // over all epochs (Megatron's consumed_samples)
  bool operator==(const SamplerState&) const = default;
};

struct SamplerConfig {
  int64_t num_samples = 0;   // GptDataset::num_samples()
  int64_t global_batch = 0;  // G, sequences per step
  uint64_t seed = 0;         // run.seed
};

// The permutation of [0, n) for (seed, epoch), as specified above.
std::vector<int64_t> epoch_permutation(uint64_t seed, uint64_t epoch, int64_t n);

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& cfg);

  const SamplerConfig& config() const { return cfg_; }
  const SamplerState& state() const { return state_; }
  int64_t steps_per_epoch() const { return cfg_.num_samples / cfg_.global_batch; }

  // The G global sample indices of the next step (at the current state).
  std::vector<int64_t> global_batch() const;
  // The G/dp indices of DP rank `rank` (G % dp == 0 required).
  std::vector<int64_t> rank_batch(int dp, int rank) const;
  // Microbatch m (of size mb, (G/dp) % mb == 0) of DP rank `rank`.
  std::vector<int64_t> microbatch(int dp, int rank, int64_t mb, int64_t m) const;
  // Row-major [mb, C] tokens and labels of that microbatch.
  void fill_microbatch(const GptDataset& ds, int dp, int rank, int64_t mb, int64_t m,
                       int32_t* tokens, int32_t* labels) const;
  // Row-major [count, C] tokens and labels of this DP rank's sequences [first, first + count)
  // (a microbatch of launch's MicrobatchPlan, whose sizes may differ).
  void fill_sequences(const GptDataset& ds, int dp, int rank, int64_t first, int64_t count,
                      int32_t* tokens, int32_t* labels) const;
  // The step is done: move past the global batch (rolling into the next epoch as specified).
  void advance();

  // The state a fresh sampler reaches after `step` advances with this G.
  SamplerState state_at_step(int64_t step) const;
  // Continue from a saved state (validated against this sampler's n and G).
  void restore(const SamplerState& s);

  // {"epoch", "cursor", "consumed_samples", "seed", "num_samples", "global_batch"}.
  nlohmann::json to_json() const;
  // Restores the state from to_json() output; fails if seed or num_samples differ (another
  // dataset or seed would silently change the data order).
  void restore_json(const nlohmann::json& j);

 private:
  const std::vector<int64_t>& order(uint64_t epoch) const;
  void normalize();

  SamplerConfig cfg_;
  SamplerState state_;
  mutable uint64_t cached_epoch_ = ~0ull;
  mutable std::vector<int64_t> cached_order_;
};

}  // namespace lockstep::data
