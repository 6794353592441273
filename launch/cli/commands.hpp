// The subcommands of build/bin/lockstep. Each registers its CLI11 options on the app and
// returns the function that runs it after parsing; options live in a config struct owned
// by the command (no globals). Determinism contract: none here; each command states its own.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <functional>

namespace lockstep::cli {

using Runner = std::function<int(int argc, char** argv)>;

// The Runner of a command whose errors all end the same way: any exception is printed as
// "lockstep: error: ..." on stderr and the exit status is 2.
inline Runner guarded(std::function<int()> body) {
  return [body = std::move(body)](int, char**) {
    try {
      return body();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep: error: %s\n", e.what());
      return 2;
    }
  };
}

// `lockstep info`: build facts (compiler, flags, ISA paths, libraries).
Runner add_info(CLI::App& app);
// `lockstep collectives-demo`: the multi-rank proof that tree collectives reproduce the
// single-process canonical reduction bit for bit (run under mpirun by launch/lockstep demo).
Runner add_collectives_demo(CLI::App& app);
// `lockstep data preprocess|inspect|synth`: Megatron indexed datasets with the byte tokenizer.
Runner add_data(CLI::App& app);
// `lockstep run`: validate, compose and run mpirun for `lockstep train`, supervised.
Runner add_run(CLI::App& app);
// `lockstep train`: the per-rank training program.
Runner add_train(CLI::App& app);
// The experiments (docs/design.md section 7): resume-check (G2), layout-check (G3), tax (step
// time per mode), lab (the replay lab).
Runner add_resume_check(CLI::App& app);
Runner add_layout_check(CLI::App& app);
Runner add_tax(CLI::App& app);
Runner add_lab(CLI::App& app);
// `lockstep verify compare|bisect|ops`: where two runs first parted (step, tensor, op).
Runner add_verify(CLI::App& app);
// `lockstep ckpt inspect|verify|export`: look into, re-hash and export checkpoints.
Runner add_ckpt(CLI::App& app);
// `lockstep docs cli`: docs/cli.md, generated from the option and config key tables.
Runner add_docs(CLI::App& app);

}  // namespace lockstep::cli
