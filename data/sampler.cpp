#include "data/sampler.hpp"

#include <string>

#include "runtime/error.hpp"
#include "runtime/philox.hpp"

namespace lockstep::data {
namespace {

constexpr uint64_t kDataStreamTag = 0x44415441ull << 32;  // "DATA"
constexpr int64_t kMaxSamples = int64_t(1) << 48;

// Lemire's unbiased bounded integer in [0, s), candidates drawn as documented in sampler.hpp.
uint64_t bounded(const CounterRng& rng, uint64_t k, uint64_t s) {
  const uint64_t threshold = (0 - s) % s;  // (2^64 - s) mod s
  for (uint64_t c = 0;; ++c) {
    const PhiloxCounter w = rng.block(((c >> 1) << 48) | k);
    const unsigned h = 2 * unsigned(c & 1);
    const uint64_t x = uint64_t(w[h]) | (uint64_t(w[h + 1]) << 32);
    const unsigned __int128 m = static_cast<unsigned __int128>(x) * s;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

}  // namespace

std::vector<int64_t> epoch_permutation(uint64_t seed, uint64_t epoch, int64_t n) {
  check(n >= 0 && n < kMaxSamples,
        "sample order: " + std::to_string(n) + " samples is outside [0, 2^48)");
  check(epoch < (uint64_t(1) << 32),
        "sample order: epoch " + std::to_string(epoch) + " exceeds 2^32 - 1");
  const CounterRng rng(seed, kDataStreamTag | epoch);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  for (int64_t k = 0; k + 1 < n; ++k) {
    const int64_t i = n - 1 - k;
    const auto j = static_cast<int64_t>(bounded(rng, uint64_t(k), uint64_t(i + 1)));
    std::swap(order[i], order[j]);
  }
  return order;
}

Sampler::Sampler(const SamplerConfig& cfg) : cfg_(cfg) {
  check(cfg_.global_batch > 0,
        "data.global_batch must be positive, got " + std::to_string(cfg_.global_batch));
  check(cfg_.num_samples >= cfg_.global_batch,
        "the dataset has " + std::to_string(cfg_.num_samples) +
            " samples, fewer than one global batch of " + std::to_string(cfg_.global_batch),
        "use more data, a smaller model.context, or a smaller data.global_batch");
  check(cfg_.num_samples < kMaxSamples, "the dataset has more than 2^48 samples");
}

const std::vector<int64_t>& Sampler::order(uint64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_order_ = epoch_permutation(cfg_.seed, epoch, cfg_.num_samples);
    cached_epoch_ = epoch;
  }
  return cached_order_;
}

void Sampler::normalize() {
  if (state_.cursor + cfg_.global_batch > cfg_.num_samples) {
    ++state_.epoch;
    state_.cursor = 0;
  }
}

std::vector<int64_t> Sampler::global_batch() const {
  const auto& o = order(state_.epoch);
  return {o.begin() + state_.cursor, o.begin() + state_.cursor + cfg_.global_batch};
}

std::vector<int64_t> Sampler::rank_batch(int dp, int rank) const {
  const int64_t g = cfg_.global_batch;
  check(dp > 0 && rank >= 0 && rank < dp,
        "sampler: DP rank " + std::to_string(rank) + " of " + std::to_string(dp) + " is invalid");
  check(g % dp == 0,
        "data.global_batch " + std::to_string(g) + " is not divisible by the DP size " +
            std::to_string(dp),
        "choose a global batch that is a multiple of ranks / tp");
  const auto& o = order(state_.epoch);
  const int64_t lo = state_.cursor + rank * (g / dp);
  return {o.begin() + lo, o.begin() + lo + g / dp};
}

std::vector<int64_t> Sampler::microbatch(int dp, int rank, int64_t mb, int64_t m) const {
  const std::vector<int64_t> local = rank_batch(dp, rank);
  const int64_t n = static_cast<int64_t>(local.size());
  check(mb > 0 && n % mb == 0,
        "parallel.microbatch " + std::to_string(mb) + " does not divide the " + std::to_string(n) +
            " sequences per DP rank (global batch " + std::to_string(cfg_.global_batch) + " / dp " +
            std::to_string(dp) + ")",
        "choose a microbatch size that divides global_batch / dp");
  check(m >= 0 && m < n / mb, "sampler: microbatch " + std::to_string(m) + " out of range [0, " +
                                  std::to_string(n / mb) + ")");
  return {local.begin() + m * mb, local.begin() + (m + 1) * mb};
}

void Sampler::fill_sequences(const GptDataset& ds, int dp, int rank, int64_t first,
                             int64_t count, int32_t* tokens, int32_t* labels) const {
  check(ds.num_samples() == cfg_.num_samples,
        "sampler built for " + std::to_string(cfg_.num_samples) +
            " samples used with a dataset of " + std::to_string(ds.num_samples()));
  const std::vector<int64_t> local = rank_batch(dp, rank);
  check(first >= 0 && count >= 1 && first + count <= static_cast<int64_t>(local.size()),
        "sampler: sequences [" + std::to_string(first) + ", " + std::to_string(first + count) +
            ") out of range [0, " + std::to_string(local.size()) + ")");
  ds.fill(local.data() + first, count, tokens, labels);
}

void Sampler::fill_microbatch(const GptDataset& ds, int dp, int rank, int64_t mb, int64_t m,
                              int32_t* tokens, int32_t* labels) const {
  check(ds.num_samples() == cfg_.num_samples,
        "sampler built for " + std::to_string(cfg_.num_samples) +
            " samples used with a dataset of " + std::to_string(ds.num_samples()));
  const std::vector<int64_t> idx = microbatch(dp, rank, mb, m);
  ds.fill(idx.data(), mb, tokens, labels);
}

void Sampler::advance() {
  state_.cursor += cfg_.global_batch;
  state_.consumed_samples += cfg_.global_batch;
  normalize();
}

SamplerState Sampler::state_at_step(int64_t step) const {
  check(step >= 0, "sampler: negative step " + std::to_string(step));
  const int64_t spe = steps_per_epoch();
  SamplerState s;
  s.epoch = static_cast<uint64_t>(step / spe);
  s.cursor = (step % spe) * cfg_.global_batch;
  s.consumed_samples = step * cfg_.global_batch;
  return s;
}

void Sampler::restore(const SamplerState& s) {
  check(s.cursor >= 0 && s.cursor <= cfg_.num_samples && s.consumed_samples >= 0,
        "sampler state (epoch " + std::to_string(s.epoch) + ", cursor " + std::to_string(s.cursor) +
            ") does not fit a dataset of " + std::to_string(cfg_.num_samples) + " samples",
        "resume with the same data.path and model.context the checkpoint was written with");
  state_ = s;
  normalize();
}

nlohmann::json Sampler::to_json() const {
  return {{"epoch", state_.epoch},
          {"cursor", state_.cursor},
          {"consumed_samples", state_.consumed_samples},
          {"seed", cfg_.seed},
          {"num_samples", cfg_.num_samples},
          {"global_batch", cfg_.global_batch}};
}

void Sampler::restore_json(const nlohmann::json& j) {
  SamplerState s;
  uint64_t seed = 0;
  int64_t n = 0;
  try {
    s.epoch = j.at("epoch").get<uint64_t>();
    s.cursor = j.at("cursor").get<int64_t>();
    s.consumed_samples = j.at("consumed_samples").get<int64_t>();
    seed = j.at("seed").get<uint64_t>();
    n = j.at("num_samples").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("sampler state JSON is malformed: ") + e.what(),
         "the checkpoint's data state needs epoch, cursor, consumed_samples, seed, num_samples");
  }
  check(seed == cfg_.seed,
        "sampler state was saved with seed " + std::to_string(seed) + ", this run uses " +
            std::to_string(cfg_.seed),
        "resume with the checkpoint's run.seed");
  check(n == cfg_.num_samples,
        "sampler state was saved for " + std::to_string(n) + " samples, this dataset has " +
            std::to_string(cfg_.num_samples),
        "resume with the same data.path and model.context the checkpoint was written with");
  restore(s);
}

}  // namespace lockstep::data
