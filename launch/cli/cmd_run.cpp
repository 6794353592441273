// `lockstep run [--np N] [--tp T] [--hostfile F | --host H[:SLOTS],...] [--bind none|core|socket]
// [--threads T] [--mpi-arg ARG ...] [--dry-run] [CONFIG] [--set k=v ...]`: the launcher.
// Validates the config for the layout (preflight: nothing starts on a bad config or layout),
// works out threads per rank, binding and oversubscription from the cores of the hosts,
// sets the environment the mode needs (OpenMP/OpenBLAS thread counts and places; for CUDA
// builds in deterministic/invariant mode NCCL_ALGO=Ring, NCCL_PROTO=Simple and
// CUBLAS_WORKSPACE_CONFIG=:4096:8), prints the exact mpirun command and execs it. Inside a
// SLURM allocation (SLURM_JOB_ID set) it takes np from SLURM_NTASKS and lets Open MPI read
// the allocation (its ras/plm slurm components: hosts from SLURM_JOB_NODELIST, daemons
// started with srun), so no hostfile is passed. `--np 1` on one host runs `lockstep train`
// directly, without mpirun.
// Determinism contract: none here; the layout it launches gets exactly the guarantees the
// validator states (printed here and by rank 0 of the job). Binding and thread counts never
// change bits in invariant mode (kernels split output tiles only). The flags' spelling comes
// from launch/mpirun.flags (compiled in: lockstep/mpirun_flags.hpp); when to pass each one
// is decided here.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launch/cli/commands.hpp"
#include "launch/experiments/subprocess.hpp"
#include "launch/train/config.hpp"
#include "launch/train/validate.hpp"
#include "lockstep/build_info.hpp"
#include "lockstep/mpirun_flags.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/isa.hpp"

namespace lockstep::cli {
namespace {

struct RunOptions {
  int np = 0;  // 0: SLURM_NTASKS inside an allocation, else 1
  int tp = 0;  // 0: keep the config's parallel.tp
  std::string hostfile;
  std::string hosts;  // --host a:2,b:2
  std::string bind = "auto";
  int threads = 0;  // 0: run.threads, else cores per host / ranks per host
  std::vector<std::string> mpi_args;
  std::string config;
  std::vector<std::string> sets;
  bool dry_run = false;
};

struct Host {
  std::string name;
  int slots = 0;  // 0: unknown (Open MPI counts the host's cores)
};

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

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int run(RunOptions o) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // ---- where the ranks go ----------------------------------------------------------------
  const char* slurm_job = env("SLURM_JOB_ID");
  const bool slurm = slurm_job && o.hostfile.empty() && o.hosts.empty();
  std::vector<Host> hosts;
  if (!o.hostfile.empty()) hosts = read_hostfile(o.hostfile);
  if (!o.hosts.empty()) {
    check(o.hostfile.empty(), "--host and --hostfile both given", "use one of them");
    hosts = parse_hosts(o.hosts);
  }
  int cores_per_host = cores, slots = 0, n_hosts = std::max<int>(1, static_cast<int>(hosts.size()));
  if (slurm) {
    const char* ntasks = env("SLURM_NTASKS");
    check(ntasks != nullptr,
          "inside SLURM job " + std::string(slurm_job) + " but SLURM_NTASKS is unset",
          "allocate with --ntasks (salloc -n N / sbatch -n N) or pass --np and --hostfile");
    slots = std::atoi(ntasks);
    if (o.np == 0) o.np = slots;
    check(o.np <= slots,
          std::to_string(o.np) + " ranks asked for, but the allocation has " + ntasks + " tasks",
          "pass --np <= SLURM_NTASKS or allocate more tasks");
    if (const char* nn = env("SLURM_JOB_NUM_NODES")) n_hosts = std::max(1, std::atoi(nn));
    if (const char* c = env("SLURM_CPUS_ON_NODE")) cores_per_host = std::max(1, std::atoi(c));
  } else {
    for (const auto& h : hosts) slots += h.slots > 0 ? h.slots : cores;
    if (hosts.empty()) slots = cores;
  }
  if (o.np == 0) o.np = 1;
  const bool multi = !hosts.empty() || slurm;
  const int ranks_per_host = (o.np + n_hosts - 1) / n_hosts;

  // ---- config preflight ------------------------------------------------------------------
  config::Config cfg;
  if (!o.config.empty()) config::load_toml_file(cfg, o.config);
  std::vector<std::string> sets = o.sets;
  if (o.tp > 0) sets.push_back("parallel.tp=" + std::to_string(o.tp));
  for (const auto& s : sets) config::apply_override(cfg, s);
  const bool threads_from_config = o.threads == 0 && cfg.run.threads != 0;
  if (o.threads > 0) cfg.run.threads = o.threads;
  if (cfg.run.threads == 0) {
    const char* per_task = slurm ? env("SLURM_CPUS_PER_TASK") : nullptr;
    cfg.run.threads =
        per_task ? std::max(1, std::atoi(per_task)) : std::max(1, cores_per_host / ranks_per_host);
  }
  if (!threads_from_config) sets.push_back("run.threads=" + std::to_string(cfg.run.threads));
  config::validate_or_throw(cfg, o.np);  // nothing launches on a bad config or layout
  const std::string threads = std::to_string(cfg.run.threads);

  // ---- binding and oversubscription ----------------------------------------------------
  const bool fits = ranks_per_host * cfg.run.threads <= cores_per_host;
  std::string bind = o.bind;
  if (bind == "auto") bind = fits ? "core" : "none";
  check(bind != "core" || fits,
        "--bind core needs " + std::to_string(ranks_per_host) + " ranks x " + threads +
            " threads <= " + std::to_string(cores_per_host) + " cores per host",
        "use --bind none or fewer threads (--threads)");
  const bool oversubscribe = o.np > slots;

