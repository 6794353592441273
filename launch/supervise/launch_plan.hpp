// What `lockstep run` starts for a rank count on a set of hosts: the config preflight (nothing
// starts on a bad config or layout), threads per rank, binding and oversubscription from the
// cores of the hosts, the environment the mode needs (OpenMP/OpenBLAS thread counts and
// places; for CUDA builds in deterministic/invariant mode NCCL_ALGO=Ring, NCCL_PROTO=Simple
// and CUBLAS_WORKSPACE_CONFIG=:4096:8) and the exact command: mpirun, or `lockstep train`
// itself for one rank on this host. Inside a SLURM allocation (SLURM_JOB_ID set) np comes
// from SLURM_NTASKS and Open MPI reads the allocation (hosts from SLURM_JOB_NODELIST, daemons
// started with srun), so no hostfile is passed. The supervisor (supervisor.hpp) plans the
// first launch and every relaunch (another rank count, the hosts that still answer) here.
// Determinism contract: none here; the layout it launches gets exactly the guarantees the
// validator states (printed here and by rank 0 of the job). Binding and thread counts never
// change bits in invariant mode (kernels split output tiles only). The flags' spelling comes
// from launch/mpirun.flags (compiled in: lockstep/mpirun_flags.hpp); when to pass each one
// is decided here.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launch/train/config.hpp"

namespace lockstep::supervise {

struct Host {
  std::string name;
  int slots = 0;  // 0: unknown (Open MPI counts the host's cores)
};
// An Open MPI hostfile ('HOST slots=N' lines) / a --host list (HOST[:SLOTS],...).
std::vector<Host> read_hostfile(const std::string& path);
std::vector<Host> parse_hosts(const std::string& list);

// The options of `lockstep run` (launch/cli/cmd_run.cpp parses them).
struct RunRequest {
  int np = 0;  // 0: SLURM_NTASKS inside an allocation, else 1
  int tp = 0;  // 0: keep the config's parallel.tp
  int pp = 0;  // 0: keep the config's parallel.pp
  std::string hostfile;
  std::string hosts;  // --host a:2,b:2
  std::string bind = "auto";
  int threads = 0;  // 0: run.threads, else cores per host / ranks per host
  std::vector<std::string> mpi_args;
  std::string config;
  std::vector<std::string> sets;
  bool dry_run = false;
  int max_restarts = 0;
  std::string elastic;  // "MIN:MAX" ranks, "" = off
};

// The words of the --mpi-arg values, each split at spaces ("--mca btl tcp,self" may come as
// one argument).
std::vector<std::string> mpi_arg_words(const std::vector<std::string>& mpi_args);

// Where the ranks go: this host, a host list (hostfile or --host) or a SLURM allocation.
struct Placement {
  int np = 1;
  std::vector<Host> hosts;  // empty: this host (or the SLURM allocation)
  std::string hostfile;     // passed as --hostfile when set, else hosts as --host
  bool slurm = false;
  int slots = 0;           // what the hosts offer (oversubscribed past it)
  int cores_per_host = 1;  // this host's cores, or SLURM_CPUS_ON_NODE
};
// The first launch's placement (throws on a bad host list or too many ranks for SLURM).
Placement initial_placement(const RunRequest& r);
// This host's cores (at least 1).
int host_cores();

struct Launch {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> envs;
  config::Config cfg;              // as the job will see it (the config plus every --set)
  std::vector<std::string> lines;  // what `lockstep run` prints before starting it
  bool mpirun() const { return !argv.empty() && argv[0] == "mpirun"; }
};
// The job for placement p: the config with r.sets and then extra_sets applied (later wins),
// validated for p.np (throws a lockstep::Error listing the problems).
Launch plan_launch(const RunRequest& r, const Placement& p,
                   const std::vector<std::string>& extra_sets = {});

// The config as `lockstep run` resolves it (the file, then the sets and --tp): run.out, the
// layout, the contract.
config::Config resolve_config(const RunRequest& r, const std::vector<std::string>& extra_sets);

}  // namespace lockstep::supervise
