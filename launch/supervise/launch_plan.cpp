#include "launch/supervise/launch_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "launch/experiments/subprocess.hpp"
#include "launch/train/memory_estimate.hpp"
#include "launch/train/validate.hpp"
#include "lockstep/build_info.hpp"
#include "lockstep/mpirun_flags.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/isa.hpp"
#include "runtime/text.hpp"

namespace lockstep::supervise {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

struct Binding {
  std::string bind;  // none | core | socket
  std::string threads;
  bool oversubscribe = false;
};

// Threads per rank and binding for p (run.threads decided here goes into `sets`).
Binding decide_binding(const RunRequest& r, const Placement& p, config::Config& cfg,
                       std::vector<std::string>& sets) {
  int n_hosts = std::max<int>(1, static_cast<int>(p.hosts.size()));
  if (p.slurm)
    if (const char* nn = env("SLURM_JOB_NUM_NODES")) n_hosts = std::max(1, std::atoi(nn));
  const int ranks_per_host = (p.np + n_hosts - 1) / n_hosts;
  const bool threads_from_config = r.threads == 0 && cfg.run.threads != 0;
  if (r.threads > 0) cfg.run.threads = r.threads;
  if (cfg.run.threads == 0) {
    const char* per_task = p.slurm ? env("SLURM_CPUS_PER_TASK") : nullptr;
    cfg.run.threads = per_task ? std::max(1, std::atoi(per_task))
                               : std::max(1, p.cores_per_host / ranks_per_host);
  }
  if (!threads_from_config) sets.push_back("run.threads=" + std::to_string(cfg.run.threads));
  Binding b;
  b.threads = std::to_string(cfg.run.threads);
  const bool fits = ranks_per_host * cfg.run.threads <= p.cores_per_host;
  b.bind = r.bind == "auto" ? (fits ? "core" : "none") : r.bind;
  check(b.bind != "core" || fits,
        "--bind core needs " + std::to_string(ranks_per_host) + " ranks x " + b.threads +
            " threads <= " + std::to_string(p.cores_per_host) + " cores per host",
        "use --bind none or fewer threads (--threads)");
  b.oversubscribe = p.np > p.slots;
  return b;
}

std::vector<std::pair<std::string, std::string>> job_env(const config::Config& cfg,
                                                         const Binding& b) {
  std::vector<std::pair<std::string, std::string>> envs = {{"OMP_NUM_THREADS", b.threads},
                                                           {"OPENBLAS_NUM_THREADS", b.threads}};
  // OpenMP places only where our own kernels run the threads: OpenBLAS's pthreads inherit a
  // pinned master thread's single core (OMP_PROC_BIND=spread halved 2-thread OpenBLAS on
  // these hosts), so fast mode keeps OpenMP unpinned when its GEMM is OpenBLAS's (a CPU
  // without AVX-512 here; the ranks run on alike hosts).
  const bool openblas_threads = cfg.run.determinism == Determinism::fast &&
                                fastest_gemm_impl(resolve_isa(cfg.run.isa)) == GemmImpl::openblas;
  if (b.bind != "none" && !openblas_threads)
    envs.insert(envs.end(), {{"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "cores"}});
  if (build_info::kCuda && cfg.run.determinism != Determinism::fast)
    envs.insert(
        envs.end(),
        {{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}, {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"}});
  return envs;
}

std::vector<std::string> mpirun_argv(const RunRequest& r, const Placement& p, const Binding& b,
                                     const std::vector<std::pair<std::string, std::string>>& envs) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(p.np)};
  const auto append = [&argv](const auto& words) {
    argv.insert(argv.end(), std::begin(words), std::end(words));
  };
  if (geteuid() == 0) append(mpirun_flags::kRoot);
  if (b.oversubscribe) append(mpirun_flags::kOversubscribe);
  if (!p.hostfile.empty()) {
    argv.insert(argv.end(), {"--hostfile", p.hostfile});
  } else if (!p.hosts.empty()) {
    std::string h;
    for (const auto& x : p.hosts)
      h += (h.empty() ? "" : ",") + x.name + ":" +
           std::to_string(x.slots > 0 ? x.slots : p.cores_per_host);
    argv.insert(argv.end(), {"--host", h});
  }
  if (b.bind == "core")
    argv.insert(argv.end(), {"--bind-to", "core", "--map-by", "slot:PE=" + b.threads});
  else if (b.bind == "socket")
    argv.insert(argv.end(), {"--bind-to", "socket", "--map-by", "socket"});
  else
    append(mpirun_flags::kUnbound);
  for (const auto& [k, v] : envs) argv.insert(argv.end(), {"-x", k + "=" + v});
  bool own_keepalive = false;
  for (const auto& w : mpi_arg_words(r.mpi_args)) {
    argv.push_back(w);
    own_keepalive = own_keepalive || w.find("oob_tcp_keepalive") != std::string::npos;
  }
  // A supervised job on several hosts notices a lost one in seconds (launch/mpirun.flags).
  if (r.max_restarts > 0 && (!p.hosts.empty() || !p.hostfile.empty() || p.slurm) && !own_keepalive)
    append(mpirun_flags::kHostLoss);
  return argv;
}

}  // namespace

std::vector<std::string> mpi_arg_words(const std::vector<std::string>& mpi_args) {
  std::vector<std::string> words;
  for (const auto& a : mpi_args) {
    std::istringstream ss(a);
    std::string tok;
    while (ss >> tok) words.push_back(tok);
  }
  return words;
}

std::vector<Host> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cannot read hostfile '" + path + "'", "pass an existing Open MPI hostfile");
  std::vector<Host> hosts;
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    line = line.substr(0, line.find('#'));
    std::istringstream ss(line);
    Host h;
    if (!(ss >> h.name)) continue;
    std::string tok;
    while (ss >> tok) {
      if (tok.rfind("slots=", 0) == 0) {
        h.slots = std::atoi(tok.c_str() + 6);
        check(h.slots > 0, path + ":" + std::to_string(lineno) + ": bad '" + tok + "'",
              "write 'HOST slots=N' with N >= 1");
      }
    }
    hosts.push_back(h);
  }
  check(!hosts.empty(), "hostfile '" + path + "' names no host", "one 'HOST slots=N' per line");
  return hosts;
}

std::vector<Host> parse_hosts(const std::string& list) {
  std::vector<Host> hosts;
  for (const auto& item : proc::split_list(list)) {
    Host h;
    const auto colon = item.find(':');
    h.name = item.substr(0, colon);
    h.slots = colon == std::string::npos ? 1 : std::atoi(item.c_str() + colon + 1);
    check(!h.name.empty() && h.slots > 0, "--host entry '" + item + "' is not HOST or HOST:SLOTS",
          "e.g. --host node1:2,node2:2");
    hosts.push_back(h);
  }
  return hosts;
}

int host_cores() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

Placement initial_placement(const RunRequest& r) {
  Placement p;
  p.cores_per_host = host_cores();
  const char* slurm_job = env("SLURM_JOB_ID");
  p.slurm = slurm_job && r.hostfile.empty() && r.hosts.empty();
  if (!r.hostfile.empty()) {
    p.hosts = read_hostfile(r.hostfile);
    p.hostfile = r.hostfile;
  }
  if (!r.hosts.empty()) {
    check(r.hostfile.empty(), "--host and --hostfile both given", "use one of them");
    p.hosts = parse_hosts(r.hosts);
  }
  p.np = r.np;
  if (p.slurm) {
    const char* ntasks = env("SLURM_NTASKS");
    check(ntasks != nullptr,
          "inside SLURM job " + std::string(slurm_job) + " but SLURM_NTASKS is unset",
          "allocate with --ntasks (salloc -n N / sbatch -n N) or pass --np and --hostfile");
    p.slots = std::atoi(ntasks);
    if (p.np == 0) p.np = p.slots;
    check(p.np <= p.slots,
          std::to_string(p.np) + " ranks asked for, but the allocation has " + ntasks + " tasks",
          "pass --np <= SLURM_NTASKS or allocate more tasks");
    if (const char* c = env("SLURM_CPUS_ON_NODE")) p.cores_per_host = std::max(1, std::atoi(c));
  } else {
    for (const auto& h : p.hosts) p.slots += h.slots > 0 ? h.slots : p.cores_per_host;
    if (p.hosts.empty()) p.slots = p.cores_per_host;
  }
  if (p.np == 0) p.np = 1;
  return p;
}

config::Config resolve_config(const RunRequest& r, const std::vector<std::string>& extra_sets) {
  config::Config cfg;
  if (!r.config.empty()) config::load_toml_file(cfg, r.config);
  for (const auto& s : r.sets) config::apply_override(cfg, s);
  if (r.tp > 0) config::apply_override(cfg, "parallel.tp=" + std::to_string(r.tp));
  if (r.pp > 0) config::apply_override(cfg, "parallel.pp=" + std::to_string(r.pp));
  for (const auto& s : extra_sets) config::apply_override(cfg, s);
  return cfg;
}

namespace {
// /proc/meminfo's MemAvailable in bytes; -1 when it cannot be read.
std::int64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

// A warning when every rank of a one-host job together is estimated to need more memory than
// the host has available (an estimate: the job is still launched).
std::string memory_warning(const config::Config& cfg, int np) {
  const std::int64_t avail = available_memory();
  if (avail <= 0) return "";
  const std::int64_t need =
      np * config::kProcessBytes + config::all_ranks_bytes(config::memory_estimate(cfg, np), np);
  if (need <= avail) return "";
  return "warning: the " + std::to_string(np) + " ranks are estimated to need " +
         human_bytes(need) + ", more than the " + human_bytes(avail) +
         " this host has available; a smaller parallel.microbatch, more pipeline stages "
         "(--pp), ZeRO (parallel.zero) or more hosts would reduce it";
}
}  // namespace

Launch plan_launch(const RunRequest& r, const Placement& p,
                   const std::vector<std::string>& extra_sets) {
  Launch l;
  std::vector<std::string> sets = r.sets;
  if (r.tp > 0) sets.push_back("parallel.tp=" + std::to_string(r.tp));
  if (r.pp > 0) sets.push_back("parallel.pp=" + std::to_string(r.pp));
  sets.insert(sets.end(), extra_sets.begin(), extra_sets.end());
  l.cfg = resolve_config(r, extra_sets);
  const Binding b = decide_binding(r, p, l.cfg, sets);
  config::validate_or_throw(l.cfg, p.np);  // nothing launches on a bad config or layout
  l.envs = job_env(l.cfg, b);
  if (p.np > 1 || !p.hosts.empty() || p.slurm) l.argv = mpirun_argv(r, p, b, l.envs);
  l.argv.push_back(proc::self_exe());
  l.argv.push_back("train");
  if (!r.config.empty()) l.argv.push_back(r.config);
  for (const auto& s : sets) l.argv.insert(l.argv.end(), {"--set", s});

  if (p.slurm)
    l.lines.push_back("inside SLURM job " + std::string(env("SLURM_JOB_ID")) + ": " +
                      env("SLURM_NTASKS") + " tasks on " +
                      (env("SLURM_JOB_NODELIST") ? env("SLURM_JOB_NODELIST") : "(nodelist unset)") +
                      "; Open MPI takes the hosts from the allocation and starts its daemons "
                      "with srun");
  const auto tp = static_cast<long long>(l.cfg.parallel.tp);
  const auto pp = static_cast<long long>(l.cfg.parallel.pp);
  l.lines.push_back(
      std::to_string(p.np) + " rank(s) = TP " + std::to_string(tp) + " x DP " +
      std::to_string(p.np / (tp * pp)) + (pp > 1 ? " x PP " + std::to_string(pp) : "") + ", " +
      b.threads + " thread(s) each, bind " + b.bind + (b.oversubscribe ? ", oversubscribed" : "") +
      "; " + config::guarantees(l.cfg, p.np).summary());
  for (auto& line : config::memory_lines(l.cfg, p.np)) l.lines.push_back(std::move(line));
  if (p.hosts.empty() && !p.slurm) {
    const std::string warn = memory_warning(l.cfg, p.np);
    if (!warn.empty()) l.lines.push_back(warn);
  }
  std::string envline;
  if (!l.mpirun())
    for (const auto& [k, v] : l.envs) envline += k + "=" + v + " ";
  l.lines.push_back(envline + proc::join_command(l.argv));
  return l;
}

}  // namespace lockstep::supervise
