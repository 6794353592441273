// Pipeline schedules (parallel/pipeline_schedule.hpp): every microbatch once forward and once
// backward, backward after forward and in microbatch order on every stage (what keeps the
// gradient combiner's input order, hence the bits, independent of the schedule); 1F1B holds at
// most stages - stage microbatches in flight, GPipe all of them; the schedules, simulated
// together, never wait on a message that is not sent (no deadlock); the bubble model.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "parallel/pipeline_schedule.hpp"

using namespace lockstep;

namespace {

// The largest number of microbatches between their forward and their backward at once.
std::int64_t in_flight(const std::vector<PipeAction>& acts) {
  std::int64_t now = 0, most = 0;
  for (const auto& a : acts) {
    now += a.forward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

// Runs all stages' action lists as communicating processes: F(i) on stage s > 0 needs F(i) of
// stage s - 1 done, B(i) on stage s < p - 1 needs B(i) of stage s + 1 done. Sends never block
// (MPI_Isend). Returns true when every stage finishes.
bool completes(PipeSchedule sch, int p, std::int64_t m) {
  std::vector<std::vector<PipeAction>> acts;
  for (int s = 0; s < p; ++s) acts.push_back(pipeline_actions(sch, p, s, m));
  std::vector<std::size_t> pc(static_cast<std::size_t>(p), 0);
  std::map<std::tuple<int, bool, std::int64_t>, bool> done;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      auto& k = pc[static_cast<std::size_t>(s)];
      if (k == acts[s].size()) continue;
      const PipeAction a = acts[s][k];
      const bool ready = a.forward ? (s == 0 || done[{s - 1, true, a.microbatch}])
                                   : (s == p - 1 || done[{s + 1, false, a.microbatch}]);
      if (!ready) continue;
      done[{s, a.forward, a.microbatch}] = true;
      ++k;
      progress = true;
    }
  }
  for (int s = 0; s < p; ++s)
    if (pc[static_cast<std::size_t>(s)] != acts[s].size()) return false;
  return true;
}

}  // namespace

TEST_CASE("pipeline schedules run each microbatch once each way, backwards in order") {
  for (const PipeSchedule sch : {PipeSchedule::one_f_one_b, PipeSchedule::gpipe})
    for (int p : {1, 2, 3, 4, 8})
      for (std::int64_t m : {1, 2, 3, 4, 7, 8, 16}) {
        for (int s = 0; s < p; ++s) {
          const auto acts = pipeline_actions(sch, p, s, m);
          REQUIRE(acts.size() == static_cast<std::size_t>(2 * m));
          std::vector<std::int64_t> fwd, bwd;
          for (const auto& a : acts) {
            if (a.forward) {
              fwd.push_back(a.microbatch);
            } else {
              // its forward came first
              REQUIRE(std::find(fwd.begin(), fwd.end(), a.microbatch) != fwd.end());
              bwd.push_back(a.microbatch);
            }
          }
          for (std::int64_t i = 0; i < m; ++i) {
            REQUIRE(fwd[static_cast<std::size_t>(i)] == i);
            REQUIRE(bwd[static_cast<std::size_t>(i)] == i);
          }
          const std::int64_t slots = pipeline_slots(sch, p, s, m);
          REQUIRE(in_flight(acts) == slots);
          if (sch == PipeSchedule::one_f_one_b)
            REQUIRE(slots == std::min<std::int64_t>(p - s, m));
          else
            REQUIRE(slots == m);
        }
        INFO("schedule " << enum_name(sch) << ", p " << p << ", m " << m);
        REQUIRE(completes(sch, p, m));
      }
}

TEST_CASE("1F1B: warm-up forwards, then one forward one backward, then the drain") {
  using A = PipeAction;
  // stage 0 of 4, 6 microbatches: 3 warm-up forwards, then F3 B0 F4 B1 F5 B2, then B3 B4 B5
  const std::vector<A> s0 = {{true, 0},  {true, 1}, {true, 2},  {true, 3},  {false, 0}, {true, 4},
                             {false, 1}, {true, 5}, {false, 2}, {false, 3}, {false, 4}, {false, 5}};
  CHECK(pipeline_actions(PipeSchedule::one_f_one_b, 4, 0, 6) == s0);
  const std::vector<A> s3 = {{true, 0}, {false, 0}, {true, 1}, {false, 1},
                             {true, 2}, {false, 2}, {true, 3}, {false, 3}};
  CHECK(pipeline_actions(PipeSchedule::one_f_one_b, 4, 3, 4) == s3);
}

TEST_CASE("the bubble model (p - 1) / (m + p - 1) and the microbatches that bring it under") {
  CHECK(pipeline_bubble(1, 4) == 0.0);
  CHECK(pipeline_bubble(2, 8) == Approx(1.0 / 9.0));
  CHECK(pipeline_bubble(4, 4) == Approx(3.0 / 7.0));
  for (int p : {2, 3, 4, 8}) {
    const std::int64_t m = microbatches_for_bubble(p, 0.25);
    CHECK(pipeline_bubble(p, m) <= 0.25);
    if (m > 1) CHECK(pipeline_bubble(p, m - 1) > 0.25);
  }
}
