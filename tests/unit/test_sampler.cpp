// The global sample order (data/sampler.hpp): Philox-keyed permutations per epoch, global
// batches as consecutive slices with the epoch remainder dropped, layout independence over DP
// ranks and microbatches, and bitwise resume from a saved state.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <vector>

#include "data/gpt_dataset.hpp"
#include "data/sampler.hpp"
#include "runtime/error.hpp"

using namespace lockstep;
using namespace lockstep::data;

namespace {

bool is_permutation_of_iota(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != int64_t(i)) return false;
  return true;
}

// The global batches of `steps` steps taken with layout (dp, mb): per step, the concatenation
// over ranks r and microbatches m of sampler.microbatch(dp, r, mb, m).
std::vector<std::vector<int64_t>> run_layout(const SamplerConfig& cfg, int dp, int64_t mb,
                                             int steps) {
  Sampler s(cfg);
  std::vector<std::vector<int64_t>> out;
  const int64_t per_rank = cfg.global_batch / dp;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> batch;
    for (int r = 0; r < dp; ++r)
      for (int64_t m = 0; m < per_rank / mb; ++m) {
        const auto mbx = s.microbatch(dp, r, mb, m);
        REQUIRE(int64_t(mbx.size()) == mb);
        batch.insert(batch.end(), mbx.begin(), mbx.end());
      }
    out.push_back(batch);
    s.advance();
  }
  return out;
}

}  // namespace

TEST_CASE("sampler: epoch order is a permutation keyed by (seed, epoch) only", "[data][sampler]") {
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
    CAPTURE(n);
    const auto p = epoch_permutation(1234, 0, n);
    CHECK(int64_t(p.size()) == n);
    CHECK(is_permutation_of_iota(p));
    CHECK(p == epoch_permutation(1234, 0, n));
  }
  const auto e0 = epoch_permutation(1234, 0, 1000), e1 = epoch_permutation(1234, 1, 1000);
  const auto s2 = epoch_permutation(99, 0, 1000);
  CHECK(e0 != e1);
  CHECK(e0 != s2);
  CHECK(is_permutation_of_iota(e1));
  // Not the identity, and not a rotation of it.
  int64_t fixed = 0;
  for (int64_t i = 0; i < 1000; ++i) fixed += e0[size_t(i)] == i;
  CHECK(fixed < 10);
}

TEST_CASE("sampler: the permutation is pinned (changing it changes every run's data)",
          "[data][sampler]") {
  // Values of the documented algorithm (Fisher-Yates + Lemire over CounterRng), reproduced by an
  // independent Python implementation of the spec in data/sampler.hpp.
  const auto p = epoch_permutation(1234, 0, 10);
  const auto q = epoch_permutation(1234, 7, 10);
  INFO("epoch 0: " << ::Catch::Detail::stringify(p)
                   << "  epoch 7: " << ::Catch::Detail::stringify(q));
  CHECK(p == std::vector<int64_t>{1, 2, 8, 5, 7, 9, 6, 3, 4, 0});
  CHECK(q == std::vector<int64_t>{0, 6, 5, 2, 7, 1, 8, 9, 3, 4});
}

TEST_CASE("sampler: permutations are uniform (all 6 orders of 3 equally likely)",
          "[data][sampler]") {
  std::map<std::vector<int64_t>, int> count;
  const int epochs = 6000;
  for (int e = 0; e < epochs; ++e) ++count[epoch_permutation(42, uint64_t(e), 3)];
  REQUIRE(count.size() == 6);
  for (const auto& [perm, c] : count) {
    CAPTURE(perm, c);
    CHECK(c > 850);  // expected 1000, sd ~ 29
    CHECK(c < 1150);
  }
}

TEST_CASE("sampler: global batches walk the epoch order; the remainder is dropped",
          "[data][sampler]") {
  SamplerConfig cfg{50, 16, 7};  // 3 steps per epoch, 2 samples dropped per epoch
  Sampler s(cfg);
  CHECK(s.steps_per_epoch() == 3);
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    const auto order = epoch_permutation(7, epoch, 50);
    for (int64_t k = 0; k < 3; ++k) {
      CHECK(s.state().epoch == epoch);
      CHECK(s.state().cursor == k * 16);
      const auto b = s.global_batch();
      CHECK(b == std::vector<int64_t>(order.begin() + k * 16, order.begin() + (k + 1) * 16));
      s.advance();
    }
  }
  CHECK(s.state() == SamplerState{3, 0, 9 * 16});
  CHECK(s.state_at_step(9) == s.state());
  CHECK(s.state_at_step(4) == SamplerState{1, 16, 64});
}

