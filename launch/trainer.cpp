#include "launch/trainer.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "launch/gpt_dataset.hpp"
#include "launch/sampler.hpp"
#include "launch/validate.hpp"
#include "model/gpt.hpp"
#include "model/param_table.hpp"
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/grad_norm.hpp"
#include "optim/lr_schedule.hpp"
#include "parallel/dp_grad.hpp"
#include "parallel/zero.hpp"
#include "runtime/collectives.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/grid.hpp"
#include "verify/fingerprint.hpp"
#include "verify/trace.hpp"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

int default_threads(int world_size) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : world_size;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here);
}

ModelConfig model_config(const config::Config& c) {
  ModelConfig m;
  m.vocab = c.model.vocab;
  m.context = c.model.context;
  m.layers = c.model.layers;
  m.d_model = c.model.d_model;
  m.heads = c.model.heads;
  m.ffn = c.model.ffn;
  m.dropout = static_cast<float>(c.model.dropout);
  m.bias = c.model.bias;
  m.ln_eps = static_cast<float>(c.model.ln_eps);
  return m;
}

// Where each gradient term of each parameter sits in the flat per-rank gradient buffer.
struct FlatLayout {
  std::vector<std::vector<std::int64_t>> offset;  // [param][term]
  std::int64_t total = 0;

  explicit FlatLayout(const GradTerms& g) {
    for (const auto& terms : g) {
      offset.emplace_back();
      for (const auto& t : terms) {
        offset.back().push_back(total);
        total += t.numel();
      }
    }
  }
  void gather(const GradTerms& g, float* flat) const {
    for (std::size_t p = 0; p < g.size(); ++p)
      for (std::size_t t = 0; t < g[p].size(); ++t)
        std::copy_n(g[p][t].data<float>(), g[p][t].numel(), flat + offset[p][t]);
  }
};

// One slice of optimizer work: the elements of one parameter this rank updates.
struct UpdateSlice {
  float* param;
  float* grad;
  float* m;
  float* v;
  std::int64_t n;
  bool decay;          // weight decay (2-D weights)
  bool count_in_norm;  // counted by this rank in the global norm (replicas count once)
};

// Gradient synchronisation and optimizer state for one rank: microbatch subtrees ->
// canonical DP reduction (allreduce, or ZeRO-1 reduce-scatter) -> terms combined -> the
// update slices (whole local parameters, or this DP rank's segments under ZeRO) -> after
// AdamW, ZeRO allgathers the parameters. Both paths give identical bits (parallel/zero.hpp).
class GradSync {
 public:
  GradSync(Gpt& model, const Grid& grid, Determinism mode, bool zero)
      : model_(model),
        grid_(grid),
        zero_(zero),
        layout_(model.grads()),
        part_(numels(model), term_counts(model), grid.dp_size(), grid.dp_rank()),
        reducer_(zero ? part_.grad_block() * grid.dp_size() : layout_.total, mode) {
    const ParamTable& table = model.table();
    auto& params = model.params();
    flat_.resize(
        static_cast<std::size_t>(zero ? part_.grad_block() * grid.dp_size() : layout_.total));
    reduced_.resize(static_cast<std::size_t>(zero ? part_.grad_block() : layout_.total));
    for (std::size_t p = 0; p < params.size(); ++p) {
      const std::int64_t n = zero ? part_.owned(p) : params[p].numel();
      const std::int64_t first = zero ? part_.first(p) : 0;
      grad_.emplace_back(static_cast<std::size_t>(zero ? part_.segment(p) : n));
      m_.emplace_back(static_cast<std::size_t>(n));
      v_.emplace_back(static_cast<std::size_t>(n));
      const bool counted = table[p].partition_dim >= 0 || grid.tp_rank() == 0;
      slices_.push_back({params[p].data<float>() + first, grad_.back().data(), m_.back().data(),
                         v_.back().data(), n, table[p].weight_decay, counted});
    }
    if (zero) {
      param_block_.resize(static_cast<std::size_t>(part_.param_block()));
      all_params_.resize(static_cast<std::size_t>(part_.param_block() * grid.dp_size()));
    }
  }

  void begin_step() { reducer_.reset(); }

  void push_microbatch() {
    const GradTerms& g = model_.grads();
    if (zero_) {
      std::vector<std::vector<const float*>> ptrs;
      for (const auto& terms : g) {
        ptrs.emplace_back();
        for (const auto& t : terms) ptrs.back().push_back(t.data<float>());
      }
      part_.pack_grads(ptrs, flat_.data());
    } else {
      layout_.gather(g, flat_.data());
    }
    reducer_.push_microbatch(flat_.data());
  }

  void reduce() {
    if (zero_)
      reducer_.reduce_scatter(grid_.dp_comm(), reduced_);
    else
      reducer_.allreduce(grid_.dp_comm(), reduced_);
    for (std::size_t p = 0; p < slices_.size(); ++p) {
      std::vector<const float*> terms;
      const int nt = static_cast<int>(layout_.offset[p].size());
      for (int t = 0; t < nt; ++t)
        terms.push_back(reduced_.data() + (zero_ ? part_.grad_offset(p, t) : layout_.offset[p][t]));
      combine_grad_terms(terms, slices_[p].n, slices_[p].grad);
    }
  }

