// build/bin/lockstep: the per-rank CLI (docs/design.md section 6). launch/lockstep forwards
// every command it does not handle itself here. Bad input gets one clear line and a
// non-zero exit before any rank starts work.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <string>

#include "launch/cli/commands.hpp"
#include "runtime/openblas_env.hpp"

int main(int argc, char** argv) {
  lockstep::pin_openblas_kernels(argv);  // before MPI: fast mode gets OpenBLAS's AVX-512 kernels
  CLI::App app{"lockstep: bitwise-reproducible distributed training (see README.md)", "lockstep"};
  app.require_subcommand(1);
  std::map<std::string, lockstep::cli::Runner> runners;
  runners["info"] = lockstep::cli::add_info(app);
  runners["collectives-demo"] = lockstep::cli::add_collectives_demo(app);
  runners["data"] = lockstep::cli::add_data(app);
  runners["run"] = lockstep::cli::add_run(app);
  runners["train"] = lockstep::cli::add_train(app);
  runners["resume-check"] = lockstep::cli::add_resume_check(app);
  runners["layout-check"] = lockstep::cli::add_layout_check(app);
  runners["tax"] = lockstep::cli::add_tax(app);
  runners["lab"] = lockstep::cli::add_lab(app);
  runners["verify"] = lockstep::cli::add_verify(app);
  runners["ckpt"] = lockstep::cli::add_ckpt(app);
  runners["docs"] = lockstep::cli::add_docs(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "lockstep: error: %s (see: lockstep %s--help)\n", e.what(),
                 app.get_subcommands().empty()
                     ? ""
                     : (app.get_subcommands().front()->get_name() + " ").c_str());
    return 2;
  }
  return runners.at(app.get_subcommands().front()->get_name())(argc, argv);
}
