// The experiments' subcommands (docs/design.md section 7): resume-check (G2), layout-check
// (G3), tax (step time per determinism mode) and lab (the replay lab). Each registers its
// options here and runs the experiment of launch/experiments/ with them; nothing else.
// Determinism contract: none here (each experiment states its own).
#include <memory>

#include "launch/cli/commands.hpp"
#include "launch/experiments/job_options.hpp"
#include "launch/experiments/lab.hpp"
#include "launch/experiments/layout_check.hpp"
#include "launch/experiments/resume_check.hpp"
#include "launch/experiments/tax.hpp"

namespace lockstep::cli {

Runner add_tax(CLI::App& app) {
  auto o = std::make_shared<experiments::TaxOptions>();
  auto* sub = app.add_subcommand("tax", "step time per determinism mode: the determinism tax");
  sub->add_option("--modes", o->modes, "comma-separated modes")->capture_default_str();
  sub->add_flag("--interleaved", o->interleaved,
                "time the modes side by side in each job, one step of each in turn "
                "(debug.interleave): drift cancels step by step");
  sub->add_option("--trials", o->trials,
                  "trials (separate runs of every mode, or interleaved jobs)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--steps", o->steps, "steps per run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--skip", o->skip, "first steps of a run left out (warm-up)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--np", o->np, "ranks")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--tp", o->tp, "tensor-parallel size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--pp", o->pp, "pipeline-parallel stages")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--json", o->json, "write the results here (default: OUT/tax.json)");
  experiments::add_job_options(sub, *o, false,
                               "TOML config (e.g. launch/configs/bench-small.toml)");
  return guarded([o] { return experiments::tax(*o); });
}

Runner add_layout_check(CLI::App& app) {
  auto o = std::make_shared<experiments::LayoutCheckOptions>();
  auto* sub = app.add_subcommand("layout-check", "the same job on several TPxDP layouts: G3 check");
  sub->add_option("--layouts", o->layouts, "TPxDP layouts, comma-separated")->capture_default_str();
  sub->add_option("--microbatches", o->microbatches, "microbatch sizes, comma-separated");
  sub->add_option("--steps", o->steps, "steps per run (default: run.steps)")
      ->check(CLI::PositiveNumber);
  experiments::add_job_options(sub, *o, true);
  return guarded([o] { return experiments::layout_check(*o); });
}

Runner add_resume_check(CLI::App& app) {
  auto o = std::make_shared<experiments::ResumeCheckOptions>();
  auto* sub = app.add_subcommand(
      "resume-check", "interrupted + resumed vs uninterrupted training, byte for byte (G2)");
  sub->add_option("--steps", o->steps, "total steps N")->required()->check(CLI::PositiveNumber);
  sub->add_option("--save-at", o->save_at, "steps K[,K2...] to stop at and resume from")
      ->required();
  sub->add_option("--layout", o->layout, "TPxDP of run A and of run B up to the first save")
      ->capture_default_str();
  sub->add_option("--resume-layout", o->resume_layout, "TPxDP of run B after resuming");
  CLI::App* root = &app;  // asked at run time: `verify` registers after this command
  experiments::add_job_options(sub, *o, true);
  return guarded([o, root] {
    return experiments::resume_check(*o, root->get_subcommand("verify") != nullptr);
  });
}

Runner add_lab(CLI::App& app) {
  auto o = std::make_shared<experiments::LabOptions>();
  auto* sub = app.add_subcommand("lab", "the replay lab: what breaks bitwise replay, and how much");
  sub->add_option("--model", o->model, "regression (in process) or gpt (through the trainer)")
      ->check(CLI::IsMember({"regression", "gpt"}))
      ->capture_default_str();
  sub->add_option("--out", o->out, "output directory")->required();
  sub->add_option("--steps", o->steps, "steps (default 100 regression, 30 gpt)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--restore-at", o->restore_at, "checkpoint/reset step (default 40 / 12)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--np", o->np, "gpt: ranks (DP) of the runs")->capture_default_str();
  sub->add_option("--plot-script", o->plot_script, "path of launch/experiments/lab_plot.py");
  sub->add_option("--mpi-arg", o->mpi_args, "gpt: extra mpirun arguments")->allow_extra_args(false);
  sub->add_option("config", o->config, "gpt: TOML config (default launch/configs/tiny.toml)")
      ->check(CLI::ExistingFile);
  sub->add_option("--set", o->sets, "gpt: override section.key=value")->allow_extra_args(false);
  return guarded([o] { return experiments::lab(*o); });
}

}  // namespace lockstep::cli