TEST_CASE("sampler: layout independence over dp and microbatch sizes", "[data][sampler]") {
  const SamplerConfig cfg{203, 16, 1234};  // 12 steps per epoch; run past two epoch ends
  const int steps = 30;
  const auto ref = run_layout(cfg, 1, 16, steps);
  {
    Sampler s(cfg);
    for (int step = 0; step < steps; ++step, s.advance())
      CHECK(ref[size_t(step)] == s.global_batch());
  }
  for (int dp : {1, 2, 4})
    for (int64_t mb : {1, 2, 4}) {
      CAPTURE(dp, mb);
      CHECK(run_layout(cfg, dp, mb, steps) == ref);
    }
  // Rank r's slice is the contiguous [r*G/dp, (r+1)*G/dp) of the global batch.
  Sampler s(cfg);
  const auto g = s.global_batch();
  CHECK(s.rank_batch(4, 3) == std::vector<int64_t>(g.begin() + 12, g.end()));
  CHECK_THROWS_WITH(s.rank_batch(3, 0), Catch::Contains("not divisible by the DP size 3"));
  CHECK_THROWS_WITH(s.microbatch(2, 0, 3, 0), Catch::Contains("does not divide"));
  CHECK_THROWS_AS(s.rank_batch(2, 2), Error);
}

TEST_CASE("sampler: resume from a saved state continues the identical sequence",
          "[data][sampler]") {
  const SamplerConfig cfg{100, 8, 5};  // 12 steps per epoch
  Sampler a(cfg);
  std::vector<std::vector<int64_t>> uninterrupted;
  for (int step = 0; step < 40; ++step, a.advance()) uninterrupted.push_back(a.global_batch());
  for (int k : {0, 5, 11, 12, 13, 24, 35}) {  // mid-epoch, last step of an epoch, epoch starts
    CAPTURE(k);
    Sampler b(cfg);
    for (int step = 0; step < k; ++step) b.advance();
    const nlohmann::json saved = nlohmann::json::parse(b.to_json().dump());
    Sampler c(cfg);
    c.restore_json(saved);
    CHECK(c.state() == b.state());
    CHECK(c.state() == c.state_at_step(k));
    for (int step = k; step < 40; ++step, c.advance())
      CHECK(c.global_batch() == uninterrupted[size_t(step)]);
  }
  Sampler other_seed(SamplerConfig{100, 8, 6});
  CHECK_THROWS_WITH(other_seed.restore_json(a.to_json()), Catch::Contains("seed 5"));
  Sampler other_data(SamplerConfig{101, 8, 5});
  CHECK_THROWS_WITH(other_data.restore_json(a.to_json()), Catch::Contains("100 samples"));
  CHECK_THROWS_WITH(other_data.restore_json(nlohmann::json{{"epoch", 1}}),
                    Catch::Contains("malformed"));
}

TEST_CASE("sampler: microbatch buffers hold the samples' tokens and labels", "[data][sampler]") {
  class Iota : public TokenSource {
   public:
    int64_t num_tokens() const override { return 1000; }
    void read(int64_t first, int64_t count, int32_t* out) const override {
      for (int64_t k = 0; k < count; ++k) out[k] = int32_t(first + k);
    }
    std::string describe() const override { return "iota"; }
  };
  GptDataset ds(std::make_shared<Iota>(), 10);
  Sampler s(SamplerConfig{ds.num_samples(), 8, 3});
  s.advance();
  std::vector<int32_t> tok(20), lab(20);
  s.fill_microbatch(ds, 2, 1, 2, 1, tok.data(), lab.data());
  const auto idx = s.microbatch(2, 1, 2, 1);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 10; ++k) {
      CHECK(tok[size_t(r * 10 + k)] == int32_t(idx[size_t(r)] * 10 + k));
      CHECK(lab[size_t(r * 10 + k)] == int32_t(idx[size_t(r)] * 10 + k + 1));
    }
  CHECK_THROWS_WITH(Sampler(SamplerConfig{4, 8, 1}),
                    Catch::Contains("fewer than one global batch"));
}
