#include "runtime/watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/median.hpp"

namespace lockstep::watchdog {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTagProbe = 0x4c57;  // on the watchdog's own communicator only
constexpr int kTagReply = 0x4c58;
constexpr unsigned kPollsPerCheck = 256;   // MPI_Testall calls between clock reads
constexpr std::size_t kMaxSamples = 1024;  // the median is over the newest this many steps

// What a rank answers to a probe: its heartbeat and the wait it is in.
struct Reply {
  std::int64_t step = 0;
  char phase[48] = {};
  char where[112] = {};  // "MPI_Allreduce over dp"
};

struct Pending {  // a reply on its way to one prober (its buffer must live until sent)
  Reply reply;
  MPI_Request request = MPI_REQUEST_NULL;
};

struct State {
  // the heartbeat
  std::int64_t step = 0;
  const char* phase = "start-up";
  // the timeout
  bool armed = false;
  TimeoutSetting setting;
  double timeout = 0;
  std::int64_t recorded = 0;
  std::vector<double> samples;  // durations after warm-up, a ring of kMaxSamples
  // the probes
  int rank = 0, size = 1;  // in MPI_COMM_WORLD
  std::string tag;
  int exit_code = 1;
  MPI_Comm comm = MPI_COMM_NULL;
  int probe_in = 0;
  MPI_Request probe_request = MPI_REQUEST_NULL;
  std::vector<Pending> pending;     // by prober's world rank
  Clock::time_point quiet_until{};  // answered a probe: the prober aborts the job soon
};

State& state() {
  static State s;
  return s;
}

double auto_of_samples(const std::vector<double>& post_warmup) {
  if (post_warmup.empty()) return kAutoFloorSeconds;
  return std::max(kAutoFloorSeconds, kAutoFactor * median(post_warmup));
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void copy_text(char* dst, std::size_t cap, const std::string& src) {
  const std::size_t n = std::min(cap - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

std::string where_text(const char* what, const Communicator& comm) {
  return std::string(what) + " over " + comm.name();
}

// Answers a probe if one came: this rank's heartbeat and `where` it waits, to the prober.
void serve_probes(State& s, const std::string& where) {
  int flag = 0;
  MPI_Status st;
  check_mpi(MPI_Test(&s.probe_request, &flag, &st), "MPI_Test(watchdog probe)", s.comm);
  if (!flag) return;
  Pending& p = s.pending[static_cast<std::size_t>(st.MPI_SOURCE)];
  int sent = 1;
  if (p.request != MPI_REQUEST_NULL)
    check_mpi(MPI_Test(&p.request, &sent, MPI_STATUS_IGNORE), "MPI_Test(watchdog reply)", s.comm);
  if (sent) {
    p.reply.step = s.step;
    copy_text(p.reply.phase, sizeof p.reply.phase, s.phase);
    copy_text(p.reply.where, sizeof p.reply.where, where);
    check_mpi(
        MPI_Isend(&p.reply, sizeof(Reply), MPI_BYTE, st.MPI_SOURCE, kTagReply, s.comm, &p.request),
        "MPI_Isend(watchdog reply)", s.comm);
  }
  // The prober aborts the job within its grace: do not start a round of our own meanwhile.
  s.quiet_until = Clock::now() + std::chrono::seconds(30);
  check_mpi(MPI_Irecv(&s.probe_in, 1, MPI_INT, MPI_ANY_SOURCE, kTagProbe, s.comm, &s.probe_request),
            "MPI_Irecv(watchdog probe)", s.comm);
}

double grace_seconds(double timeout) {
  return std::max(1.0, std::min(5.0, 0.1 * timeout));
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string heartbeat_text(std::int64_t step, const std::string& phase, const std::string& where) {
  return "step " + std::to_string(step) + ", phase '" + phase + "', in " + where;
}

// Probes every other world rank and collects the answers for the grace period. Returns
// each rank's heartbeat text ("" for a rank that did not answer).
std::vector<std::string> probe_all(State& s, const std::string& where) {
  const int me = s.rank, n = s.size;
  std::vector<Reply> replies(static_cast<std::size_t>(n));
  std::vector<MPI_Request> recv(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
  std::vector<MPI_Request> send(static_cast<std::size_t>(n), MPI_REQUEST_NULL);
  static int probe_out = 1;
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    check_mpi(MPI_Irecv(&replies[r], sizeof(Reply), MPI_BYTE, r, kTagReply, s.comm, &recv[r]),
              "MPI_Irecv(watchdog reply)", s.comm);
    check_mpi(MPI_Isend(&probe_out, 1, MPI_INT, r, kTagProbe, s.comm, &send[r]),
              "MPI_Isend(watchdog probe)", s.comm);
  }
  std::vector<std::string> out(static_cast<std::size_t>(n));
  out[static_cast<std::size_t>(me)] = heartbeat_text(s.step, s.phase, where);
  const auto t0 = Clock::now();
  int open = n - 1;
  while (open > 0 && seconds_since(t0) < grace_seconds(s.timeout)) {
    for (int r = 0; r < n; ++r) {
      int got = 0;
      if (recv[r] == MPI_REQUEST_NULL) continue;
      check_mpi(MPI_Test(&recv[r], &got, MPI_STATUS_IGNORE), "MPI_Test(watchdog reply)", s.comm);
      if (!got) continue;
      const Reply& rep = replies[static_cast<std::size_t>(r)];
      out[static_cast<std::size_t>(r)] =
          heartbeat_text(rep.step, std::string(rep.phase, strnlen(rep.phase, sizeof rep.phase)),
                         std::string(rep.where, strnlen(rep.where, sizeof rep.where)));
      --open;
    }
    serve_probes(s, where);  // another rank may be probing too
  }
  return out;
}

// The one line: what this rank waited for, who did not answer, what the others are doing.
std::string no_progress_message(const State& s, double waited, const std::string& where,
                                const std::vector<std::string>& beats) {
  std::vector<int> silent;
  std::vector<std::pair<std::string, std::vector<int>>> waiting;  // heartbeat -> its ranks
  for (std::size_t r = 0; r < beats.size(); ++r) {
    if (beats[r].empty()) {
      silent.push_back(static_cast<int>(r));
      continue;
    }
    auto it = std::find_if(waiting.begin(), waiting.end(),
                           [&](const auto& w) { return w.first == beats[r]; });
    if (it == waiting.end()) it = waiting.insert(waiting.end(), {beats[r], {}});
    it->second.push_back(static_cast<int>(r));
  }
  char secs[32];
  std::snprintf(secs, sizeof secs, "%.3g", waited);
  std::string msg = "no progress for " + std::string(secs) + " s at step " +
                    std::to_string(s.step) + " (phase '" + s.phase + "', waiting in " + where +
                    "): ";
  msg += silent.empty() ? "every rank answered"
                        : rank_list(silent) + " did not answer (stopped, hung, or still computing)";
  for (const auto& [beat, ranks] : waiting)
    msg +=
        "; " + rank_list(ranks) + (ranks.size() == 1 ? " is" : " are") + " waiting (" + beat + ")";
  const std::string who = silent.empty() ? "every rank's" : rank_list(silent) + "'s";
  msg += " (hint: check " + who +
         " host and process; raise run.step_timeout if a step can legitimately take longer "
         "than " +
         std::string(secs) + " s)";
  return msg;
}

[[noreturn]] void no_progress(State& s, double waited, const std::string& where) {
  const auto beats = probe_all(s, where);
  abort_job(s.rank, s.tag, no_progress_message(s, waited, where, beats), s.exit_code);
}

}  // namespace

// ---- the heartbeat ---------------------------------------------------------------------
void set_step(std::int64_t step) {
  state().step = step;
}
void set_phase(const char* phase) {
  state().phase = phase;
}
std::int64_t step() {
  return state().step;
}
const char* phase() {
  return state().phase;
}
Phase::Phase(const char* phase) : previous_(state().phase) {
  state().phase = phase;
}
Phase::~Phase() {
  state().phase = previous_;
}

// ---- the timeout -----------------------------------------------------------------------
double auto_timeout(std::span<const double> step_seconds) {
  const std::size_t skip = std::min<std::size_t>(kWarmupSteps, step_seconds.size());
  return auto_of_samples(std::vector<double>(step_seconds.begin() + skip, step_seconds.end()));
}

void record_step_seconds(double seconds) {
  State& s = state();
  if (!s.armed || !s.setting.automatic) return;
  if (s.recorded++ < kWarmupSteps) return;
  if (s.samples.size() < kMaxSamples)
    s.samples.push_back(seconds);
  else
    s.samples[static_cast<std::size_t>(s.recorded - kWarmupSteps - 1) % kMaxSamples] = seconds;
  s.timeout = auto_of_samples(s.samples);
}

double timeout_seconds() {
  return state().armed ? state().timeout : 0.0;
}

Session::Session(const Communicator& world, std::string tag, TimeoutSetting timeout,
                 int hung_exit_code) {
  State& s = state();
  check(!s.armed, "a second watchdog::Session was started", "start one per job");
  check(timeout.automatic || (std::isfinite(timeout.seconds) && timeout.seconds >= 0),
        "watchdog timeout " + std::to_string(timeout.seconds) + " s is not a number >= 0",
        "0 turns the watchdog off");
  s.setting = timeout;
  s.timeout = timeout.automatic ? kAutoFloorSeconds : timeout.seconds;
  s.recorded = 0;
  s.samples.clear();
  if (s.timeout <= 0) return;  // off: watched_wait stays a plain MPI_Waitall
  s.rank = world.rank();
  s.size = world.size();
  s.tag = std::move(tag);
  s.exit_code = hung_exit_code;
  check_mpi(MPI_Comm_dup(world.handle(), &s.comm), "MPI_Comm_dup(watchdog)", world.handle());
  check_mpi(MPI_Comm_set_errhandler(s.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", s.comm);
  check_mpi(MPI_Comm_set_name(s.comm, "watchdog"), "MPI_Comm_set_name", s.comm);
  s.pending.assign(static_cast<std::size_t>(s.size), Pending{});
  check_mpi(MPI_Irecv(&s.probe_in, 1, MPI_INT, MPI_ANY_SOURCE, kTagProbe, s.comm, &s.probe_request),
            "MPI_Irecv(watchdog probe)", s.comm);
  s.quiet_until = Clock::time_point{};
  s.armed = true;
}

Session::~Session() {
  State& s = state();
  const bool had_comm = s.comm != MPI_COMM_NULL;
  s.armed = false;
  s.timeout = 0;
  if (!had_comm) return;
  // A destructor cannot throw: return codes are moot here (the job is ending).
  if (s.probe_request != MPI_REQUEST_NULL) {
    MPI_Cancel(&s.probe_request);
    MPI_Wait(&s.probe_request, MPI_STATUS_IGNORE);
  }
  for (Pending& p : s.pending)  // a reply not yet taken: its prober is aborting the job
    if (p.request != MPI_REQUEST_NULL) MPI_Request_free(&p.request);
  MPI_Comm_free(&s.comm);
  s.comm = MPI_COMM_NULL;
}

// ---- the waits -------------------------------------------------------------------------
void watched_wait(MPI_Request* requests, int count, const Communicator& comm, const char* what) {
  State& s = state();
  if (!s.armed) {
    check_mpi(MPI_Waitall(count, requests, MPI_STATUSES_IGNORE), what, comm.handle());
    return;
  }
  const auto t0 = Clock::now();
  for (unsigned polls = 1;; ++polls) {
    int done = 0;
    check_mpi(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), what, comm.handle());
    if (done) return;
    if (polls % kPollsPerCheck != 0) continue;
    const std::string where = where_text(what, comm);
    serve_probes(s, where);
    const auto now = Clock::now();
    if (now - t0 > std::chrono::duration<double>(s.timeout) && now > s.quiet_until)
      no_progress(s, seconds_since(t0), where);
  }
}

void arrival_gate(const Communicator& comm, const char* what) {
  if (!state().armed || comm.size() == 1) return;
  MPI_Request r = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm.handle(), &r), "MPI_Ibarrier", comm.handle());
  watched_wait(&r, 1, comm, what);
}

}  // namespace lockstep::watchdog
