// The op-trace hook and debug.perturb of the DP gradient reduction (parallel/dp_grad.hpp,
// op "dp.reduce"), at np 1, 2, 4: observing records one op with this rank's microbatch
// leaves as inputs and the reduced buffer as output and changes no bit; perturbing gives
// exactly the left-to-right chain over all ranks' leaves in (rank, microbatch) order (the
// same bits on every rank), which differs from the canonical tree; the same for the ZeRO
// reduce-scatter; fewer than 4 leaves in the group is refused.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/dp_grad.hpp"
#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;

namespace {

struct Recorder final : OpObserver {
  bool rec = true;
  std::string perturb_op;
  std::vector<std::string> ops;
  std::vector<std::vector<std::vector<float>>> inputs;
  std::vector<std::vector<float>> outputs;
  bool recording() const override { return rec; }
  void record(std::string_view op, std::span<const std::span<const float>> in,
              std::span<const float> out) override {
    ops.emplace_back(op);
    inputs.emplace_back();
    for (const auto& s : in) inputs.back().emplace_back(s.begin(), s.end());
    outputs.emplace_back(out.begin(), out.end());
  }
  bool perturb(std::string_view op) const override { return op == perturb_op; }
};

constexpr int kLeaves = 4;

std::vector<float> leaf(int rank, int mb, std::size_t len) {
  return mixed_floats(len, 1000 + 10 * static_cast<std::uint64_t>(rank) + mb);
}

}  // namespace

TEST_CASE("dp.reduce: recorded without changing bits; perturbed = chain over all leaves") {
  const Communicator world = Communicator::world();
  const int P = world.size(), r = world.rank();
  const std::size_t len = 1024;  // a multiple of 1, 2, 4 (reduce-scatter)

  auto reduce = [&](OpObserver* obs, bool scatter) {
    GradReducer red(static_cast<std::int64_t>(len), Determinism::invariant, TreeShape::pow2, kLeaves);
    red.set_observer(obs);
    red.reset();
    for (int m = 0; m < kLeaves; ++m) red.push_microbatch(leaf(r, m, len).data());
    std::vector<float> out(scatter ? len / P : len);
    if (scatter)
      red.reduce_scatter(world, out);
    else
      red.allreduce(world, out);
    return out;
  };
  // The independent reference of the perturbed order: ((L00 + L01) + L02) + L10 + ...
  std::vector<float> chain = leaf(0, 0, len);
  for (int q = 0; q < P; ++q)
    for (int m = (q == 0 ? 1 : 0); m < kLeaves; ++m) {
      const auto x = leaf(q, m, len);
      for (std::size_t e = 0; e < len; ++e) chain[e] = chain[e] + x[e];
    }

  for (bool scatter : {false, true}) {
    INFO("scatter " << scatter << " np " << P);
    const auto plain = reduce(nullptr, scatter);
    Recorder rec;
    const auto observed = reduce(&rec, scatter);
    CHECK(same_bits(plain.data(), observed.data(), plain.size()));
    REQUIRE(rec.ops.size() == 1);
    CHECK(rec.ops[0] == "dp.reduce");
    REQUIRE(rec.inputs[0].size() == kLeaves);
    for (int m = 0; m < kLeaves; ++m) CHECK(rec.inputs[0][m] == leaf(r, m, len));
    CHECK(rec.outputs[0] == observed);

    Recorder pert;
    pert.perturb_op = "dp.reduce";
    pert.rec = false;
    const auto perturbed = reduce(&pert, scatter);
    CHECK(pert.ops.empty());  // not recording
    const std::size_t off = scatter ? r * (len / P) : 0;
    CHECK(same_bits(perturbed.data(), chain.data() + off, perturbed.size()));
    CHECK(bit_diff(perturbed, plain).differing > 0);
  }
  // The full perturbed result is the same on every rank (replicas stay replicas).
  Recorder pert;
  pert.perturb_op = "dp.reduce";
  CHECK(identical_across_ranks(world, reduce(&pert, false)));
  // Another op name perturbs nothing.
  Recorder other;
  other.perturb_op = "head.fwd";
  CHECK(reduce(&other, false) == reduce(nullptr, false));
}

TEST_CASE("dp.reduce perturbation refuses a group with fewer than 4 leaves") {
  const Communicator world = Communicator::world();
  if (world.size() != 1) return;  // every rank takes the same branch
  Recorder pert;
  pert.perturb_op = "dp.reduce";
  GradReducer red(8, Determinism::invariant, TreeShape::pow2, 3);
  red.set_observer(&pert);
  const std::vector<float> x(8, 1.0f);
  for (int m = 0; m < 3; ++m) red.push_microbatch(x.data());
  std::vector<float> out(8);
  CHECK_THROWS_AS(red.allreduce(world, out), Error);
}
