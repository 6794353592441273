#include "launch/trainer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "launch/preemption.hpp"
#include "data/sampler.hpp"
#include "launch/state_trace.hpp"
#include "launch/tax_modes.hpp"
#include "launch/train_job.hpp"
#include "launch/validate.hpp"
#include "lockstep/build_info.hpp"
#include "model/gpt.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/grid.hpp"
#include "verify/trace.hpp"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

int default_threads(int world_size) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : world_size;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here);
}

struct RunFiles {
  std::unique_ptr<JsonlWriter> trace, metrics;
};

// Keeps the lines of a JSONL file whose "step" is <= last (a resumed run rewrites the
// steps after its checkpoint). Missing file: nothing to keep.
void keep_steps_up_to(const std::string& path, std::int64_t last) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("step") && j["step"].get<std::int64_t>() <= last)
      kept += line + "\n";
  }
  in.close();
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::trunc);
  out << kept;
  out.close();
  check(out.good(), "cannot rewrite '" + path + "'", "check permissions of run.out");
  std::filesystem::rename(tmp, path);
}

// resume_step < 0: a fresh run (files truncated); otherwise lines after it are dropped.
RunFiles open_run_dir(const config::Config& cfg, std::int64_t resume_step) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(cfg.run.out, ec);
  check(!ec, "cannot create run directory '" + cfg.run.out + "': " + ec.message(),
        "set run.out to a writable path");
  const std::string cfg_path = cfg.run.out + "/config.toml";
  std::ofstream out(cfg_path);
  out << config::to_toml(cfg);
  check(out.good(), "cannot write '" + cfg_path + "'", "check permissions of run.out");
  RunFiles f;
  for (auto [writer, name] :
       {std::pair{&f.trace, "/trace.jsonl"}, {&f.metrics, "/metrics.jsonl"}}) {
    const std::string path = cfg.run.out + name;
    if (resume_step >= 0) keep_steps_up_to(path, resume_step);
    *writer = std::make_unique<JsonlWriter>(path, resume_step < 0);
  }
  return f;
}

std::string fmt_duration(double s) {
  char buf[32];
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else
    std::snprintf(buf, sizeof buf, "%.0fm%02.0fs", std::floor(s / 60), std::fmod(s, 60));
  return buf;
}

// The resolved config as a flat JSON object {"model.vocab": 256, ...} (key table order).
nlohmann::ordered_json config_json(const config::Config& cfg_in) {
  config::Config cfg = cfg_in;
  nlohmann::ordered_json j;
  for (const auto& key : config::config_keys())
    std::visit([&](auto* field) { j[key.name] = *field; }, key.field(cfg));
  return j;
}

// meta.json["run"]: everything besides the tensors that the next step depends on, and what
// a reader needs to know about the run that saved it.
nlohmann::ordered_json run_state(const config::Config& cfg, const Grid& grid, int world_size,
                                 const KernelCtx& kctx, std::int64_t step,
                                 const data::Sampler& sampler, float lr_of_step) {
  nlohmann::ordered_json r;
  r["step"] = step;
  r["consumed_samples"] = sampler.state().consumed_samples;
  r["contract"] = {{"determinism", cfg.run.determinism},
                   {"reduce_block", cfg.numerics.reduce_block}};
  r["layout"] = {{"world", world_size},
                 {"tp", grid.tp_size()},
                 {"dp", grid.dp_size()},
                 {"zero", cfg.parallel.zero},
                 {"microbatch", cfg.parallel.microbatch},
                 {"threads", kctx.threads},
                 {"isa", isa_name(kctx.isa)}};
  r["sampler"] = sampler.to_json();
  r["rng"] = {{"seed", cfg.run.seed}, {"next_step", step + 1}};
  r["lr"] = {
      {"last", lr_of_step}, {"schedule", cfg.optim.schedule}, {"total_steps", cfg.run.steps}};
  r["build"] = {{"version", build_info::kVersion},
                {"compiler", build_info::kCompiler},
                {"build_type", build_info::kBuildType},
                {"flags", build_info::kFlags}};
  r["config"] = config_json(cfg);
  return r;
}

