// A job as a child process of `lockstep run`: started in its own process group (a Ctrl-C at
// the terminal reaches the supervisor, which decides what the job gets), its stdout and
// stderr read line by line through two pipes, SIGTERM/SIGINT forwarded to its ranks (the
// trainer's preemption: finish the step, save, exit), and its exit status. Also a bounded
// run of a short command (the host probe of elastic.hpp).
// Determinism contract: none (starts and watches processes; never touches what they compute).
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace lockstep::supervise {

using LineSink = std::function<void(const std::string&)>;

// SIGTERM/SIGINT handlers that only record the signal (poll() in JobProcess::wait sees it
// and forwards it). Installed for the supervisor's whole life; a third signal of the same
// kind exits the supervisor (the user really wants it gone).
void install_forwarding_handlers();
// The last SIGTERM/SIGINT the supervisor received (0: none) and how many.
int received_signal();
int received_count();

class JobProcess {
 public:
  // fork + exec argv (PATH lookup) with envs added; throws lockstep::Error naming the
  // command when a pipe, the fork or the exec fails (the exec failure comes back as 127).
  JobProcess(const std::vector<std::string>& argv,
             const std::vector<std::pair<std::string, std::string>>& envs);
  JobProcess(const JobProcess&) = delete;
  JobProcess& operator=(const JobProcess&) = delete;
  // Reads both pipes to their end, a line at a time, then reaps the child: its exit status,
  // 128 + N when signal N killed it. Forwards each SIGTERM/SIGINT the supervisor receives
  // meanwhile to the job's ranks; `forwarded` (if set) is told the first time.
  int wait(const LineSink& out, const LineSink& err, const std::function<void(int)>& forwarded);
  pid_t pid() const { return pid_; }

 private:
  void forward(int sig) const;
  pid_t pid_ = -1;
  bool mpirun_ = false;
  int out_ = -1, err_ = -1;
};

// The processes below pid (children, their children, ...), from /proc.
std::vector<pid_t> descendants(pid_t pid);

// Runs argv with stdout and stderr appended to `log` (a path) for at most `seconds`; on the
// deadline its process group gets SIGTERM, then SIGKILL. Returns the exit status, or -1
// when it ran out of time.
int run_bounded(const std::vector<std::string>& argv, const std::string& log, double seconds);

}  // namespace lockstep::supervise
