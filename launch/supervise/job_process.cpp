#include "launch/supervise/job_process.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "launch/experiments/subprocess.hpp"
#include "runtime/error.hpp"

namespace lockstep::supervise {
namespace {

volatile std::sig_atomic_t g_signal = 0;
volatile std::sig_atomic_t g_count = 0;

void on_signal(int sig) {
  g_signal = sig;
  g_count = g_count + 1;
  if (g_count >= 3) {  // the user insists: leave the job to its fate and go
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

std::string errno_text() {
  return std::strerror(errno);
}

// In the child: becomes its own process group, dies with this supervisor (PR_SET_PDEATHSIG
// survives the exec; its ranks die with it in turn, launch/train/orphan_guard.hpp), points fd
// 1 and 2 where asked, sets envs and execs argv; on failure writes one line to fd 2 and exits
// 127.
[[noreturn]] void exec_child(const std::vector<std::string>& argv,
                             const std::vector<std::pair<std::string, std::string>>& envs,
                             int out_fd, int err_fd) {
  setpgid(0, 0);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) _exit(127);
  if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0) _exit(127);
  for (const auto& [k, v] : envs) setenv(k.c_str(), v.c_str(), 1);
  setenv("LOCKSTEP_DIE_WITH_PARENT", "1", 1);  // `lockstep train` started without mpirun
  std::vector<char*> cargv;
  std::vector<std::string> copy = argv;
  for (auto& a : copy) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp(cargv[0], cargv.data());
  std::fprintf(stderr, "lockstep run: error: cannot start '%s': %s (hint: %s)\n", cargv[0],
               std::strerror(errno),
               argv[0] == "mpirun" ? "install openmpi-bin (launch/lockstep setup)"
                                   : "rebuild with launch/lockstep build");
  _exit(127);
}

int decode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

int reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    check(errno == EINTR, "waitpid(" + std::to_string(pid) + ") failed: " + errno_text());
  return decode(status);
}

std::string exe_of(pid_t pid) {
  char buf[4096];
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  const ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// Splits the bytes read so far into lines; returns false at the end of the stream.
bool pump(int fd, std::string& pending, const LineSink& sink) {
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    if (!pending.empty()) sink(pending);
    pending.clear();
    return false;
  }
  pending.append(buf, static_cast<std::size_t>(n));
  std::size_t nl;
  while ((nl = pending.find('\n')) != std::string::npos) {
    sink(pending.substr(0, nl));
    pending.erase(0, nl + 1);
  }
  return true;
}

}  // namespace

void install_forwarding_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR and the loop forwards at once
  check(sigaction(SIGTERM, &sa, nullptr) == 0 && sigaction(SIGINT, &sa, nullptr) == 0,
        "sigaction failed: " + errno_text());
}

int received_signal() {
  return g_signal;
}
int received_count() {
  return g_count;
}

JobProcess::JobProcess(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& envs) {
  check(!argv.empty(), "JobProcess: empty command");
  int out[2], err[2];
  check(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, "pipe() failed: " + errno_text(),
        "too many open files?");
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = fork();
  check(pid_ >= 0, "fork() failed for '" + argv[0] + "': " + errno_text(), "too many processes?");
  if (pid_ == 0) exec_child(argv, envs, out[1], err[1]);
  setpgid(pid_, pid_);  // also here: no race with a signal forwarded at once (EACCES after exec)
  close(out[1]);
  close(err[1]);
  out_ = out[0];
  err_ = err[0];
}

int JobProcess::wait(const LineSink& out, const LineSink& err,
                     const std::function<void(int)>& forwarded) {
  std::string pend_out, pend_err;
  bool open_out = true, open_err = true;
  int seen = received_count();
  while (open_out || open_err) {
    if (received_count() != seen) {
      seen = received_count();
      forward(received_signal());
      if (forwarded) forwarded(received_signal());
    }
    struct pollfd fds[2] = {{open_out ? out_ : -1, POLLIN, 0}, {open_err ? err_ : -1, POLLIN, 0}};
    const int n = poll(fds, 2, 200);
    if (n < 0) {
      check(errno == EINTR, "poll() on the job's output failed: " + errno_text());
      continue;
    }
    if (open_out && (fds[0].revents & (POLLIN | POLLHUP | POLLERR)))
      open_out = pump(out_, pend_out, out);
    if (open_err && (fds[1].revents & (POLLIN | POLLHUP | POLLERR)))
      open_err = pump(err_, pend_err, err);
  }
  close(out_);
  close(err_);
  return reap(pid_);
}

// The ranks on this host are the job's processes running this executable (`lockstep train`:
// the child itself at one rank, mpirun's children otherwise). mpirun itself and Open MPI's
// daemons are spared: a SIGTERM to them kills the ranks at once, without the save. One rank
// is enough (the ranks agree on a stop: launch/train/preemption.hpp); every local one gets it.
void JobProcess::forward(int sig) const {
  const std::string self = proc::self_exe();
  std::vector<pid_t> pids = descendants(pid_);
  pids.push_back(pid_);
  for (pid_t p : pids)
    if (exe_of(p) == self) kill(p, sig);
}

std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  DIR* d = opendir("/proc");
  if (d == nullptr) return {};
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const auto close_paren = line.rfind(')');  // the command name may hold spaces
    if (close_paren == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close_paren + 1, " %c %ld", &state, &ppid) == 2)
      children.emplace(static_cast<pid_t>(ppid), pid);
  }
  closedir(d);
  std::vector<pid_t> out, todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

int run_bounded(const std::vector<std::string>& argv, const std::string& log, double seconds) {
  check(!argv.empty(), "run_bounded: empty command");
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  check(fd >= 0, "cannot open '" + log + "': " + errno_text(), "is run.out writable?");
  const std::string header = "$ " + proc::join_command(argv) + "\n";
  if (write(fd, header.data(), header.size()) < 0) { /* the log is best effort */
  }
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid < 0) close(fd);
  check(pid >= 0, "fork() failed for '" + argv[0] + "': " + errno_text(), "too many processes?");
  if (pid == 0) exec_child(argv, {}, fd, fd);
  setpgid(pid, pid);
  close(fd);
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < until) {
    const pid_t got = waitpid(pid, &status, WNOHANG);
    if (got == pid) return decode(status);
    check(got == 0 || errno == EINTR,
          "waitpid(" + std::to_string(pid) + ") failed: " + errno_text());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::vector<pid_t> all = descendants(pid);
  all.push_back(pid);
  for (int sig : {SIGTERM, SIGKILL}) {
    kill(-pid, sig);
    for (pid_t p : all) kill(p, sig);
    if (sig == SIGTERM) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  reap(pid);
  return -1;
}

}  // namespace lockstep::supervise
