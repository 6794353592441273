#include "launch/experiments/job_options.hpp"

namespace lockstep::experiments {

void add_job_options(CLI::App* sub, JobOptions& o, bool hostfile, const std::string& config_help) {
  sub->add_option("--out", o.out, "directory for the runs")->capture_default_str();
  if (hostfile)
    sub->add_option("--hostfile", o.hostfile, "Open MPI hostfile: run every job across these hosts")
        ->check(CLI::ExistingFile);
  sub->add_option("--mpi-arg", o.mpi_args, "extra mpirun arguments (see lockstep run)")
      ->allow_extra_args(false);
  sub->add_option("config", o.config, config_help)->check(CLI::ExistingFile);
  sub->add_option("--set", o.sets, "override: section.key=value (repeatable)")
      ->allow_extra_args(false);
}

}  // namespace lockstep::experiments