  // Exact global norm: squares summed exactly over this rank's slices, then over DP (ZeRO
  // segments) and TP (shards) with integer additions: the same bits on every layout.
  float grad_norm() const {
    SquareSumAccumulator sq;
    for (const auto& sl : slices_)
      if (sl.count_in_norm) sq.add(std::span<const float>(sl.grad, sl.n));
    if (zero_) allreduce_square_sum(grid_.dp_comm(), sq);
    allreduce_square_sum(grid_.tp_comm(), sq);
    return sq.norm();
  }

  std::vector<UpdateSlice>& slices() { return slices_; }

  void publish_params() {
    if (!zero_) return;
    std::vector<const float*> src;
    std::vector<float*> dst;
    for (auto& p : model_.params()) src.push_back(p.data<float>()), dst.push_back(p.data<float>());
    part_.pack_params(src, param_block_.data());
    allgather(grid_.dp_comm(), param_block_, all_params_);
    part_.unpack_params(all_params_.data(), dst);
  }

 private:
  static std::vector<std::int64_t> numels(Gpt& m) {
    std::vector<std::int64_t> n;
    for (const auto& p : m.params()) n.push_back(p.numel());
    return n;
  }
  static std::vector<int> term_counts(Gpt& m) {
    std::vector<int> t;
    for (const auto& terms : m.grads()) t.push_back(static_cast<int>(terms.size()));
    return t;
  }

  Gpt& model_;
  const Grid& grid_;
  bool zero_;
  FlatLayout layout_;
  ZeroPartition part_;
  GradReducer reducer_;
  std::vector<float> flat_, reduced_, param_block_, all_params_;
  std::vector<std::vector<float>> grad_, m_, v_;
  std::vector<UpdateSlice> slices_;
};

struct RunFiles {
  std::unique_ptr<JsonlWriter> trace, metrics;
};

RunFiles open_run_dir(const config::Config& cfg) {
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
  f.trace = std::make_unique<JsonlWriter>(cfg.run.out + "/trace.jsonl", true);
  f.metrics = std::make_unique<JsonlWriter>(cfg.run.out + "/metrics.jsonl", true);
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

}  // namespace

