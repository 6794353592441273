// One job per run directory: rank 0 of `lockstep train` holds an open-file-description
// fcntl lock (F_OFD_SETLK) on RUN_OUT/.lock for the job's whole life. The kernel drops it when
// the holder dies (kill -9 included), so a dead job never leaves a stale lock; the file's
// text names the holder (host, pid, start time, command) for the refusal line of the next
// job. A supervisor probes the lock (F_OFD_GETLK) without taking it.
// Determinism contract: none (decides which job may write a run directory).
#pragma once

#include <optional>
#include <string>

namespace lockstep {

struct LockHolder {
  std::string host, started, command;
  long pid = 0;
  // "pid 1234 on node1, started 2026-12-02T01:02:03Z: lockstep train ..."
  std::string describe() const;
};

class RunLock {
 public:
  // Takes RUN_OUT/.lock (creating run_out if needed) and writes this process's holder
  // line into it. Throws lockstep::Error (one line naming the holder and the hint) when
  // another process holds it.
  explicit RunLock(const std::string& run_out, const std::string& command);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  int fd_ = -1;
};

// The holder of RUN_OUT/.lock, or nothing when no live process holds it. Never takes it.
std::optional<LockHolder> run_lock_holder(const std::string& run_out);

// Waits up to `seconds` for RUN_OUT/.lock to be free; true when it is.
bool wait_for_run_lock(const std::string& run_out, double seconds);

}  // namespace lockstep
