// `lockstep run --np N [--tp T] [--hostfile F] [CONFIG] [--set k=v ...]`: validates the
// config for the layout, composes the mpirun command (root flags, --oversubscribe only past
// the core count, binding, threads per rank = cores / ranks unless run.threads is set),
// prints it and execs it. `--np 1` runs `lockstep train` directly, without mpirun.
// Determinism contract: none here; the layout it launches gets exactly the guarantees the
// validator states (printed by rank 0 of the job).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "launch/commands.hpp"
#include "launch/config.hpp"
#include "launch/validate.hpp"
#include "runtime/error.hpp"

namespace lockstep::cli {
namespace {

struct RunOptions {
  int np = 1;
  int tp = 0;  // 0: keep the config's parallel.tp
  std::string hostfile;
  std::string config;
  std::vector<std::string> sets;
  bool dry_run = false;
};

std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  check(n > 0, std::string("cannot resolve /proc/self/exe: ") + std::strerror(errno));
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of(
                        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

int run(const RunOptions& o) {
  config::Config cfg;
  if (!o.config.empty()) config::load_toml_file(cfg, o.config);
  std::vector<std::string> sets = o.sets;
  if (o.tp > 0) sets.push_back("parallel.tp=" + std::to_string(o.tp));
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const auto& s : sets) config::apply_override(cfg, s);
  if (cfg.run.threads == 0) {
    cfg.run.threads = std::max(1, cores / o.np);
    sets.push_back("run.threads=" + std::to_string(cfg.run.threads));
  }
  config::validate_or_throw(cfg, o.np);  // preflight: nothing launches on a bad config

  std::vector<std::string> argv;
  const std::string threads = std::to_string(cfg.run.threads);
  if (o.np > 1 || !o.hostfile.empty()) {
    argv = {"mpirun", "-np", std::to_string(o.np)};
    if (geteuid() == 0) argv.push_back("--allow-run-as-root");
    if (o.hostfile.empty() && o.np * cfg.run.threads > cores) argv.push_back("--oversubscribe");
    if (!o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", o.hostfile});
    // One rank per core-set of `threads` cores when it fits; otherwise no binding.
    if (o.np * cfg.run.threads <= cores && o.hostfile.empty())
      argv.insert(argv.end(), {"--bind-to", "core", "--map-by", "slot:PE=" + threads});
    else
      argv.insert(argv.end(), {"--bind-to", "none"});
    for (const char* var : {"OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"})
      argv.insert(argv.end(), {"-x", std::string(var) + "=" + threads});
  }
  argv.push_back(self_exe());
  argv.push_back("train");
  if (!o.config.empty()) argv.push_back(o.config);
  for (const auto& s : sets) argv.insert(argv.end(), {"--set", s});

  std::string line;
  for (const auto& a : argv) line += (line.empty() ? "" : " ") + shell_quote(a);
  std::printf("lockstep run: %s\n", line.c_str());
  std::fflush(stdout);
  if (o.dry_run) return 0;
  setenv("OMP_NUM_THREADS", threads.c_str(), 1);
  setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 1);
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
  sub->add_option("--np", o->np, "number of ranks (tp x dp)")->check(CLI::PositiveNumber);
  sub->add_option("--tp", o->tp, "tensor-parallel size (overrides parallel.tp)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--hostfile", o->hostfile, "Open MPI hostfile for several machines")
      ->check(CLI::ExistingFile);
  sub->add_option("config", o->config, "TOML config (e.g. launch/configs/tiny.toml)")
      ->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "override: section.key=value (repeatable)");
  sub->add_flag("--dry-run", o->dry_run, "print the command, do not run it");
  return [o](int, char**) {
    try {
      return run(*o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep: error: %s\n", e.what());
      return 2;
    }
  };
}

}  // namespace lockstep::cli