int train(const config::Config& cfg_in, Context& mpi) {
  config::Config cfg = cfg_in;
  const Communicator& world = mpi.world();
  const bool root = world.rank() == 0;
  config::validate_or_throw(cfg, world.size());
  if (cfg.run.threads == 0) cfg.run.threads = default_threads(world.size());

  const Determinism mode = parse_determinism(cfg.run.determinism);
  const KernelCtx kctx{parse_isa(cfg.run.isa), static_cast<int>(cfg.run.threads),
                       static_cast<int>(cfg.numerics.reduce_block)};
  validate(kctx);
  Grid grid = Grid::create(world, static_cast<int>(cfg.parallel.tp));
  mpi.set_tag(grid.tag());
  const int dp = grid.dp_size(), dp_rank = grid.dp_rank();

  // ---- data ------------------------------------------------------------------------------
  const std::int64_t G = cfg.data.global_batch, ctx = cfg.model.context;
  const std::int64_t mb = cfg.parallel.microbatch, per_rank = G / dp, n_mb = per_rank / mb;
  data::DataConfig dcfg;
  dcfg.path = cfg.data.path;
  dcfg.global_batch = G;
  dcfg.context = ctx;
  dcfg.seed = static_cast<std::uint64_t>(cfg.run.seed);
  dcfg.synthetic_seed = dcfg.seed;
  data::GptDataset dataset(data::open_token_source(dcfg), ctx, cfg.model.vocab);
  data::Sampler sampler({dataset.num_samples(), G, dcfg.seed});

  // ---- model and optimizer state ---------------------------------------------------------
  const ModelConfig mcfg = model_config(cfg);
  Gpt model(mcfg, grid, mode, kctx);
  model.init(static_cast<std::uint64_t>(cfg.run.seed));
  const ParamTable& table = model.table();
  std::vector<Tensor>& params = model.params();
  GradSync sync(model, grid, mode, cfg.parallel.zero);

  AdamWConfig acfg;
  acfg.beta1 = cfg.optim.beta1;
  acfg.beta2 = cfg.optim.beta2;
  acfg.eps = cfg.optim.eps;
  acfg.weight_decay = cfg.optim.weight_decay;
  LrScheduleConfig scfg;
  scfg.lr = cfg.optim.lr;
  scfg.min_lr = cfg.optim.min_lr;
  scfg.warmup = cfg.optim.warmup;
  scfg.total_steps = cfg.run.steps;
  scfg.schedule = parse_lr_schedule(cfg.optim.schedule);
  validate(acfg);
  validate(scfg);

  RunFiles files;
  if (root) {
    files = open_run_dir(cfg);
    std::printf(
        "lockstep train: %s, %d rank(s) = TP %d x DP %d, microbatch %lld x %lld per rank, "
        "%d thread(s), %s, ISA %s\n",
        cfg.run.determinism.c_str(), world.size(), grid.tp_size(), dp, static_cast<long long>(mb),
        static_cast<long long>(n_mb), kctx.threads, cfg.run.out.c_str(), isa_name(kctx.isa));
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
    std::fflush(stdout);
  }

  // ---- the loop ----------------------------------------------------------------------------
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(mb * ctx)), labels(tokens.size());
  std::vector<std::int64_t> seq_ids(static_cast<std::size_t>(mb));
  const float loss_scale = 1.0f / static_cast<float>(G * ctx);
  std::vector<std::uint64_t> fps(params.size());
  const auto t_start = Clock::now();
  double steady_seconds = 0;
  float last_loss = 0;
  for (std::int64_t step = 1; step <= cfg.run.steps; ++step) {
    const auto t0 = Clock::now();
    sync.begin_step();
    BinaryCounter loss_counter(1);
    for (std::int64_t m = 0; m < n_mb; ++m) {
      sampler.fill_microbatch(dataset, dp, dp_rank, mb, m, tokens.data(), labels.data());
      for (std::int64_t j = 0; j < mb; ++j) seq_ids[j] = dp_rank * per_rank + m * mb + j;
      const float loss_sum = model.forward_backward(tokens.data(), labels.data(), seq_ids.data(),
                                                    mb, step, loss_scale);
      sync.push_microbatch();
      loss_counter.push(&loss_sum);
    }
    float loss_sum = 0;
    loss_counter.result(&loss_sum);
    allreduce_sum(mode, grid.dp_comm(), std::span<float>(&loss_sum, 1));
    const float loss = loss_sum / static_cast<float>(G * ctx);

    sync.reduce();  // canonical DP reduction, terms combined: this rank's update slices
    const float grad_norm = sync.grad_norm();
    if (cfg.optim.clip > 0) {
      const ClipResult clip = clip_coefficient(grad_norm, static_cast<float>(cfg.optim.clip));
      if (clip.clipped)
        for (auto& sl : sync.slices()) apply_clip(clip, std::span<float>(sl.grad, sl.n));
    }
    const float lr = lr_at(scfg, step);
    for (auto& sl : sync.slices())
      adamw_step(kctx, AdamWHyper::at(acfg, lr, step, sl.decay), std::span<float>(sl.param, sl.n),
                 std::span<const float>(sl.grad, sl.n), std::span<float>(sl.m, sl.n),
                 std::span<float>(sl.v, sl.n));
    sync.publish_params();  // ZeRO: allgather the updated parameters
    sampler.advance();

    // Layout-invariant fingerprints: shards sum over TP; replicated tensors count once.
    for (std::size_t p = 0; p < params.size(); ++p)
      fps[p] = (table[p].partition_dim >= 0 || grid.tp_rank() == 0)
                   ? fingerprint("param/" + table[p].name, params[p])
                   : 0;
    allreduce_u64(grid.tp_comm(), fps, IntOp::sum);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step > 1) steady_seconds += secs;
    last_loss = loss;

    if (root) {
      TraceLine line;
      line.step = step;
      line.loss = loss;
      line.grad_norm = grad_norm;
      line.lr = lr;
      line.tokens = step * G * ctx;
      for (std::size_t p = 0; p < params.size(); ++p)
        line.fp.emplace_back("param/" + table[p].name, fps[p]);
      files.trace->write(line.to_json());
      const double tps = static_cast<double>(G * ctx) / secs;
      nlohmann::ordered_json mj;
      mj["step"] = step;
      mj["loss"] = loss;
      mj["grad_norm"] = grad_norm;
      mj["lr"] = lr;
      mj["ms"] = secs * 1e3;
      mj["tokens_per_s"] = tps;
      files.metrics->write(mj.dump());
      const double eta = (step > 1 ? steady_seconds / static_cast<double>(step - 1) : secs) *
                         static_cast<double>(cfg.run.steps - step);
      std::printf(
          "step %lld/%lld | loss %s | grad_norm %.4f | lr %.3e | %.0f ms | %.0f tok/s | ETA %s\n",
          static_cast<long long>(step), static_cast<long long>(cfg.run.steps),
          dec_float(loss).c_str(), static_cast<double>(grad_norm), static_cast<double>(lr),
          secs * 1e3, tps, fmt_duration(eta).c_str());
      std::fflush(stdout);
    }
  }
  if (root && cfg.run.steps > 0) {
    const double total = std::chrono::duration<double>(Clock::now() - t_start).count();
    std::printf("done: %lld steps in %s, final loss %s, run directory %s\n",
                static_cast<long long>(cfg.run.steps), fmt_duration(total).c_str(),
                dec_float(last_loss).c_str(), cfg.run.out.c_str());
  }
  return 0;
}

}  // namespace lockstep
