// Child processes and training jobs for the experiment commands (resume-check,
// layout-check, tax, lab --model gpt): run a command with its output captured to a log
// file and streamed line by line (progress), launch `lockstep run` for a layout, and read
// the run directory it leaves (trace.jsonl, metrics.jsonl).
// Determinism contract: none here; the experiments compare what the jobs write, byte for
// byte, and this code never rewrites it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/text.hpp"

namespace lockstep::proc {

// The path of the running executable (/proc/self/exe).
std::string self_exe();
// A shell-safe rendering of one argument / of a whole command line.
std::string shell_quote(const std::string& s);
std::string join_command(const std::vector<std::string>& argv);

// Runs argv (PATH lookup) with stdout and stderr appended to log_path; on_line (if set)
// sees every output line as it arrives. Returns the exit status (128 + signal if killed).
// Throws lockstep::Error if the log cannot be written or the process cannot be started.
int run(const std::vector<std::string>& argv, const std::string& log_path,
        const std::function<void(const std::string&)>& on_line = {});

// A line callback that shows a job's progress: on a terminal the trainer's `step x/N ...
// ETA` line is redrawn in place. finish() ends the redrawn line. (A failed job's own error
// line reaches the user once, in run_job_or_throw's error.)
class ProgressEcho {
 public:
  explicit ProgressEcho(std::string indent = "      ");
  void operator()(const std::string& line);
  void finish();

 private:
  std::string indent_;
  bool tty_;
  bool open_ = false;
};

// A TPxDP or TPxDPxPP layout ("2x1": TP 2, DP 1; "2x1x2": TP 2, DP 1, PP 2).
struct Layout {
  int tp = 1, dp = 1, pp = 1;
  int ranks() const { return tp * dp * pp; }
  std::string name() const;  // "2x1", "2x1x2" (the PP part only when pp > 1)
};
Layout parse_layout(const std::string& s);  // throws naming the string and the format
// Comma lists (runtime/text.hpp), also reachable as proc::split_list / proc::join_list.
using lockstep::join_list;
using lockstep::split_list;
// A whole decimal integer; throws naming `what` and the text otherwise.
std::int64_t parse_int(const std::string& s, const std::string& what);

// One training job through `lockstep run` (this executable): config file (may be empty),
// overrides, run.out = out, the log at out + ".log". Extra launcher flags (e.g. --mca ...
// pairs as --mpi-arg) go in run_args. Returns the exit status.
struct Job {
  Layout layout;
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  std::vector<std::string> run_args;
};
int run_job(const Job& job, const std::function<void(const std::string&)>& on_line = {});
// The same, throwing an error that names the log's last error line unless it exits 0 (the
// failing rank's line: `lockstep run` keeps Open MPI's output in RUN_OUT/launcher.log).
void run_job_or_throw(const Job& job, const std::string& what);

// trace.jsonl of a run directory: step -> the line (the last line for a step wins, so a
// resumed run that re-wrote a step counts once).
std::map<std::int64_t, std::string> read_trace(const std::string& run_dir);
// The "digest" field of a trace line (hex string), or "" if it has none.
std::string trace_digest(const std::string& line);
// metrics.jsonl: the "ms" field per step.
std::map<std::int64_t, double> read_step_ms(const std::string& run_dir);
// tax_steps.jsonl of an interleaved run (debug.interleave): step -> {mode: ms}.
std::map<std::int64_t, std::map<std::string, double>> read_mode_step_ms(const std::string& path);
// The last line of a log file that mentions an error, with the indented lines that continue
// it (or the log's last line).
std::string last_error_line(const std::string& log_path);

}  // namespace lockstep::proc
