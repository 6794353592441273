// ZeRO-1 partition: segments cover every element exactly once, padding is -0.0, and
// pack/unpack round-trips parameters for any DP size (including non-dividing sizes).
#include <catch2/catch.hpp>

#include <vector>

#include "parallel/zero.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;

TEST_CASE("ZeRO partition packs gradients rank-major and round-trips parameters") {
  const std::vector<std::int64_t> numel = {10, 1, 7, 16};
  const std::vector<int> terms = {2, 1, 1, 1};
  for (int dp : {1, 2, 3, 4}) {
    std::vector<std::vector<float>> data;
    for (std::size_t p = 0; p < numel.size(); ++p)
      data.push_back(lockstep::testing::mixed_floats(numel[p] * terms[p], 10 + p));
    std::vector<std::vector<const float*>> grads;
    for (std::size_t p = 0; p < numel.size(); ++p) {
      grads.emplace_back();
      for (int t = 0; t < terms[p]; ++t) grads.back().push_back(data[p].data() + t * numel[p]);
    }
    std::vector<float> all_params;
    std::vector<std::int64_t> covered(numel.size(), 0);
    for (int r = 0; r < dp; ++r) {
      ZeroPartition part(numel, terms, dp, r);
      std::vector<float> buf(static_cast<std::size_t>(part.grad_block() * dp));
      part.pack_grads(grads, buf.data());
      for (std::size_t p = 0; p < numel.size(); ++p) {
        covered[p] += part.owned(p);
        for (int t = 0; t < terms[p]; ++t) {
          const float* seg = buf.data() + r * part.grad_block() + part.grad_offset(p, t);
          for (std::int64_t i = 0; i < part.segment(p); ++i) {
            const std::int64_t e = part.first(p) + i;
            const float want = e < numel[p] ? grads[p][t][e] : -0.0f;
            REQUIRE(lockstep::testing::bits(seg[i]) == lockstep::testing::bits(want));
          }
        }
      }
      std::vector<const float*> src;
      for (std::size_t p = 0; p < numel.size(); ++p) src.push_back(grads[p][0]);
      std::vector<float> block(static_cast<std::size_t>(part.param_block()));
      part.pack_params(src, block.data());
      all_params.insert(all_params.end(), block.begin(), block.end());
    }
    for (std::size_t p = 0; p < numel.size(); ++p) REQUIRE(covered[p] == numel[p]);
    ZeroPartition part0(numel, terms, dp, 0);
    std::vector<std::vector<float>> out;
    std::vector<float*> dst;
    for (auto n : numel) out.emplace_back(n, 99.0f);
    for (auto& o : out) dst.push_back(o.data());
    part0.unpack_params(all_params.data(), dst);
    for (std::size_t p = 0; p < numel.size(); ++p)
      REQUIRE(lockstep::testing::same_bits(out[p].data(), grads[p][0], numel[p]));
  }
}
