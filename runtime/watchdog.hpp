// The progress watchdog (docs/design.md section 9): a job in which a rank stops making
// progress (stopped, hung, spinning) ends with one line instead of waiting for ever.
// Provides: the process's heartbeat (the step and the phase this rank is in: plain stores, no
// syscalls); the timeout rule (fixed seconds, off, or automatic: max(300 s, 10 x the median
// step after the first 2)); watched_wait(), the one wait every collective of Lockstep uses
// (MPI_Testall in a loop that looks at the steady clock every 256 polls); and the "who is
// alive" round: a rank whose wait passes the timeout probes every world rank over the
// watchdog's own duplicate of MPI_COMM_WORLD, every rank that is itself waiting answers with
// its heartbeat, and after a short grace the prober aborts the job naming the step, the phase
// and the ranks that did not answer. Probes are answered only inside waits, so compute is
// untouched. No thread: only the main thread calls MPI (MPI_THREAD_FUNNELED).
// Exit code: the Session is given the code MPI_Abort uses (launch/train passes
// ExitStatus::hung of launch/train/exit_status.hpp; runtime/ does not include launch/).
// Determinism contract: none; never changes bits. Only how waits are done changes: the same
// messages are sent and received and every arithmetic operation happens in the same order.
// Until a Session starts (and with the timeout off) watched_wait is a plain MPI_Waitall.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>

#include "runtime/comm.hpp"

namespace lockstep::watchdog {

// ---- the heartbeat ---------------------------------------------------------------------
void set_step(std::int64_t step);
// `phase` must outlive the process's use of it: pass a string literal.
void set_phase(const char* phase);
std::int64_t step();
const char* phase();

// Sets the phase for a scope and restores the previous one at its end.
class Phase {
 public:
  explicit Phase(const char* phase);
  ~Phase();
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;

 private:
  const char* previous_;
};

// ---- the timeout -----------------------------------------------------------------------
struct TimeoutSetting {
  bool automatic = true;  // max(kAutoFloorSeconds, kAutoFactor x median step after warm-up)
  double seconds = 0;     // used when !automatic: the timeout; 0 turns the watchdog off
};
constexpr double kAutoFloorSeconds = 300;
constexpr double kAutoFactor = 10;
constexpr int kWarmupSteps = 2;  // not counted in the median (start-up, first touches)

// The automatic timeout for these step durations (seconds, in step order): the first
// kWarmupSteps are skipped; max(kAutoFloorSeconds, kAutoFactor x median of the rest), the
// floor alone when there is no rest. A median of an even count is the mean of the middle two.
double auto_timeout(std::span<const double> step_seconds);

// Feeds one step's duration to the automatic rule (no effect with a fixed timeout).
void record_step_seconds(double seconds);
// The timeout in force (seconds; 0: off, also before a Session starts).
double timeout_seconds();

// The watchdog of one job: duplicates `world` (MPI_COMM_WORLD's wrapper; collective) for the
// probes, posts the probe receive and arms watched_wait. Destruction (before MPI_Finalize)
// disarms it and frees the duplicate. One at a time. `tag` labels this rank's error line
// (runtime/comm.hpp abort_job); `hung_exit_code` is MPI_Abort's code on a timeout.
class Session {
 public:
  Session(const Communicator& world, std::string tag, TimeoutSetting timeout, int hung_exit_code);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
};

// Waits for all `count` requests (MPI_Waitall semantics, statuses ignored), watched: past
// the timeout this rank runs the "who is alive" round and aborts the job (never returns).
// `what` names the MPI call (e.g. "MPI_Allreduce"); it is checked through check_mpi.
void watched_wait(MPI_Request* requests, int count, const Communicator& comm, const char* what);

// Before a blocking call whose algorithm must not change (the vendor float reductions:
// coll/tuned's blocking algorithm is what their bits are pinned to, and the nonblocking
// MPI_I* forms use other algorithms): a watched MPI_Ibarrier over comm, so a rank that
// never arrives is caught. No-op while the watchdog is off.
void arrival_gate(const Communicator& comm, const char* what);

}  // namespace lockstep::watchdog