// Refuses a resume that cannot continue this run's trajectory (other model, other contract
// without ckpt.allow_contract_change) and says what a permitted change costs.
void check_resume(const nlohmann::json& saved, const config::Config& cfg, bool root) {
  const nlohmann::json& old = saved.at("config");
  const nlohmann::ordered_json now = config_json(cfg);
  auto differs = [&](const std::string& key) {
    return old.contains(key) && old.at(key) != now.at(key);
  };
  auto both = [&](const std::string& key) {
    return key + " = " + old.at(key).dump() + " in the checkpoint, " + now.at(key).dump() + " now";
  };
  // Tensor shapes (vocab, context, layers, d_model, ffn, bias) are checked per tensor by
  // ckpt::load, which names the tensor and both shapes; these change no shape:
  for (const char* key : {"model.heads", "model.ln_eps"})
    check(!differs(key), "cannot resume: the model differs: " + both(key),
          "resume with the model config the checkpoint was saved with (lockstep ckpt inspect)");
  for (const char* key : {"run.determinism", "numerics.reduce_block"}) {
    if (!differs(key)) continue;
    check(cfg.ckpt.allow_contract_change,
          "cannot resume: the numerical contract differs: " + both(key),
          "keep the saved value, or --set ckpt.allow_contract_change=true to accept that the "
          "resumed run leaves the uninterrupted trajectory");
    if (root)
      std::printf(
          "  resume: %s (ckpt.allow_contract_change): G2 no longer holds, the steps "
          "after the checkpoint differ from an uninterrupted run\n",
          both(key).c_str());
  }
  if (!root) return;
  for (const char* key : {"run.steps", "data.global_batch", "model.dropout", "optim.lr",
                          "optim.min_lr", "optim.warmup", "optim.schedule", "optim.weight_decay",
                          "optim.clip", "optim.beta1", "optim.beta2", "optim.eps"})
    if (differs(key))
      std::printf("  resume: note: %s: the trajectory differs from the saved run's\n",
                  both(key).c_str());
}

// debug.kill_in_save = RANK:STEP.
std::pair<int, std::int64_t> parse_kill(const std::string& spec) {
  if (spec.empty()) return {-1, 0};
  const auto c = spec.find(':');
  return {std::stoi(spec.substr(0, c)), std::stoll(spec.substr(c + 1))};
}

}  // namespace

