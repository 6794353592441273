// The line filter between a job and the user (`lockstep run`): every line of the job goes to
// RUN_OUT/launcher.log; its stdout (rank 0's progress lines) also reaches the user's stdout
// unchanged; of its stderr only Lockstep's own lines reach the user's stderr (warnings,
// `lockstep train: ...`, `debug.*` notes, and the indented lines that continue them), and of
// the error messages only the first, once, ending with where the rest went:
// ` [Open MPI's output: RUN_OUT/launcher.log]`. Open MPI's banners (MPI_ABORT
// was invoked, ORTE_ERROR_LOG, "mpirun noticed that process rank 1 ... exited on signal 9")
// stay in the log; the ones that say which rank died and where are parsed for the
// supervisor's own line and for restarts.jsonl.
// Determinism contract: none (text only).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

namespace lockstep::supervise {

// What Open MPI said about a rank that died without a Lockstep line.
struct LostRank {
  int rank = -1;
  long pid = 0;
  std::string host;
  int signal = 0;  // 0: not a signal (a lost daemon, a non-zero exit)
  std::string reason;
};
// "mpirun noticed that process rank 1 with PID 1234 on node h2 exited on signal 9 (Killed)."
// and "ORTE has lost communication with a remote daemon" (+ its "on node H" line): what the
// line says, or nothing.
std::optional<LostRank> parse_lost_rank(const std::string& line);

// The failing rank's own line: `lockstep: error on rank R (TAG): MESSAGE` or `lockstep:
// error: MESSAGE` (before MPI). rank -1 when the line names none.
struct RankError {
  int rank = -1;
  std::string line, message;
};
std::optional<RankError> parse_rank_error(const std::string& line);

class JobOutput {
 public:
  // Appends to log_path (created with its directory's parent existing); throws naming it.
  explicit JobOutput(std::string log_path);
  ~JobOutput();
  JobOutput(const JobOutput&) = delete;
  JobOutput& operator=(const JobOutput&) = delete;

  // A new attempt: resets what was seen, writes "$ COMMAND" into the log.
  void begin(const std::string& command);
  void out_line(const std::string& line);
  void err_line(const std::string& line);
  // Ends a message still being collected (its indented continuation lines): prints it.
  void finish();
  // A line of the supervisor's own: stderr and the log.
  void say(const std::string& line);

  const std::optional<RankError>& error() const { return error_; }
  const std::optional<LostRank>& lost() const { return lost_; }
  const std::string& path() const { return path_; }
  // " [Open MPI's output: PATH]"
  std::string where() const;

 private:
  void log(const char* stream, const std::string& line);
  std::string path_;
  std::FILE* log_ = nullptr;
  std::optional<RankError> error_;
  std::optional<LostRank> lost_;
  enum class State { none, error, shown, skipping };  // what indented lines continue
  State state_ = State::none;
  std::string pending_;  // the first error and its continuation lines, until they end
};

}  // namespace lockstep::supervise
