#include "launch/experiments/subprocess.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/error.hpp"

namespace lockstep::proc {

std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  check(n > 0, std::string("cannot resolve /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() &&
      s.find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") ==
          std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string line;
  for (const auto& a : argv) {
    if (!line.empty()) line += ' ';
    line += shell_quote(a);
  }
  return line;
}

int run(const std::vector<std::string>& argv, const std::string& log_path,
        const std::function<void(const std::string&)>& on_line) {
  check(!argv.empty(), "proc::run: empty command");
  std::FILE* log = std::fopen(log_path.c_str(), "a");
  check(log != nullptr, "cannot open log '" + log_path + "': " + std::strerror(errno),
        "check that the output directory is writable");
  std::fprintf(log, "$ %s\n", join_command(argv).c_str());
  std::fflush(log);
  int fds[2];
  check(pipe(fds) == 0, std::string("pipe() failed: ") + std::strerror(errno));
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::fclose(log);
    fail(std::string("fork() failed: ") + std::strerror(errno), "too many processes?");
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> cargv;
    std::vector<std::string> copy = argv;
    for (auto& a : copy) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "lockstep: error: cannot start '%s': %s\n", cargv[0],
                 std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    std::fwrite(buf, 1, static_cast<std::size_t>(n), log);
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      if (on_line) on_line(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty() && on_line) on_line(pending);
  close(fds[0]);
  std::fclose(log);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    check(errno == EINTR, std::string("waitpid failed: ") + std::strerror(errno));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 255;
}

ProgressEcho::ProgressEcho(std::string indent) : indent_(std::move(indent)), tty_(isatty(1) != 0) {}

void ProgressEcho::operator()(const std::string& line) {
  if (line.rfind("step ", 0) == 0) {
    if (!tty_) return;
    std::printf("\r%s%-100.100s", indent_.c_str(), line.c_str());
    std::fflush(stdout);
    open_ = true;
  }
}

void ProgressEcho::finish() {
  if (!open_) return;
  std::printf("\r%-110s\r", "");
  std::fflush(stdout);
  open_ = false;
}

std::string Layout::name() const {
  return std::to_string(tp) + "x" + std::to_string(dp) + (pp > 1 ? "x" + std::to_string(pp) : "");
}

Layout parse_layout(const std::string& s) {
  Layout l;
  char tail = 0;
  const int got = std::sscanf(s.c_str(), "%dx%dx%d%c", &l.tp, &l.dp, &l.pp, &tail);
  check((got == 2 || got == 3) && l.tp >= 1 && l.dp >= 1 && l.pp >= 1,
        "layout '" + s + "' is not TPxDP or TPxDPxPP with positive integers",
        "write layouts like 1x1, 1x2 (DP 2), 2x1 (TP 2), 2x2, 1x1x2 (PP 2), 2x1x2 (TP 2 x PP 2)");
  return l;
}

std::int64_t parse_int(const std::string& s, const std::string& what) {
  long long v = 0;
  char tail = 0;
  check(std::sscanf(s.c_str(), "%lld%c", &v, &tail) == 1, what + ": '" + s + "' is not an integer",
        "write whole numbers separated by commas");
  return v;
}

int run_job(const Job& job, const std::function<void(const std::string&)>& on_line) {
  std::vector<std::string> argv = {self_exe(), "run",
                                   "--np",     std::to_string(job.layout.ranks()),
                                   "--tp",     std::to_string(job.layout.tp),
                                   "--pp",     std::to_string(job.layout.pp)};
  argv.insert(argv.end(), job.run_args.begin(), job.run_args.end());
  if (!job.config.empty()) argv.push_back(job.config);
  for (const auto& s : job.sets) argv.insert(argv.end(), {"--set", s});
  argv.insert(argv.end(), {"--set", "run.out=" + job.out});
  return run(argv, job.out + ".log", on_line);
}

void run_job_or_throw(const Job& job, const std::string& what) {
  ProgressEcho echo;
  const int rc = run_job(job, [&echo](const std::string& l) { echo(l); });
  echo.finish();
  std::string why = last_error_line(job.out + ".log");
  if (why.rfind("lockstep: ", 0) == 0) why.erase(0, 10);  // the job's own line, once
  check(rc == 0, what + " (" + job.layout.name() + ") exited " + std::to_string(rc) + ": " + why,
        "full log: " + job.out + ".log");
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cannot read '" + path + "'", "did the run finish? see its .log next to it");
  std::vector<std::string> lines;
  std::string l;
  while (std::getline(in, l))
    if (!l.empty()) lines.push_back(l);
  return lines;
}

std::map<std::int64_t, std::string> read_trace(const std::string& run_dir) {
  std::map<std::int64_t, std::string> out;
  const std::string path = run_dir + "/trace.jsonl";
  for (const auto& l : read_lines(path)) {
    const auto j = nlohmann::json::parse(l, nullptr, false);
    check(!j.is_discarded() && j.contains("step"),
          "'" + path + "' has a line that is not a trace line",
          "was it written by lockstep train?");
    out[j["step"].get<std::int64_t>()] = l;
  }
  return out;
}

std::string trace_digest(const std::string& line) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.contains("digest")) return "";
  return j["digest"].is_string() ? j["digest"].get<std::string>() : j["digest"].dump();
}

// Each line of a JSONL file as (step, the JSON value of its field `key`).
std::map<std::int64_t, nlohmann::json> read_step_field(const std::string& path,
                                                       const std::string& key) {
  std::map<std::int64_t, nlohmann::json> out;
  for (const auto& l : read_lines(path)) {
    const auto j = nlohmann::json::parse(l, nullptr, false);
    check(!j.is_discarded() && j.contains("step") && j.contains(key),
          "'" + path + "' has a line without step/" + key, "was it written by lockstep train?");
    out[j["step"].get<std::int64_t>()] = j[key];
  }
  return out;
}

std::map<std::int64_t, double> read_step_ms(const std::string& run_dir) {
  std::map<std::int64_t, double> out;
  for (const auto& [step, ms] : read_step_field(run_dir + "/metrics.jsonl", "ms"))
    out[step] = ms.get<double>();
  return out;
}

std::map<std::int64_t, std::map<std::string, double>> read_mode_step_ms(const std::string& path) {
  std::map<std::int64_t, std::map<std::string, double>> out;
  for (const auto& [step, ms] : read_step_field(path, "ms"))
    out[step] = ms.get<std::map<std::string, double>>();
  return out;
}

std::string last_error_line(const std::string& log_path) {
  std::ifstream in(log_path);
  std::string l, last, err;
  bool in_error = false;
  while (std::getline(in, l)) {
    if (l.empty()) continue;
    last = l;
    if (in_error && (l[0] == ' ' || l[0] == '\t')) {
      err += "\n" + l;  // the indented lines that continue an error message
      continue;
    }
    in_error = l.find("error") != std::string::npos;
    if (in_error) err = l;
  }
  return err.empty() ? last : err;
}

}  // namespace lockstep::proc
