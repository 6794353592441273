// A deterministic GPT microbatch for the model tests (unit and multi-rank): n sequences of
// c.context tokens and labels from one 64-bit LCG (Knuth's MMIX constants), tokens from its
// bits 33.., labels from bits label_shift.., both mod c.vocab; sequence ids first_seq_id,
// first_seq_id + 1, ... (they key dropout). Each test keeps its own seed and ids (BatchSpec),
// so moving the helper here changed no test's data.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace lockstep::testing {

struct Batch {
  std::vector<std::int32_t> tokens, labels;
  std::vector<std::int64_t> seq_ids;
};

struct BatchSpec {
  std::uint64_t seed = 0;
  std::int64_t first_seq_id = 0;
  int label_shift = 17;
};

inline Batch make_batch(const ModelConfig& c, std::int64_t n, const BatchSpec& spec) {
  Batch b;
  std::uint64_t s = spec.seed;
  for (std::int64_t t = 0; t < n * c.context; ++t) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b.tokens.push_back(static_cast<std::int32_t>((s >> 33) % c.vocab));
    b.labels.push_back(static_cast<std::int32_t>((s >> spec.label_shift) % c.vocab));
  }
  for (std::int64_t i = 0; i < n; ++i) b.seq_ids.push_back(spec.first_seq_id + i);
  return b;
}

}  // namespace lockstep::testing
