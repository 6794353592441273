#include "launch/supervise/job_output.hpp"

#include <cerrno>
#include <cstring>
#include <regex>

#include "runtime/error.hpp"

namespace lockstep::supervise {

std::optional<LostRank> parse_lost_rank(const std::string& line) {
  static const std::regex signalled(
      R"(process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)(?: \(([^)]*)\))?)");
  static const std::regex exited(R"(process rank (\d+) with PID (\d+) on node (\S+) exited)");
  static const std::regex daemon(R"(Remote daemon: .* on node (\S+))");
  std::smatch m;
  LostRank l;
  if (std::regex_search(line, m, signalled)) {
    l.rank = std::stoi(m[1]);
    l.pid = std::stol(m[2]);
    l.host = m[3];
    l.signal = std::stoi(m[4]);
    l.reason = "killed by signal " + m[4].str() + (m[5].matched ? " (" + m[5].str() + ")" : "");
    return l;
  }
  if (std::regex_search(line, m, exited)) {
    l.rank = std::stoi(m[1]);
    l.pid = std::stol(m[2]);
    l.host = m[3];
    l.reason = "exited without a Lockstep error line";
    return l;
  }
  if (std::regex_search(line, m, daemon)) {
    l.host = m[1];
    l.reason = "lost contact with host " + l.host;
    return l;
  }
  return std::nullopt;
}

std::optional<RankError> parse_rank_error(const std::string& line) {
  static const std::regex on_rank(R"(^lockstep: error on rank (\d+) \([^)]*\): (.*)$)");
  static const std::regex plain(R"(^lockstep( [a-z-]+)?: error: (.*)$)");
  std::smatch m;
  if (std::regex_match(line, m, on_rank)) return RankError{std::stoi(m[1]), line, m[2]};
  if (std::regex_match(line, m, plain)) return RankError{-1, line, m[2]};
  return std::nullopt;
}

JobOutput::JobOutput(std::string log_path) : path_(std::move(log_path)) {
  log_ = std::fopen(path_.c_str(), "a");
  check(log_ != nullptr, "cannot open '" + path_ + "': " + std::strerror(errno),
        "check that run.out is writable");
}

JobOutput::~JobOutput() {
  if (log_) std::fclose(log_);
}

void JobOutput::begin(const std::string& command) {
  error_.reset();
  lost_.reset();
  std::fprintf(log_, "$ %s\n", command.c_str());
  std::fflush(log_);
}

void JobOutput::log(const char* stream, const std::string& line) {
  std::fprintf(log_, "%s%s\n", stream, line.c_str());
  std::fflush(log_);
}

void JobOutput::out_line(const std::string& line) {
  log("", line);
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

void JobOutput::err_line(const std::string& line) {
  log("", line);
  const bool continuation = !line.empty() && (line[0] == ' ' || line[0] == '\t');
  if (continuation && state_ != State::none) {  // the rest of a multi-line message
    if (state_ == State::error) pending_ += "\n" + line;
    if (state_ == State::shown) std::fprintf(stderr, "%s\n", line.c_str());
    return;
  }
  finish();
  if (auto e = parse_rank_error(line)) {
    state_ = error_ ? State::skipping : State::error;  // the first failing rank's line, once
    if (!error_) pending_ = line;
    if (!error_) error_ = e;
  } else if (line.rfind("lockstep", 0) == 0 || line.rfind("debug.", 0) == 0) {
    state_ = State::shown;  // warnings and notes of Lockstep's own, fault injection's
    std::fprintf(stderr, "%s\n", line.c_str());
  } else if (auto l = parse_lost_rank(line)) {
    if (!lost_ || (lost_->signal == 0 && l->signal != 0)) lost_ = l;
  }
  std::fflush(stderr);
}

void JobOutput::finish() {
  state_ = State::none;
  if (pending_.empty()) return;
  std::fprintf(stderr, "%s%s\n", pending_.c_str(), where().c_str());
  std::fflush(stderr);
  pending_.clear();
}

void JobOutput::say(const std::string& line) {
  finish();
  log("", line);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

std::string JobOutput::where() const {
  return " [Open MPI's output: " + path_ + "]";
}

}  // namespace lockstep::supervise
