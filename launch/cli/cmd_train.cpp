// `lockstep train [CONFIG.toml] [--set key=value ...]`: the per-rank training program
// (mpirun runs it; `lockstep run` composes that command). The config is read and checked
// for the job's layout before MPI starts, so a bad config costs one line (printed by rank
// 0 only) and a non-zero exit on every rank, and no rank starts work.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "launch/cli/commands.hpp"
#include "launch/experiments/interleave.hpp"
#include "launch/train/config.hpp"
#include "launch/train/orphan_guard.hpp"
#include "launch/train/trainer.hpp"
#include "launch/train/validate.hpp"
#include "runtime/comm.hpp"

namespace lockstep::cli {
namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> sets;
  bool help_config = false;
};

int env_int(const char* a, const char* b, int fallback) {
  for (const char* name : {a, b})
    if (const char* v = std::getenv(name)) return std::atoi(v);
  return fallback;
}

void print_keys() {
  for (const auto& k : config::config_keys()) {
    std::string choices;
    for (const auto& c : k.choices) choices += (choices.empty() ? " [" : "|") + c;
    std::printf("  %-32s %s%s\n", k.name.c_str(), k.help.c_str(),
                choices.empty() ? "" : (choices + "]").c_str());
  }
}

}  // namespace

Runner add_train(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* sub = app.add_subcommand("train", "train a GPT (run under mpirun; see `lockstep run`)");
  sub->add_option("config", o->config, "TOML config (e.g. launch/configs/tiny.toml)");
  sub->add_option("--set", o->sets, "override: section.key=value (repeatable)");
  sub->add_flag("--help-config", o->help_config, "list every config key and exit");
  return [o](int argc, char** argv) {
    if (o->help_config) {
      print_keys();
      return 0;
    }
    die_with_launcher();  // a rank never outlives mpirun (no orphan races a relaunch)
    // Before MPI: the rank and size the launcher gave us (1 process without mpirun).
    const int rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK", 0);
    const int size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", 1);
    config::Config cfg;
    try {
      if (!o->config.empty()) config::load_toml_file(cfg, o->config);
      for (const auto& s : o->sets) config::apply_override(cfg, s);
      config::validate_or_throw(cfg, size);
    } catch (const std::exception& e) {
      if (rank == 0) std::fprintf(stderr, "lockstep: error: %s\n", e.what());
      return 2;
    }
    return run_ranks(argc, argv, [&cfg](Context& mpi) {
      return !cfg.debug.interleave.on() ? train(cfg, mpi)
                                        : experiments::train_interleaved(cfg, mpi);
    });
  };
}

}  // namespace lockstep::cli
