#include "launch/train/preemption.hpp"

#include <csignal>
#include <cstdint>

#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/watchdog.hpp"

namespace lockstep {
namespace {

// The one piece of process-wide state a signal handler can touch.
volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_term, g_old_int;
bool g_installed = false;

void on_signal(int sig) {
  g_signal = sig;
  // The next signal of this kind ends the process the default way.
  std::signal(sig, SIG_DFL);
}

}  // namespace

PreemptionGuard::PreemptionGuard() {
  check(!g_installed, "two PreemptionGuards at once", "create one per training run");
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  check(sigaction(SIGTERM, &sa, &g_old_term) == 0 && sigaction(SIGINT, &sa, &g_old_int) == 0,
        "cannot install the SIGTERM/SIGINT handlers", "a bug: sigaction failed");
  g_signal = 0;
  g_installed = true;
}

PreemptionGuard::~PreemptionGuard() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  g_installed = false;
}

bool PreemptionGuard::requested(const Communicator& world, int* signal) const {
  watchdog::Phase phase("preemption check");
  const auto sig = allreduce_u64(world, static_cast<std::uint64_t>(g_signal), IntOp::max);
  if (signal) *signal = static_cast<int>(sig);
  return sig != 0;
}

}  // namespace lockstep