  // ---- environment -----------------------------------------------------------------------
  std::vector<std::pair<std::string, std::string>> envs = {{"OMP_NUM_THREADS", threads},
                                                           {"OPENBLAS_NUM_THREADS", threads}};
  // OpenMP places only where our own kernels run the threads: OpenBLAS's pthreads inherit a
  // pinned master thread's single core (OMP_PROC_BIND=spread halved 2-thread OpenBLAS on
  // these hosts), so fast mode keeps OpenMP unpinned when its GEMM is OpenBLAS's (a CPU
  // without AVX-512 here; the ranks run on alike hosts).
  const bool openblas_threads = cfg.run.determinism == Determinism::fast &&
                                fastest_gemm_impl(resolve_isa(cfg.run.isa)) == GemmImpl::openblas;
  if (bind != "none" && !openblas_threads)
    envs.insert(envs.end(), {{"OMP_PROC_BIND", "close"}, {"OMP_PLACES", "cores"}});
  if (build_info::kCuda && cfg.run.determinism != Determinism::fast)
    envs.insert(
        envs.end(),
        {{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}, {"CUBLAS_WORKSPACE_CONFIG", ":4096:8"}});

  std::vector<std::string> argv;
  const auto append = [&argv](const auto& words) {
    argv.insert(argv.end(), std::begin(words), std::end(words));
  };
  if (o.np > 1 || multi) {
    argv = {"mpirun", "-np", std::to_string(o.np)};
    if (geteuid() == 0) append(mpirun_flags::kRoot);
    if (oversubscribe) append(mpirun_flags::kOversubscribe);
    if (!o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", o.hostfile});
    if (!o.hosts.empty()) {
      std::string h;
      for (const auto& x : hosts)
        h += (h.empty() ? "" : ",") + x.name + ":" + std::to_string(x.slots);
      argv.insert(argv.end(), {"--host", h});
    }
    if (bind == "core")
      argv.insert(argv.end(), {"--bind-to", "core", "--map-by", "slot:PE=" + threads});
    else if (bind == "socket")
      argv.insert(argv.end(), {"--bind-to", "socket", "--map-by", "socket"});
    else
      append(mpirun_flags::kUnbound);
    for (const auto& [k, v] : envs) argv.insert(argv.end(), {"-x", k + "=" + v});
    for (const auto& a : o.mpi_args) {
      std::istringstream ss(a);  // "--mca btl tcp,self" may come as one argument
      std::string tok;
      while (ss >> tok) argv.push_back(tok);
    }
  }
  argv.push_back(proc::self_exe());
  argv.push_back("train");
  if (!o.config.empty()) argv.push_back(o.config);
  for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});

  if (slurm)
    std::printf(
        "lockstep run: inside SLURM job %s: %s tasks on %s; Open MPI takes the hosts "
        "from the allocation and starts its daemons with srun\n",
        slurm_job, env("SLURM_NTASKS"),
        env("SLURM_JOB_NODELIST") ? env("SLURM_JOB_NODELIST") : "(nodelist unset)");
  std::printf("lockstep run: %d rank(s) = TP %lld x DP %lld, %s thread(s) each, bind %s%s; %s\n",
              o.np, static_cast<long long>(cfg.parallel.tp),
              static_cast<long long>(o.np / cfg.parallel.tp), threads.c_str(), bind.c_str(),
              oversubscribe ? ", oversubscribed" : "",
              config::guarantees(cfg, o.np).summary().c_str());
  std::string envline;
  if (argv[0] != "mpirun")
    for (const auto& [k, v] : envs) envline += k + "=" + v + " ";
  std::printf("lockstep run: %s%s\n", envline.c_str(), proc::join_command(argv).c_str());
  std::fflush(stdout);
  if (o.dry_run) return 0;
  for (const auto& [k, v] : envs) setenv(k.c_str(), v.c_str(), 1);
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp(cargv[0], cargv.data());
  fail("cannot start '" + argv[0] + "': " + std::strerror(errno),
       argv[0] == "mpirun" ? "install openmpi-bin (launch/lockstep setup)"
                           : "rebuild with launch/lockstep build");
}

}  // namespace

Runner add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* sub = app.add_subcommand("run", "launch `lockstep train` on N ranks through mpirun");
  sub->add_option("--np", o->np, "number of ranks = tp x dp (default: SLURM_NTASKS, else 1)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--tp", o->tp, "tensor-parallel size (overrides parallel.tp)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--hostfile", o->hostfile, "Open MPI hostfile ('HOST slots=N' lines)")
      ->check(CLI::ExistingFile);
  sub->add_option("--host", o->hosts, "hosts as HOST[:SLOTS],... (instead of --hostfile)");
  sub->add_option("--bind", o->bind,
                  "process binding: auto (core when ranks x threads fit the cores, else none), "
                  "none, core, socket")
      ->check(CLI::IsMember({"auto", "none", "core", "socket"}));
  sub->add_option("--threads", o->threads, "OpenMP threads per rank (overrides run.threads)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--mpi-arg", o->mpi_args,
                  "extra mpirun arguments, split at spaces (repeatable), e.g. '--mca btl tcp,self'")
      ->allow_extra_args(false);
  sub->add_option("config", o->config, "TOML config (e.g. launch/configs/tiny.toml)")
      ->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "override: section.key=value (repeatable)")
      ->allow_extra_args(false);
  sub->add_flag("--dry-run", o->dry_run, "validate and print the command, do not run it");
  return guarded([o] { return run(*o); });
}

}  // namespace lockstep::cli
