// `lockstep run [--np N] [--tp T] [--pp P] [--hostfile F | --host H[:SLOTS],...]
// [--bind none|core|socket] [--threads T] [--mpi-arg ARG ...] [--max-restarts N
// [--elastic MIN:MAX]] [--dry-run] [CONFIG] [--set k=v ...]`: the launcher's command line. The
// options go to the supervisor (launch/supervise/supervisor.hpp), which validates the config for
// the layout (nothing starts on a bad config or layout), composes the mpirun command
// (launch_plan.hpp), prints it, runs it as a child with Open MPI's output in RUN_OUT/launcher.log,
// and relaunches a failed job from its newest checkpoint when asked to. Determinism contract: none
// here (the supervisor's: a relaunch keeps G2 or G4).
#include <memory>

#include "launch/cli/commands.hpp"
#include "launch/supervise/supervisor.hpp"

namespace lockstep::cli {

Runner add_run(CLI::App& app) {
  auto o = std::make_shared<supervise::RunRequest>();
  auto* sub = app.add_subcommand("run", "launch `lockstep train` on N ranks through mpirun");
  sub->add_option("--np", o->np, "number of ranks = tp x dp x pp (default: SLURM_NTASKS, else 1)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--tp", o->tp, "tensor-parallel size (overrides parallel.tp)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--pp", o->pp, "pipeline-parallel stages (overrides parallel.pp)")
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
  sub->add_option("--max-restarts", o->max_restarts,
                  "relaunch a failed job (a rank died, an error, the watchdog) up to N times "
                  "from its newest checkpoint (run.resume=auto); RUN_OUT/restarts.jsonl "
                  "records each failure and relaunch")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--elastic", o->elastic,
                  "MIN:MAX ranks: a relaunch may use fewer or more ranks (the hosts that still "
                  "answer, less a rank that died), on a layout that keeps G4 (needs "
                  "--max-restarts)");
  return guarded([o] { return supervise::supervise(*o); });
}

}  // namespace lockstep::cli
