// Tests of the progress watchdog's pure parts (runtime/watchdog.hpp): the automatic timeout
// rule (the first 2 steps skipped, 10 x the median, at least 300 s) and the heartbeat. The
// watched waits themselves are tested in tests/mpi/test_collectives.cpp (same bits armed and
// off) and end to end by tests/e2e/fault_watchdog.py (a SIGSTOPped rank). Also the median that
// the watchdog shares with the trainer's closing line, `lockstep tax` and the benchmarks
// (runtime/median.hpp).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "runtime/median.hpp"
#include "runtime/watchdog.hpp"

using namespace lockstep;

TEST_CASE("auto timeout: the floor of 300 s until steps are slow", "[watchdog]") {
  CHECK(watchdog::auto_timeout({}) == 300.0);
  const std::vector<double> warmup_only{500.0, 400.0};  // the first 2 steps do not count
  CHECK(watchdog::auto_timeout(warmup_only) == 300.0);
  const std::vector<double> fast{100.0, 90.0, 0.5, 0.4, 0.6};
  CHECK(watchdog::auto_timeout(fast) == 300.0);
}

TEST_CASE("auto timeout: 10 x the median of the steps after the first 2", "[watchdog]") {
  const std::vector<double> odd{1.0, 1.0, 40.0, 30.0, 1000.0};  // median of 40, 30, 1000
  CHECK(watchdog::auto_timeout(odd) == 400.0);
  const std::vector<double> even{0.0, 0.0, 20.0, 60.0, 40.0, 1e6};  // (40 + 60) / 2
  CHECK(watchdog::auto_timeout(even) == 500.0);
  const std::vector<double> one{0.0, 0.0, 31.0};
  CHECK(watchdog::auto_timeout(one) == 310.0);
}

TEST_CASE("median: the middle value, the mean of the two middle ones, 0 for none", "[median]") {
  CHECK(median({}) == 0.0);
  CHECK(median({7.0}) == 7.0);
  CHECK(median({3.0, 1.0, 2.0}) == 2.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 2.5);
  CHECK(median({5.0, 5.0, 1.0, 9.0}) == 5.0);
}

TEST_CASE("heartbeat: step and phase are plain stores, Phase restores", "[watchdog]") {
  watchdog::set_step(12);
  watchdog::set_phase("forward/backward");
  {
    watchdog::Phase p("checkpoint save");
    CHECK(std::string(watchdog::phase()) == "checkpoint save");
  }
  CHECK(std::string(watchdog::phase()) == "forward/backward");
  CHECK(watchdog::step() == 12);
  CHECK(watchdog::timeout_seconds() == 0.0);  // no Session: off, waits are plain
}
