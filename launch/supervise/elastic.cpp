#include "launch/supervise/elastic.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "launch/supervise/job_process.hpp"
#include "launch/supervise/restart_log.hpp"
#include "launch/train/host_time.hpp"
#include "launch/train/validate.hpp"
#include "lockstep/mpirun_flags.hpp"
#include "runtime/error.hpp"

namespace lockstep::supervise {
namespace {

bool keeps_g3(const config::Config& cfg, const LayoutChoice& l) {
  config::Config c = cfg;
  c.parallel.tp = l.tp;
  if (!config::config_problems(c, l.np).empty()) return false;
  for (const auto& g : config::guarantees(c, l.np).levels)
    if (g.level == "G3") return g.holds;
  return false;
}

bool valid(const config::Config& cfg, const LayoutChoice& l) {
  config::Config c = cfg;
  c.parallel.tp = l.tp;
  return config::config_problems(c, l.np).empty();
}

// TP candidates for n ranks: the config's when it divides n, else powers of two dividing n,
// largest first.
std::vector<int> tp_candidates(int config_tp, int n) {
  if (config_tp > 0 && n % config_tp == 0) return {config_tp};
  std::vector<int> out;
  for (int t = 1; t <= n; t *= 2)
    if (n % t == 0) out.insert(out.begin(), t);
  return out;
}

bool host_answers(const Host& h, const RunRequest& r, const std::string& log) {
  if (h.name == host_name() || h.name == "localhost" || h.name == "127.0.0.1") return true;
  std::vector<std::string> argv = {"mpirun", "-np", "1", "--host", h.name + ":1"};
  if (geteuid() == 0)
    argv.insert(argv.end(), std::begin(mpirun_flags::kRoot), std::end(mpirun_flags::kRoot));
  for (const auto& w : mpi_arg_words(r.mpi_args)) argv.push_back(w);
  argv.push_back("true");
  return run_bounded(argv, log, 10.0) == 0;
}

}  // namespace

ElasticRange parse_elastic(const std::string& text) {
  ElasticRange e;
  if (text.empty()) return e;
  char tail = 0;
  const int got = std::sscanf(text.c_str(), "%d:%d%c", &e.min, &e.max, &tail);
  check(got == 2 && e.min >= 1 && e.max >= e.min,
        "--elastic '" + text + "' is not MIN:MAX ranks with 1 <= MIN <= MAX",
        "e.g. --elastic 1:2 (relaunch on 1 or 2 ranks)");
  return e;
}

Availability probe_pool(const Placement& first, const ElasticRange& range, const RunRequest& r,
                        const std::optional<LostRank>& lost, const std::string& log) {
  Availability a;
  const bool lost_slot = lost && lost->signal > 0;
  if (first.hosts.empty()) {  // this host, or the allocation: no probe
    a.slots = std::max(0, (first.slurm ? first.slots : range.max) - (lost_slot ? 1 : 0));
    return a;
  }
  for (Host h : first.hosts) {
    if (h.slots == 0) h.slots = first.cores_per_host;
    if (!host_answers(h, r, log)) {
      a.down.push_back(h.name);
      continue;
    }
    if (lost_slot && lost->host == h.name) --h.slots;
    if (h.slots <= 0) continue;
    a.slots += h.slots;
    a.hosts.push_back(h);
  }
  return a;
}

std::optional<LayoutChoice> choose_layout(const config::Config& cfg, const LayoutChoice& prev,
                                          int min, int max_n) {
  const bool prev_g3 = keeps_g3(cfg, prev);
  for (int n = max_n; n >= min; --n) {
    for (int tp : tp_candidates(static_cast<int>(cfg.parallel.tp), n)) {
      const LayoutChoice next{n, tp};
      const bool same = next.np == prev.np && next.tp == prev.tp;
      if (same ? valid(cfg, next) : prev_g3 && keeps_g3(cfg, next)) return next;
    }
  }
  return std::nullopt;
}

std::string why_bits_hold(const LayoutChoice& prev, const LayoutChoice& next,
                          const std::string& checkpoint) {
  const auto name = [](const LayoutChoice& l) {
    return "TP " + std::to_string(l.tp) + " x DP " + std::to_string(l.np / l.tp);
  };
  if (checkpoint.empty())
    return "no checkpoint yet: the job starts again from step 0 on " + name(next) +
           (next.np == prev.np && next.tp == prev.tp
                ? " (the same layout: G1)"
                : ", and G3 holds on both layouts, so it computes the same steps (G3)");
  const std::string step = std::to_string(checkpoint_step(checkpoint));
  if (next.np == prev.np && next.tp == prev.tp)
    return "the checkpoint of step " + step + " resumes on the same layout, " + name(next) +
           ", so the trajectory continues bit for bit (G2)";
  return "the checkpoint of step " + step + " reshards onto " + name(next) + " and G3 holds on " +
         name(next) + " and on " + name(prev) +
         " (the failed job's), so the trajectory continues bit for bit (G4)";
}

}  // namespace lockstep::supervise
