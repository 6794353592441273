// The Catch2 v2 main for multi-rank tests (ctest runs them under mpirun at np 1, 2, 4).
// Every rank runs every test case inside lockstep::run_ranks; the exit code is non-zero if
// any rank failed. Nothing may hang: an unexpected exception or a failed REQUIRE on one
// rank would leave that rank skipping the rest of a test case while its peers wait in a
// collective, so the listener below turns either into one error line and MPI_Abort of the
// whole job. Tests use CHECK for per-rank comparisons and REQUIRE only where every rank
// takes the same branch.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <string>

#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"

namespace {

int world_rank() {
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

struct AbortOnFatalFailure : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  std::string test_name;

  void testCaseStarting(Catch::TestCaseInfo const& info) override { test_name = info.name; }

  bool assertionEnded(Catch::AssertionStats const& stats) override {
    const Catch::AssertionResult& res = stats.assertionResult;
    const bool fatal =
        res.getResultType() == Catch::ResultWas::ThrewException ||
        (!res.isOk() && !Catch::shouldContinueOnFailure(res.m_info.resultDisposition));
    if (!fatal) return true;
    std::string msg = "test '" + test_name + "': " + std::string(res.m_info.macroName) + "(" +
                      std::string(res.m_info.capturedExpression) + ")";
    if (res.hasExpandedExpression()) msg += " with expansion " + res.getExpandedExpression();
    if (res.hasMessage()) msg += ": " + res.getMessage();
    msg += " at " + std::string(res.getSourceInfo().file) + ":" +
           std::to_string(res.getSourceInfo().line);
    lockstep::abort_job(world_rank(), "catch", msg);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(AbortOnFatalFailure)

int main(int argc, char** argv) {
  return lockstep::run_ranks(argc, argv, [&](lockstep::Context& ctx) {
    const int failed = Catch::Session().run(argc, argv);
    const std::uint64_t mine = failed != 0;
    return lockstep::allreduce_u64(ctx.world(), mine, lockstep::IntOp::max) != 0 ? 1 : 0;
  });
}
