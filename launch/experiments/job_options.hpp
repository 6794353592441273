// The options shared by the experiments that launch training jobs through `lockstep run`
// (resume-check, layout-check, tax): the config and its overrides, where the runs go, and how
// mpirun is called. One registration, so the three commands spell and document them alike.
// Determinism contract: none (command-line plumbing).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace lockstep::experiments {

struct JobOptions {
  std::string config;                 // TOML config (positional)
  std::vector<std::string> sets;      // --set section.key=value, repeatable
  std::string out;                    // --out: directory for the runs (each command's default)
  std::vector<std::string> mpi_args;  // --mpi-arg: extra mpirun arguments
  std::string hostfile;               // --hostfile: Open MPI hostfile ("" one machine)
};

// Registers --out, --mpi-arg, config and --set on `sub`, and --hostfile when `hostfile`.
// `config_help` describes the positional config.
void add_job_options(CLI::App* sub, JobOptions& o, bool hostfile,
                     const std::string& config_help = "TOML config");

}  // namespace lockstep::experiments
