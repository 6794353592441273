#include "launch/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "data/sampler.hpp"
#include "launch/train/exit_status.hpp"
#include "launch/train/memory_estimate.hpp"
#include "launch/train/preemption.hpp"
#include "launch/train/run_lock.hpp"
#include "launch/train/state_trace.hpp"
#include "launch/train/train_job.hpp"
#include "launch/train/validate.hpp"
#include "lockstep/build_info.hpp"
#include "model/gpt.hpp"
#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/grid.hpp"
#include "runtime/median.hpp"
#include "runtime/watchdog.hpp"
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
    std::visit(
        [&](const auto& field) {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(field)>, config::TextField>)
            j[key.name] = field.get();
          else
            j[key.name] = *field;
        },
        key.field(cfg));
  return j;
}

// meta.json["run"]: everything besides the tensors that the next step depends on, and what
// a reader needs to know about the run that saved it.
nlohmann::ordered_json run_state(const config::Config& cfg, const Grid& grid, int world_size,
                                 const KernelCtx& kctx, std::int64_t step,
                                 const data::Sampler& sampler, std::int64_t skipped_steps,
                                 float lr_of_step) {
  nlohmann::ordered_json r;
  r["step"] = step;
  r["consumed_samples"] = sampler.state().consumed_samples;
  r["contract"] = {{"determinism", determinism_name(cfg.run.determinism)},
                   {"reduce_block", cfg.numerics.reduce_block},
                   {"tree", std::string(enum_name(cfg.numerics.tree))}};
  r["layout"] = {{"world", world_size},       {"tp", grid.tp_size()},
                 {"dp", grid.dp_size()},      {"pp", grid.pp_size()},
                 {"zero", cfg.parallel.zero}, {"microbatch", cfg.parallel.microbatch},
                 {"threads", kctx.threads},   {"isa", isa_name(kctx.isa)}};
  r["sampler"] = sampler.to_json();
  r["skipped_steps"] = skipped_steps;
  r["rng"] = {{"seed", cfg.run.seed}, {"next_step", step + 1}};
  r["lr"] = {{"last", lr_of_step},
             {"schedule", lr_schedule_name(cfg.optim.schedule.schedule)},
             {"total_steps", cfg.run.steps}};
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
  // A checkpoint made before numerics.tree existed was made under the pow2 tree.
  auto saved_value = [&](const std::string& key) -> nlohmann::json {
    if (old.contains(key)) return old.at(key);
    if (key == "numerics.tree") return std::string(enum_name(TreeShape::pow2));
    return now.at(key);
  };
  auto differs = [&](const std::string& key) { return saved_value(key) != now.at(key); };
  auto both = [&](const std::string& key) {
    return key + " = " + saved_value(key).dump() + " in the checkpoint, " + now.at(key).dump() +
           " now";
  };
  // Tensor shapes (vocab, context, layers, d_model, ffn, bias) are checked per tensor by
  // ckpt::load, which names the tensor and both shapes; these change no shape:
  for (const char* key : {"model.heads", "model.ln_eps"})
    check(!differs(key), "cannot resume: the model differs: " + both(key),
          "resume with the model config the checkpoint was saved with (lockstep ckpt inspect)");
  for (const char* key : {"run.determinism", "numerics.reduce_block", "numerics.tree"}) {
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

// ---- resume: every piece of state from the checkpoint, resliced to this layout -----------
struct Resumed {
  std::string dir;  // empty: a fresh run
  std::int64_t step = 0;
  std::string note;  // the banner's line
};

Resumed resume(const config::Config& cfg, TrainJob& job, const Communicator& world) {
  watchdog::Phase phase("resume load");
  Resumed r;
  const ckpt::Meta meta = ckpt::agree_resume(world, cfg.run.resume, cfg.run.out + "/checkpoints");
  r.dir = meta.dir;
  if (r.dir.empty()) return r;
  check_resume(meta.run, cfg, world.rank() == 0);
  ckpt::load(world, r.dir, meta, job.state().checkpoint_pieces(),
             cfg.ckpt.load_optim ? std::vector<std::string>{} : std::vector<std::string>{"param/"});
  if (cfg.ckpt.load_data) job.sampler().restore_json(meta.run.at("sampler"));
  job.set_skipped_steps(meta.run.value("skipped_steps", std::int64_t{0}));
  r.step = meta.step;
  const auto& lay = meta.run.at("layout");
  r.note = "resumed from " + r.dir + " (step " + std::to_string(r.step) + ", saved on TP " +
           lay.at("tp").dump() + " x DP " + lay.at("dp").dump() +
           (lay.value("pp", 1) > 1 ? " x PP " + lay.at("pp").dump() : "") +
           (lay.at("zero").get<bool>() ? " with ZeRO" : "") + ")" +
           (cfg.ckpt.load_optim ? "" : ", AdamW moments restarted at zero") +
           (cfg.ckpt.load_data ? "" : ", data order restarted");
  return r;
}

// ---- the start-up lines (rank 0) ----------------------------------------------------------
// "pipeline: 2 stages of 2 layers, 1f1b, 8 microbatches per step, bubble 11% ...", with a
// warning and the microbatch count that brings the bubble under 25% when it is above.
std::string pipeline_line(const config::Config& cfg, const TrainJob& job) {
  const int p = job.grid().pp_size();
  const std::int64_t m = job.microbatches();
  const double bubble = pipeline_bubble(p, m);
  std::string layers;  // "2", or parallel.pp_layers' "1 + 3"
  for (const std::int64_t n : cfg.parallel.pp_layers.counts)
    layers += (layers.empty() ? "" : " + ") + std::to_string(n);
  if (layers.empty()) layers = std::to_string(cfg.model.layers / p);
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "pipeline: %d stages of %s layers, %s, %lld microbatches per step, bubble %.0f%% "
                "(model (p-1)/(m+p-1)), stage 0 holds %lld microbatches of activations",
                p, layers.c_str(), std::string(enum_name(cfg.parallel.schedule)).c_str(),
                static_cast<long long>(m), 100.0 * bubble,
                static_cast<long long>(pipeline_slots(cfg.parallel.schedule, p, 0, m)));
  std::string line = buf;
  if (bubble > 0.25)
    line += "\n  warning: the pipeline idles " +
            std::to_string(static_cast<int>(100 * bubble + 0.5)) + "% of the step; " +
            std::to_string(microbatches_for_bubble(p, 0.25)) +
            " or more microbatches per step and DP rank bring it under 25% (smaller "
            "parallel.microbatch or larger data.global_batch)";
  return line;
}

void print_banner(const config::Config& cfg, const TrainJob& job, int world_size,
                  const Resumed& resumed, const std::string& driver_line) {
  const Grid& grid = job.grid();
  const ModelConfig& m = job.model().config();
  const std::string pp = grid.pp_size() > 1 ? " x PP " + std::to_string(grid.pp_size()) : "";
  std::printf(
      "lockstep train: %s, %d rank(s) = TP %d x DP %d%s, microbatch %lld (%lld passes per rank), "
      "%d thread(s), %s, ISA %s, GEMM %s\n",
      determinism_name(cfg.run.determinism), world_size, grid.tp_size(), grid.dp_size(), pp.c_str(),
      static_cast<long long>(job.microbatch()), static_cast<long long>(job.microbatches()),
      job.kctx().threads, cfg.run.out.c_str(), isa_name(job.kctx().isa),
      gemm_impl_name(job.model().tp().gemm_impl()));
  std::printf(
      "  model: %lld layers, d_model %lld, %lld heads, ffn %lld, vocab %lld%s, context %lld, "
      "%lld parameters\n",
      static_cast<long long>(m.layers), static_cast<long long>(m.d_model),
      static_cast<long long>(m.heads), static_cast<long long>(m.ffn),
      static_cast<long long>(m.vocab),
      m.padded_vocab() == m.vocab
          ? ""
          : (" (padded to " + std::to_string(m.padded_vocab()) + ")").c_str(),
      static_cast<long long>(m.context), static_cast<long long>(job.model().table().numel()));
  std::printf("  data: %s, %lld samples of %lld tokens, global batch %lld\n",
              job.dataset().source().describe().c_str(),
              static_cast<long long>(job.dataset().num_samples()),
              static_cast<long long>(cfg.model.context),
              static_cast<long long>(cfg.data.global_batch));
  if (grid.pp_size() > 1) std::printf("  %s\n", pipeline_line(cfg, job).c_str());
  for (const auto& line : config::memory_lines(cfg, world_size))
    std::printf("  %s\n", line.c_str());
  std::printf("  guarantees: %s\n", config::guarantees(cfg, world_size).summary().c_str());
  if (!resumed.note.empty()) std::printf("  %s\n", resumed.note.c_str());
  if (!driver_line.empty()) std::printf("  %s\n", driver_line.c_str());
  std::fflush(stdout);
}

// ---- checkpoints: when, and the save itself (synchronous or in the background) -------------
class Checkpointer {
 public:
  Checkpointer(const config::Config& cfg, TrainJob& job, const Communicator& world)
      : cfg_(cfg), job_(job), world_(world) {}

  bool due(std::int64_t step, bool stop) const {
    return cfg_.ckpt.save && (stop || step == cfg_.run.steps ||
                              (cfg_.ckpt.interval > 0 && step % cfg_.ckpt.interval == 0));
  }

  void save(std::int64_t at, float lr_of_step) {
    watchdog::Phase phase("checkpoint save");
    ckpt::SaveOptions opt;
    opt.root = cfg_.run.out + "/checkpoints";
    opt.step = at;
    opt.keep = cfg_.ckpt.keep;
    opt.kill_rank = at == cfg_.debug.kill_in_save.step ? cfg_.debug.kill_in_save.rank : -1;
    StateTrace& state = job_.state();
    opt.fingerprint_version = state.fp_version();
    const auto run = run_state(cfg_, job_.grid(), world_.size(), job_.kctx(), at, job_.sampler(),
                               job_.skipped_steps(), lr_of_step);
    const bool root = world_.rank() == 0;
    const auto t0 = Clock::now();
    if (cfg_.ckpt.async) {
      async_.start(world_, opt, state.checkpoint_pieces(), state.checkpoint_fingerprints(), run);
      if (root)
        std::printf("checkpoint step %lld: writing in the background\n",
                    static_cast<long long>(at));
    } else {
      const std::string dir =
          ckpt::save(world_, opt, state.checkpoint_pieces(), state.checkpoint_fingerprints(), run);
      if (root)
        std::printf("checkpoint step %lld: %s (%.2f s)\n", static_cast<long long>(at), dir.c_str(),
                    std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::fflush(stdout);
  }

  // Waits for a background save.
  void finish() {
    watchdog::Phase phase("checkpoint save");
    const std::string dir = async_.finish(world_);
    if (world_.rank() == 0 && !dir.empty()) std::printf("checkpoint written: %s\n", dir.c_str());
  }

 private:
  const config::Config& cfg_;
  TrainJob& job_;
  const Communicator& world_;
  ckpt::AsyncSaver async_;
};

// ---- the ranks' compute and sync times (rank 0), for the run's closing line ----------------
// compute_ms and sync_ms by world rank (StepResult) of the run's last kWindow steps after its
// first (the first alone when it is the only one). summary(): their medians per rank, the
// fastest and the slowest rank's compute and the range of the sync, where the others wait for
// the slowest: e.g. "ranks: compute 15020 ms (rank 1) to 15850 ms (rank 0, +5.5%), gradient
// sync 41.3 to 872 ms (medians of 3 steps)"; empty when no step had them (one rank).
class RankTimes {
 public:
  static constexpr std::size_t kWindow = 100;
  void add(const std::vector<float>& compute, const std::vector<float>& sync, bool first) {
    if (first) {
      first_ = {compute, sync};
      return;
    }
    steps_.push_back({compute, sync});
    if (steps_.size() > kWindow) steps_.pop_front();
  }
  std::string summary() const {
    std::deque<Times> rows = steps_;
    if (rows.empty() && !first_.compute.empty()) rows.push_back(first_);
    if (rows.empty()) return {};
    const std::size_t ranks = rows[0].compute.size();
    std::vector<double> c(ranks), y(ranks);
    for (std::size_t k = 0; k < ranks; ++k) {
      c[k] = median_of(rows, &Times::compute, k);
      y[k] = median_of(rows, &Times::sync, k);
    }
    const auto lo = std::ranges::min_element(c) - c.begin();
    const auto hi = std::ranges::max_element(c) - c.begin();
    char line[256];
    std::snprintf(line, sizeof line,
                  "ranks: compute %s ms (rank %td) to %s ms (rank %td, %+.1f%%), gradient sync %s "
                  "to %s ms (medians of %zu step%s)",
                  ms(c[lo]).c_str(), lo, ms(c[hi]).c_str(), hi,
                  c[lo] > 0 ? 100.0 * (c[hi] / c[lo] - 1.0) : 0.0, ms(std::ranges::min(y)).c_str(),
                  ms(std::ranges::max(y)).c_str(), rows.size(), rows.size() == 1 ? "" : "s");
    return line;
  }

 private:
  struct Times {
    std::vector<float> compute, sync;  // by world rank
  };
  static std::string ms(double v) {  // whole ms from 100 on, tenths below
    char b[32];
    std::snprintf(b, sizeof b, v >= 100.0 ? "%.0f" : "%.1f", v);
    return b;
  }
  // Median of rank k's values (the mean of the two middle ones for an even count).
  static double median_of(const std::deque<Times>& rows, std::vector<float> Times::*field,
                          std::size_t k) {
    std::vector<double> v;
    for (const Times& t : rows) v.push_back((t.*field)[k]);
    return median(std::move(v));
  }
  Times first_;
  std::deque<Times> steps_;
};

// ---- each step's lines: trace.jsonl, metrics.jsonl and the progress line (rank 0) ---------
class StepLog {
 public:
  StepLog(const config::Config& cfg, RunFiles files, std::int64_t start_step,
          std::int64_t last_step)
      : cfg_(cfg), files_(std::move(files)), start_(start_step), last_(last_step) {}

  // Every rank calls it (the state trace's hash clocks are taken and reset on each).
  void write(std::int64_t step, const StepTiming& t, StateTrace& state, bool root) {
    // metrics.jsonl, this rank's verify work of the step (steady clock): verify_ms = hashing
    // of state pieces and of the guard's parameters (StateTrace::take_hash_seconds, no
    // collectives); verify_wall_ms = everything around the two verify calls: that, the
    // rng/data fingerprints and the integer collectives (including waiting for other ranks);
    // verify_cpu_ms / cpu_ms = the hashing's / the step's CPU time (all threads), a ratio
    // that a loaded machine barely moves.
    const double hash_secs = state.take_hash_seconds();
    const double hash_cpu_secs = state.take_hash_cpu_seconds();
    if (step > start_ + 1) steady_seconds_ += t.loop_seconds;
    last_loss_ = t.result.loss;
    if (!root) return;
    const StepResult& r = t.result;
    const std::int64_t tokens = cfg_.data.global_batch * cfg_.model.context;
    TraceLine line;
    line.step = step;
    line.loss = r.loss;
    line.grad_norm = r.grad_norm;
    line.lr = r.lr;
    line.tokens = step * tokens;
    line.fp = r.fp;
    line.skipped = r.skipped;
    files_.trace->write(line.to_json());
    const double tps = static_cast<double>(tokens) / t.seconds;
    nlohmann::ordered_json mj;
    mj["step"] = step;
    mj["loss"] = r.loss;
    mj["grad_norm"] = r.grad_norm;
    mj["lr"] = r.lr;
    mj["ms"] = t.seconds * 1e3;
    mj["verify_ms"] = hash_secs * 1e3;
    mj["verify_wall_ms"] = r.verify_seconds * 1e3;
    mj["verify_cpu_ms"] = hash_cpu_secs * 1e3;  // verify_ms's work, CPU time of all threads
    mj["cpu_ms"] = t.cpu_seconds * 1e3;         // the step's CPU time, all threads of rank 0
    mj["tokens_per_s"] = tps;
    if (!r.compute_ms.empty()) {  // by world rank
      mj["compute_ms"] = r.compute_ms;
      mj["sync_ms"] = r.sync_ms;
      mj["rank_ms"] = r.rank_ms;
      ranks_.add(r.compute_ms, r.sync_ms, step == start_ + 1);
    }
    if (!r.pipeline_wait_ms.empty()) {  // by world rank
      mj["pipeline_wait_ms"] = r.pipeline_wait_ms;
      mj["peak_rss_mib"] = r.peak_rss_mib;
      mj["activation_mib"] = r.activation_mib;
    }
    files_.metrics->write(mj.dump());
    const std::int64_t done = step - start_;
    const double per_step =
        done > 1 ? steady_seconds_ / static_cast<double>(done - 1) : t.loop_seconds;
    const double eta = per_step * static_cast<double>(last_ - step);
    std::printf(
        "step %lld/%lld | loss %s | grad_norm %.4f | lr %.3e | %.0f ms | %.0f tok/s | ETA %s\n",
        static_cast<long long>(step), static_cast<long long>(cfg_.run.steps),
        dec_float(r.loss).c_str(), static_cast<double>(r.grad_norm), static_cast<double>(r.lr),
        t.seconds * 1e3, tps, fmt_duration(eta).c_str());
    std::fflush(stdout);
  }

  float last_loss() const { return last_loss_; }
  std::string rank_summary() const { return ranks_.summary(); }

 private:
  const config::Config& cfg_;
  RunFiles files_;
  std::int64_t start_, last_;
  double steady_seconds_ = 0;
  float last_loss_ = 0;
  RankTimes ranks_;
};

// ---- the run directory's lock and the non-finite guard's lines ----------------------------
// This process's command line (/proc/self/cmdline), for the lock's holder line.
std::string own_command() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> argv;
  for (std::size_t at = 0; at < raw.size();) {
    const std::size_t end = raw.find('\0', at);
    argv.push_back(raw.substr(at, end - at));
    at = end == std::string::npos ? raw.size() : end + 1;
  }
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return cmd;
}

struct RunDirLock {
  std::unique_ptr<RunLock> lock;  // rank 0's
  bool held = false;              // on every rank: whether rank 0 got it
};

// Collective: rank 0 takes run.out/.lock; when another job holds it, rank 0 prints the one
// line naming the holder and every rank learns that the job must end (ExitStatus::locked).
RunDirLock lock_run_dir(const std::string& run_out, const Communicator& world) {
  RunDirLock r;
  std::string refusal;
  if (world.rank() == 0) {
    try {
      r.lock = std::make_unique<RunLock>(run_out, own_command());
    } catch (const Error& e) {
      refusal = e.what();
    }
  }
  r.held = allreduce_u64(world, refusal.empty() ? 0 : 1, IntOp::max) == 0;
  if (!refusal.empty()) {
    std::fprintf(stderr, "lockstep: error: %s\n", refusal.c_str());
    std::fflush(stderr);
  }
  return r;
}

// The guard's line for a step whose loss or gradient was not finite (rank 0). True when the
// guard stopped the step (the job ends: nothing of it was applied or is saved).
bool report_nonfinite(std::int64_t step, const StepResult& r, bool root) {
  if (!r.nonfinite) return false;
  const std::string what = r.nonfinite->describe(step, r.loss, r.grad_norm);
  if (root && r.stopped)
    std::fprintf(stderr,
                 "lockstep: stopped: non-finite %s; nothing of the step was applied and no "
                 "checkpoint is written (hint: lower optim.lr or raise optim.warmup and resume "
                 "from the last checkpoint, or set optim.on_nonfinite=skip)\n",
                 what.c_str());
  else if (root)
    std::fprintf(stderr, "lockstep: warning: skipped non-finite %s (optim.on_nonfinite=skip)\n",
                 what.c_str());
  std::fflush(stderr);
  return r.stopped;
}

}  // namespace

void StepDriver::start(const TrainJob&, const std::string&) {}
std::string StepDriver::banner() const {
  return {};
}
StepTiming StepDriver::step(TrainJob& job, std::int64_t step) {
  StepTiming t;
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_seconds();
  t.result = job.run_step(step);
  t.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  t.cpu_seconds = process_cpu_seconds() - cpu0;
  t.loop_seconds = t.seconds;
  return t;
}
void StepDriver::finish_step(std::int64_t, const StepTiming&) {}

config::Config with_threads_resolved(const config::Config& cfg, int world_size) {
  config::Config c = cfg;
  if (c.run.threads == 0) c.run.threads = default_threads(world_size);
  return c;
}

int train(const config::Config& cfg_in, Context& mpi) {
  StepDriver alone;
  return train(cfg_in, mpi, alone);
}

int train(const config::Config& cfg_in, Context& mpi, StepDriver& driver) {
  const Communicator& world = mpi.world();
  const bool root = world.rank() == 0;
  config::validate_or_throw(cfg_in, world.size());
  const config::Config cfg = with_threads_resolved(cfg_in, world.size());
  const auto lock = lock_run_dir(cfg.run.out, world);  // before anything reads or writes it
  if (!lock.held) return exit_code(ExitStatus::locked);
  TrainJob job(cfg, mpi);
  const watchdog::Session watchdog(world, mpi.tag(), cfg.run.step_timeout.setting(),
                                   exit_code(ExitStatus::hung));  // run.step_timeout
  const Resumed resumed = resume(cfg, job, world);
  driver.start(job, resumed.dir);
  RunFiles files;
  if (root) files = open_run_dir(cfg, resumed.dir.empty() ? -1 : resumed.step);
  if (root) print_banner(cfg, job, world.size(), resumed, driver.banner());

  Checkpointer checkpoints(cfg, job, world);
  PreemptionGuard preemption;
  const std::int64_t last_step =
      cfg.run.stop_at > 0 ? std::min(cfg.run.stop_at, cfg.run.steps) : cfg.run.steps;
  StepLog log(cfg, std::move(files), resumed.step, last_step);
  const auto t_start = Clock::now();
  std::int64_t step = resumed.step;
  ExitStatus status = ExitStatus::finished;
  while (step < last_step) {
    ++step;
    const StepTiming t = driver.step(job, step);
    watchdog::record_step_seconds(t.loop_seconds);  // the automatic timeout's median
    if (report_nonfinite(step, t.result, root)) {
      status = ExitStatus::nonfinite;
      break;
    }
    log.write(step, t, job.state(), root);
    driver.finish_step(step, t);
    int signal = 0;
    const bool preempted = preemption.requested(world, &signal);
    const bool stop = preempted || step == cfg.run.stop_at;
    if (checkpoints.due(step, stop)) checkpoints.save(step, t.result.lr);
    if (stop) {
      if (root)
        std::printf("%s: stopped after step %lld%s\n",
                    preempted ? ("signal " + std::to_string(signal)).c_str() : "run.stop_at",
                    static_cast<long long>(step),
                    cfg.ckpt.save ? "; continue with --set run.resume=auto" : "");
      if (preempted) status = ExitStatus::preempted;
      break;
    }
  }
  checkpoints.finish();
  if (root && status != ExitStatus::nonfinite && step > resumed.step) {
    const double total = std::chrono::duration<double>(Clock::now() - t_start).count();
    const std::string ranks = log.rank_summary();  // empty for one rank
    if (!ranks.empty()) std::printf("%s\n", ranks.c_str());
    std::printf("done: %lld steps in %s, final loss %s, run directory %s\n",
                static_cast<long long>(step - resumed.step), fmt_duration(total).c_str(),
                dec_float(log.last_loss()).c_str(), cfg.run.out.c_str());
  }
  return exit_code(status);
}

}  // namespace lockstep
