#include "launch/supervise/supervisor.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "launch/experiments/subprocess.hpp"
#include "launch/supervise/elastic.hpp"
#include "launch/supervise/job_output.hpp"
#include "launch/supervise/job_process.hpp"
#include "launch/supervise/restart_log.hpp"
#include "launch/train/exit_status.hpp"
#include "launch/train/host_time.hpp"
#include "launch/train/run_lock.hpp"
#include "runtime/error.hpp"

namespace lockstep::supervise {
namespace {

constexpr double kLockWaitSeconds = 30;

void print_plan(const Launch& l) {
  for (const auto& line : l.lines) std::printf("lockstep run: %s\n", line.c_str());
  std::fflush(stdout);
}

struct Attempt {
  int code = 0;
  int forwarded = 0;  // the signal passed on to the ranks (0: none)
  std::optional<RankError> error;
  std::optional<LostRank> lost;
};

Attempt run_attempt(const Launch& l, JobOutput& out) {
  out.begin(proc::join_command(l.argv));
  Attempt a;
  JobProcess job(l.argv, l.envs);
  a.code = job.wait([&out](const std::string& s) { out.out_line(s); },
                    [&out](const std::string& s) { out.err_line(s); },
                    [&](int sig) {
                      if (a.forwarded == 0)
                        out.say("lockstep run: signal " + std::to_string(sig) +
                                " passed on to the ranks: they finish the step, save a "
                                "checkpoint and stop (no restart)");
                      a.forwarded = sig;
                    });
  out.finish();
  a.error = out.error();
  a.lost = out.lost();
  if (!a.lost && !l.mpirun() && a.code > 128)  // `lockstep train` itself was killed
    a.lost = LostRank{0, job.pid(), host_name(), a.code - 128,
                      "killed by signal " + std::to_string(a.code - 128)};
  return a;
}

FailureRecord failure_of(const Attempt& a, int attempt, const std::string& run_out) {
  FailureRecord f;
  f.attempt = attempt;
  f.step = last_trace_step(run_out);
  f.exit = a.code;
  if (a.lost) {
    f.rank = a.lost->rank;
    f.host = a.lost->host;
    f.reason = a.lost->reason;
  }
  if (a.error) {
    f.rank = a.error->rank;
    f.reason = a.error->message;
  }
  if (f.reason.empty()) f.reason = exit_status_name(a.code);
  return f;
}

// "rank 1 (pid 123 on h2) was killed by signal 9 (Killed)" or "the job failed (exit 1)".
std::string what_happened(const Attempt& a) {
  if (a.lost && a.lost->rank >= 0)
    return "rank " + std::to_string(a.lost->rank) + " (" +
           (a.lost->pid > 0 ? "pid " + std::to_string(a.lost->pid) + " " : "") + "on " +
           a.lost->host + ") " + (a.lost->signal > 0 ? "was " + a.lost->reason : a.lost->reason);
  if (a.lost) return "the job " + a.lost->reason;
  std::string s = "the job ended: " + std::string(exit_status_name(a.code)) + " (exit " +
                  std::to_string(a.code) + ")";
  if (a.error && a.error->rank >= 0)
    s += ", rank " + std::to_string(a.error->rank) + "'s error above";
  return s;
}

// The last line of a job that will not be relaunched (none when its own line said it all).
void final_line(const Attempt& a, JobOutput& out, int restarts, int max_restarts) {
  const bool exhausted = max_restarts > 0 && restarts >= max_restarts && restartable(a.code);
  if (a.error && !exhausted) return;
  std::string line = "lockstep run: " + what_happened(a);
  if (a.lost) line += "; the job stopped (exit " + std::to_string(a.code) + ")";
  if (exhausted)
    line += "; no restart left (" + std::to_string(restarts) + " of " +
            std::to_string(max_restarts) + " used)";
  out.say(line + out.where());
}

struct Relaunch {
  Placement placement;
  LayoutChoice layout;
  std::vector<std::string> sets;
  std::string why;
};

// The placement, layout and extra --set of the next attempt; nothing when too few ranks
// are left (the line saying so is printed).
std::optional<Relaunch> plan_relaunch(const RunRequest& r, const Placement& first,
                                      const Placement& current, const config::Config& cfg,
                                      const Attempt& a, JobOutput& out) {
  const ElasticRange range = parse_elastic(r.elastic);
  const std::string run_out = cfg.run.out;
  Relaunch next{current, {current.np, static_cast<int>(cfg.parallel.tp)}, {}, ""};
  const std::string ckpt = latest_checkpoint(run_out);
  if (!ckpt.empty() || cfg.run.resume == "none" || cfg.run.resume == "auto")
    next.sets.push_back("run.resume=auto");
  if (!range.on()) {
    next.why = why_bits_hold(next.layout, next.layout, ckpt);
    return next;
  }
  const Availability av = probe_pool(first, range, r, a.lost, out.path());
  const config::Config base = resolve_config(r, {});
  const int max_n = std::min(range.max, av.slots);
  const auto choice = choose_layout(base, next.layout, range.min, max_n);
  std::string down =
      av.down.empty() ? "" : "hosts " + proc::join_list(av.down, ", ") + " did not answer; ";
  if (!choice) {
    out.say("lockstep run: cannot relaunch: " + down + std::to_string(av.slots) +
            " slot(s) left, and no layout of " + std::to_string(range.min) + ".." +
            std::to_string(std::max(range.min, max_n)) +
            " ranks keeps G4 with the checkpoint (--elastic " + r.elastic + ")");
    return std::nullopt;
  }
  next.placement.np = choice->np;
  if (!first.hosts.empty()) {
    next.placement.hosts = av.hosts;
    next.placement.hostfile.clear();
    next.placement.slots = av.slots;
  }
  next.sets.push_back("parallel.tp=" + std::to_string(choice->tp));
  next.why = down + why_bits_hold(next.layout, *choice, ckpt);
  next.layout = *choice;
  return next;
}

bool wait_for_predecessor(const std::string& run_out, JobOutput& out) {
  if (wait_for_run_lock(run_out, kLockWaitSeconds)) return true;
  const auto holder = run_lock_holder(run_out);
  out.say("lockstep run: cannot relaunch: run directory '" + run_out + "' is still held " +
          std::to_string(static_cast<int>(kLockWaitSeconds)) + " s after the job ended, by " +
          (holder ? holder->describe() : std::string("an unknown process")) +
          " (hint: stop that process, then run again with --set run.resume=auto)");
  return false;
}

void record_relaunch(const Relaunch& next, int attempt, const std::string& run_out) {
  RelaunchRecord rr;
  rr.attempt = attempt;
  rr.np = next.layout.np;
  rr.tp = next.layout.tp;
  rr.resume_from = latest_checkpoint(run_out);
  for (const auto& h : next.placement.hosts) rr.hosts.push_back(h.name);
  rr.why = next.why;
  append_relaunch(run_out, rr);
}

std::string relaunch_line(const Attempt& a, const Relaunch& next, int restart, int max,
                          const std::string& run_out) {
  const std::string ckpt = latest_checkpoint(run_out);
  const auto l = next.layout;
  return "lockstep run: " + what_happened(a) + "; relaunching " +
         (ckpt.empty() ? std::string("from step 0 (no checkpoint yet)")
                       : "from checkpoint step " + std::to_string(checkpoint_step(ckpt))) +
         " (restart " + std::to_string(restart) + " of " + std::to_string(max) + ") on " +
         std::to_string(l.np) + " rank(s) (TP " + std::to_string(l.tp) + " x DP " +
         std::to_string(l.np / l.tp) + "): " + next.why;
}

void make_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  check(!ec, "cannot create run directory '" + dir + "': " + ec.message(),
        "set run.out to a writable place");
}

}  // namespace