int train(const config::Config& cfg_in, Context& mpi) {
  config::Config cfg = cfg_in;
  const Communicator& world = mpi.world();
  const bool root = world.rank() == 0;
  config::validate_or_throw(cfg, world.size());
  if (cfg.run.threads == 0) cfg.run.threads = default_threads(world.size());
  const auto [kill_rank, kill_step] = parse_kill(cfg.debug.kill_in_save);
  // debug.interleave: the first mode's job is this run; the others train beside it on their
  // own state, one step of each in turn, for the timing alone (tax_steps.jsonl).
  const std::vector<std::string> modes = config::tax_mode_list(cfg.debug.interleave);
  const config::Config base = cfg;
  if (!modes.empty()) cfg = config::with_tax_mode(base, modes[0]);
  TrainJob job(cfg, mpi);
  std::vector<std::unique_ptr<TrainJob>> shadows;
  for (std::size_t i = 1; i < modes.size(); ++i) {
    config::Config c = config::with_tax_mode(base, modes[i]);
    c.run.out = cfg.run.out + "/interleave-" + modes[i];
    c.ckpt.save = false;
    c.debug.bitflip.clear();  // fault injection stays with the run itself
    shadows.push_back(std::make_unique<TrainJob>(c, mpi));
  }
  const Grid& grid = job.grid();
  const KernelCtx& kctx = job.kctx();
  const Gpt& model = job.model();
  const ParamTable& table = model.table();
  const ModelConfig& mcfg = model.config();
  const data::GptDataset& dataset = job.dataset();
  data::Sampler& sampler = job.sampler();
  StateTrace& state = job.state();
  const int dp = grid.dp_size();
  const std::int64_t G = cfg.data.global_batch, ctx = cfg.model.context;
  const std::int64_t mb = job.microbatch(), n_mb = job.microbatches();

  // ---- resume: every piece of state from the checkpoint, resliced to this layout ----------
  const std::string ckpt_root = cfg.run.out + "/checkpoints";
  const std::string resume_dir = ckpt::resolve_resume(cfg.run.resume, ckpt_root);
  std::int64_t start_step = 0;
  std::string resume_note;
  if (!resume_dir.empty()) {
    check(shadows.empty(), "debug.interleave times fresh runs, and run.resume found " + resume_dir,
          "set run.resume=none or use a new run.out");
    const ckpt::Meta meta = ckpt::read_meta(resume_dir);
    check_resume(meta.run, cfg, root);
    ckpt::load(
        world, resume_dir, meta, state.checkpoint_pieces(),
        cfg.ckpt.load_optim ? std::vector<std::string>{} : std::vector<std::string>{"param/"});
    if (cfg.ckpt.load_data) sampler.restore_json(meta.run.at("sampler"));
    start_step = meta.step;
    const auto& lay = meta.run.at("layout");
    resume_note = "resumed from " + resume_dir + " (step " + std::to_string(start_step) +
                  ", saved on TP " + lay.at("tp").dump() + " x DP " + lay.at("dp").dump() +
                  (lay.at("zero").get<bool>() ? " with ZeRO" : "") + ")" +
                  (cfg.ckpt.load_optim ? "" : ", AdamW moments restarted at zero") +
                  (cfg.ckpt.load_data ? "" : ", data order restarted");
  }

  RunFiles files;
  std::unique_ptr<JsonlWriter> tax_steps;  // debug.interleave: {"step", "first", "ms": {mode: ms}}
  if (root) {
    files = open_run_dir(cfg, resume_dir.empty() ? -1 : start_step);
    if (!shadows.empty())
      tax_steps = std::make_unique<JsonlWriter>(cfg.run.out + "/tax_steps.jsonl", true);
    std::printf(
        "lockstep train: %s, %d rank(s) = TP %d x DP %d, microbatch %lld x %lld per rank, "
        "%d thread(s), %s, ISA %s, GEMM %s\n",
        cfg.run.determinism.c_str(), world.size(), grid.tp_size(), dp, static_cast<long long>(mb),
        static_cast<long long>(n_mb), kctx.threads, cfg.run.out.c_str(), isa_name(kctx.isa),
        gemm_impl_name(model.tp().gemm_impl()));
    std::printf(
        "  model: %lld layers, d_model %lld, %lld heads, ffn %lld, vocab %lld, context %lld, "
        "%lld parameters\n",
        static_cast<long long>(mcfg.layers), static_cast<long long>(mcfg.d_model),
        static_cast<long long>(mcfg.heads), static_cast<long long>(mcfg.ffn),
        static_cast<long long>(mcfg.vocab), static_cast<long long>(mcfg.context),
        static_cast<long long>(table.numel()));
    std::printf("  data: %s, %lld samples of %lld tokens, global batch %lld\n",
                dataset.source().describe().c_str(), static_cast<long long>(dataset.num_samples()),
                static_cast<long long>(ctx), static_cast<long long>(G));
    std::printf("  guarantees: %s\n", config::guarantees(cfg, world.size()).summary().c_str());
    if (!resume_note.empty()) std::printf("  %s\n", resume_note.c_str());
    if (!shadows.empty())
      std::printf(
          "  interleave: %s, one step of each in turn on its own state; trace and metrics are "
          "%s's, every mode's step times in tax_steps.jsonl\n",
          cfg.debug.interleave.c_str(), modes[0].c_str());
    std::fflush(stdout);
  }

  // ---- checkpoints ------------------------------------------------------------------------
  ckpt::AsyncSaver async_saver;
  auto save_checkpoint = [&](std::int64_t at, float lr_of_step) {
    ckpt::SaveOptions opt;
    opt.root = ckpt_root;
    opt.step = at;
    opt.keep = cfg.ckpt.keep;
    opt.kill_rank = at == kill_step ? kill_rank : -1;
    opt.fingerprint_version = state.fp_version();
    const auto run = run_state(cfg, grid, world.size(), kctx, at, sampler, lr_of_step);
    const auto t0 = Clock::now();
    if (cfg.ckpt.async) {
      async_saver.start(world, opt, state.checkpoint_pieces(), state.checkpoint_fingerprints(),
                        run);
      if (root)
        std::printf("checkpoint step %lld: writing in the background\n",
                    static_cast<long long>(at));
    } else {
      const std::string dir =
          ckpt::save(world, opt, state.checkpoint_pieces(), state.checkpoint_fingerprints(), run);
      if (root)
        std::printf("checkpoint step %lld: %s (%.2f s)\n", static_cast<long long>(at), dir.c_str(),
                    std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::fflush(stdout);
  };

  // ---- the loop ----------------------------------------------------------------------------
  PreemptionGuard preemption;
  const std::int64_t last_step =
      cfg.run.stop_at > 0 ? std::min(cfg.run.stop_at, cfg.run.steps) : cfg.run.steps;
  const auto t_start = Clock::now();
  double steady_seconds = 0;
  float last_loss = 0;
  std::int64_t step = start_step;
  while (step < last_step) {
    ++step;
    // This run's step, and with debug.interleave every mode's step in an order rotated by one
    // per step (so no mode always runs first or right after another); each timed alone.
    StepResult res;
    double secs = 0, cpu_secs = 0;
    std::vector<double> mode_ms(shadows.size() + 1);
    for (std::size_t k = 0; k < mode_ms.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(step)) % mode_ms.size();
      const auto t0 = Clock::now();
      const double cpu0 = process_cpu_seconds();
      if (i == 0) {
        res = job.run_step(step);
        secs = std::chrono::duration<double>(Clock::now() - t0).count();
        cpu_secs = process_cpu_seconds() - cpu0;
        mode_ms[0] = secs * 1e3;
      } else {
        shadows[i - 1]->run_step(step);
        mode_ms[i] = std::chrono::duration<double>(Clock::now() - t0).count() * 1e3;
      }
    }
    const float loss = res.loss, grad_norm = res.grad_norm, lr = res.lr;
    const Fingerprints& fp = res.fp;
    // metrics.jsonl, this rank's verify work of the step (steady clock): verify_ms = hashing
    // of state pieces and of the guard's parameters (StateTrace::take_hash_seconds, no
    // collectives); verify_wall_ms = everything around the two verify calls: that, the
    // rng/data fingerprints and the integer collectives (including waiting for other ranks);
    // verify_cpu_ms / cpu_ms = the hashing's / the step's CPU time (all threads), a ratio
    // that a loaded machine barely moves.
    const double verify_secs = res.verify_seconds;
    const double hash_secs = state.take_hash_seconds();
    const double hash_cpu_secs = state.take_hash_cpu_seconds();
    double iter_secs = 0;  // the ETA counts every interleaved mode's step
    for (const double ms : mode_ms) iter_secs += ms / 1e3;
    if (step > start_step + 1) steady_seconds += iter_secs;
    last_loss = loss;

    if (root) {
      TraceLine line;
      line.step = step;
      line.loss = loss;
      line.grad_norm = grad_norm;
      line.lr = lr;
      line.tokens = step * G * ctx;
      line.fp = fp;
      files.trace->write(line.to_json());
      const double tps = static_cast<double>(G * ctx) / secs;
      nlohmann::ordered_json mj;
      mj["step"] = step;
      mj["loss"] = loss;
      mj["grad_norm"] = grad_norm;
      mj["lr"] = lr;
      mj["ms"] = secs * 1e3;
      mj["verify_ms"] = hash_secs * 1e3;
      mj["verify_wall_ms"] = verify_secs * 1e3;
      mj["verify_cpu_ms"] = hash_cpu_secs * 1e3;  // verify_ms's work, CPU time of all threads
      mj["cpu_ms"] = cpu_secs * 1e3;              // the step's CPU time, all threads of rank 0
      mj["tokens_per_s"] = tps;
      files.metrics->write(mj.dump());
      if (tax_steps) {
        nlohmann::ordered_json tj;
        tj["step"] = step;
        tj["first"] = modes[static_cast<std::size_t>(step) % modes.size()];
        for (std::size_t i = 0; i < modes.size(); ++i) tj["ms"][modes[i]] = mode_ms[i];
        tax_steps->write(tj.dump());
      }
      const std::int64_t done = step - start_step;
      const double per_step =
          done > 1 ? steady_seconds / static_cast<double>(done - 1) : iter_secs;
      const double eta = per_step * static_cast<double>(last_step - step);
      std::printf(
          "step %lld/%lld | loss %s | grad_norm %.4f | lr %.3e | %.0f ms | %.0f tok/s | ETA %s\n",
          static_cast<long long>(step), static_cast<long long>(cfg.run.steps),
          dec_float(loss).c_str(), static_cast<double>(grad_norm), static_cast<double>(lr),
          secs * 1e3, tps, fmt_duration(eta).c_str());
      std::fflush(stdout);
    }
    int signal = 0;
    const bool preempted = preemption.requested(world, &signal);
    const bool stop = preempted || step == cfg.run.stop_at;
    if (cfg.ckpt.save &&
        (stop || step == cfg.run.steps || (cfg.ckpt.interval > 0 && step % cfg.ckpt.interval == 0)))
      save_checkpoint(step, lr);
    if (stop) {
      if (root)
        std::printf("%s: stopped after step %lld%s\n",
                    preempted ? ("signal " + std::to_string(signal)).c_str() : "run.stop_at",
                    static_cast<long long>(step),
                    cfg.ckpt.save ? "; continue with --set run.resume=auto" : "");
      break;
    }
  }
  const std::string async_dir = async_saver.finish(world);
  if (root && !async_dir.empty()) std::printf("checkpoint written: %s\n", async_dir.c_str());
  if (root && step > start_step) {
    const double total = std::chrono::duration<double>(Clock::now() - t_start).count();
    std::printf("done: %lld steps in %s, final loss %s, run directory %s\n",
                static_cast<long long>(step - start_step), fmt_duration(total).c_str(),
                dec_float(last_loss).c_str(), cfg.run.out.c_str());
  }
  return 0;
}

}  // namespace lockstep
