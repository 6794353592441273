// The replay lab on the regression MLP (launch/experiments/lab_regression.hpp): every check passes
// on the default lab, the summary is bitwise reproducible, and the checks are able to fail.
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "launch/experiments/lab_regression.hpp"

namespace {

std::string work_dir(const char* name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("regression lab: every check passes, in the issue's schema") {
  const auto r = lockstep::lab::run_regression_lab({}, work_dir("lockstep_test_lab_a"));
  REQUIRE(r.checks.size() >= 15);
  for (const auto& c : r.checks) {
    INFO(c.name << " (" << c.detail << ")");
    CHECK(c.passed);
  }
  const auto s = r.summary();
  CHECK(s["checks_passed"].get<std::size_t>() == r.checks.size());
  REQUIRE(s["summary"].size() == 5);
  CHECK(s["summary"][0]["first_weight_mismatch"].is_null());
  CHECK(s["summary"][1]["first_weight_mismatch"].is_null());
  CHECK(s["summary"][2]["first_weight_mismatch"] == 1);
  CHECK(s["summary"][3]["first_weight_mismatch"] == 41);
  CHECK(s["summary"][4]["first_weight_mismatch"] == 41);
  CHECK(s["reference_final_loss"].get<double>() > 0);
}

TEST_CASE("regression lab: two runs give byte-identical summaries") {
  const auto a = lockstep::lab::run_regression_lab({}, work_dir("lockstep_test_lab_b"));
  // The same directory: the details name the checkpoint file.
  const auto b = lockstep::lab::run_regression_lab({}, work_dir("lockstep_test_lab_b"));
  CHECK(a.summary().dump() == b.summary().dump());
  CHECK(a.details().dump() == b.details().dump());
}

TEST_CASE("regression lab: the checks can fail") {
  lockstep::lab::RegressionLabConfig cfg;
  cfg.lr = 0.0;  // nothing learns and nothing moves: several predictions must fail
  const auto r = lockstep::lab::run_regression_lab(cfg, work_dir("lockstep_test_lab_d"));
  int failed = 0;
  for (const auto& c : r.checks) failed += !c.passed;
  CHECK(failed >= 3);
  CHECK_FALSE(r.checks.front().passed);  // "reference learns"
  // Another restore step moves the first mismatch of the resets with it.
  cfg = {};
  cfg.steps = 30;
  cfg.restore_at = 10;
  const auto s = lockstep::lab::run_regression_lab(cfg, work_dir("lockstep_test_lab_e")).summary();
  CHECK(s["summary"][3]["first_weight_mismatch"] == 11);
  CHECK(s["summary"][4]["first_weight_mismatch"] == 11);
}
