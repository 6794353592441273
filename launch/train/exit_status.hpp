// The exit status of `lockstep train` (and of the mpirun job around it): what happened, so
// that a supervisor (`lockstep run --max-restarts`, a cluster scheduler) knows whether to
// relaunch. A failing rank passes its status to MPI_Abort, which makes mpirun exit with it.
// Determinism contract: none (says why a job ended; never changes what it computed).
#pragma once

namespace lockstep {

enum class ExitStatus : int {
  finished = 0,   // every step asked for (run.steps, or run.stop_at) ran and was saved
  failed = 1,     // a rank failed (error, crash, lost): relaunch from the newest checkpoint
  usage = 2,      // bad command line or config: nothing ran; a relaunch fails the same way
  nonfinite = 3,  // the non-finite guard stopped the job; a relaunch would replay the NaN
  preempted = 4,  // SIGTERM/SIGINT: the step finished, a checkpoint was saved, on purpose
  hung = 5,       // the progress watchdog (run.step_timeout) ended the job
  locked = 6,     // another job holds the run directory's lock: nothing ran
};

constexpr int exit_code(ExitStatus s) {
  return static_cast<int>(s);
}

// Whether a supervisor should relaunch a job that ended with `code` (mpirun's exit status;
// 128 + N when the launcher itself was killed by signal N).
constexpr bool restartable(int code) {
  return code == exit_code(ExitStatus::failed) || code == exit_code(ExitStatus::hung) || code > 128;
}

// "finished", "failed", ... for restarts.jsonl and the supervisor's lines.
const char* exit_status_name(int code);

}  // namespace lockstep