int supervise(const RunRequest& request) {
  RunRequest r = request;
  const ElasticRange range = parse_elastic(r.elastic);
  check(!range.on() || r.max_restarts > 0, "--elastic needs --max-restarts N (N >= 1)",
        "e.g. --max-restarts 3 --elastic 1:2");
  const Placement first = initial_placement(r);
  check(!range.on() || (first.np >= range.min && first.np <= range.max),
        "--np " + std::to_string(first.np) + " is outside --elastic " + r.elastic,
        "start within the range");
  Launch launch = plan_launch(r, first);
  print_plan(launch);
  if (r.dry_run) return 0;
  r.threads = static_cast<int>(launch.cfg.run.threads);  // every relaunch keeps the threads
  const std::string run_out = launch.cfg.run.out;
  make_dir(run_out);
  JobOutput out(run_out + "/launcher.log");
  install_forwarding_handlers();
  Placement current = first;
  for (int restarts = 0;; ++restarts) {
    const Attempt a = run_attempt(launch, out);
    if (a.code == 0 || a.forwarded != 0) return a.code;
    if (r.max_restarts > 0) append_failure(run_out, failure_of(a, restarts + 1, run_out));
    if (!restartable(a.code) || restarts >= r.max_restarts) {
      final_line(a, out, restarts, r.max_restarts);
      return a.code;
    }
    if (!wait_for_predecessor(run_out, out)) return a.code;
    const auto next = plan_relaunch(r, first, current, launch.cfg, a, out);
    if (!next) return a.code;
    record_relaunch(*next, restarts + 2, run_out);
    out.say(relaunch_line(a, *next, restarts + 1, r.max_restarts, run_out));
    current = next->placement;
    launch = plan_launch(r, current, next->sets);
    print_plan(launch);
  }
}

}  // namespace lockstep::supervise
