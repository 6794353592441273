#include "launch/train/train_job.hpp"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "optim/clip.hpp"
#include "runtime/collectives.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

// debug.bitflip = RANK:STEP:TENSOR ("param/<name>" or "<name>"): the index of TENSOR.
std::size_t bitflip_param(const std::string& spec, const ParamTable& table) {
  std::string name = spec.substr(spec.find(':', spec.find(':') + 1) + 1);
  if (name.rfind("param/", 0) == 0) name = name.substr(6);
  check(table.contains(name),
        "debug.bitflip names the tensor '" + name + "', which the model lacks",
        "use a parameter name such as " + table[0].name + " (see trace.jsonl's param/ keys)");
  return table.index_of(name);
}

// Records the AdamW update of one slice as the op "<param>.adam.update" (inputs: parameter,
// gradient, m, v before the update; output: the parameter after).
void traced_adamw(OpTrace& ops, const std::string& name, const KernelCtx& kctx,
                  const AdamWHyper& hyper, UpdateSlice& sl) {
  const auto n = static_cast<std::size_t>(sl.n);
  if (!ops.recording()) {
    adamw_step(kctx, hyper, std::span<float>(sl.param, n), std::span<const float>(sl.grad, n),
               std::span<float>(sl.m, n), std::span<float>(sl.v, n));
    return;
  }
  const std::vector<float> p0(sl.param, sl.param + n), m0(sl.m, sl.m + n), v0(sl.v, sl.v + n);
  adamw_step(kctx, hyper, std::span<float>(sl.param, n), std::span<const float>(sl.grad, n),
             std::span<float>(sl.m, n), std::span<float>(sl.v, n));
  const std::span<const float> in[] = {p0, std::span<const float>(sl.grad, n), m0, v0};
  ops.record(name + ".adam.update", in, std::span<const float>(sl.param, n));
}

}  // namespace

TrainJob::TrainJob(const config::Config& cfg, Context& mpi)
    : cfg_(cfg),
      world_(mpi.world()),
      mode_(parse_determinism(cfg.run.determinism)),
      kctx_{parse_isa(cfg.run.isa), static_cast<int>(cfg.run.threads),
            static_cast<int>(cfg.numerics.reduce_block)},
      grid_(Grid::create(mpi.world(), static_cast<int>(cfg.parallel.tp))) {
  validate(kctx_);
  mpi.set_tag(grid_.tag());
  const int dp = grid_.dp_size();

  // ---- data ------------------------------------------------------------------------------
  const std::int64_t G = cfg_.data.global_batch, ctx = cfg_.model.context;
  mb_ = cfg_.parallel.microbatch;
  per_rank_ = G / dp;
  n_mb_ = per_rank_ / mb_;
  data::DataConfig dcfg;
  dcfg.path = cfg_.data.path;
  dcfg.global_batch = G;
  dcfg.context = ctx;
  dcfg.seed = static_cast<std::uint64_t>(cfg_.run.seed);
  dcfg.synthetic_seed = dcfg.seed;
  dataset_ = std::make_unique<data::GptDataset>(data::open_token_source(dcfg), ctx,
                                                cfg_.model.vocab);
  sampler_ = std::make_unique<data::Sampler>(
      data::SamplerConfig{dataset_->num_samples(), G, dcfg.seed});

  // ---- model and optimizer state ---------------------------------------------------------
  const ModelConfig mcfg = config::model_config(cfg_);
  model_ = std::make_unique<Gpt>(mcfg, grid_, mode_, kctx_);
  model_->init(static_cast<std::uint64_t>(cfg_.run.seed));
  sync_ = std::make_unique<GradSync>(*model_, grid_, mode_, cfg_.parallel.zero, kctx_.threads);
  state_ = std::make_unique<StateTrace>(
      *sync_, world_, grid_, parse_hash_kind(cfg_.verify.hash),
      fp_version_from_int(cfg_.verify.fingerprint_version, "verify.fingerprint_version"),
      cfg_.verify.state_interval, cfg_.verify.replica_check_interval, kctx_.threads);
  if (!cfg_.debug.bitflip.empty()) {
    bitflip_rank_ = std::stoi(cfg_.debug.bitflip);
    bitflip_step_ = std::stoll(cfg_.debug.bitflip.substr(cfg_.debug.bitflip.find(':') + 1));
    bitflip_param_ = bitflip_param(cfg_.debug.bitflip, model_->table());
  }
  if (!cfg_.debug.perturb.empty()) check_perturb_op(mcfg, cfg_.debug.perturb);
  ops_ = std::make_unique<OpTrace>(OpTraceConfig::from(cfg_.run.out + "/ops", world_.rank(),
                                                       cfg_.verify.ops, cfg_.debug.perturb));
  model_->set_observer(ops_.get());
  sync_->reducer().set_observer(ops_.get());

  acfg_.beta1 = cfg_.optim.beta1;
  acfg_.beta2 = cfg_.optim.beta2;
  acfg_.eps = cfg_.optim.eps;
  acfg_.weight_decay = cfg_.optim.weight_decay;
  scfg_.lr = cfg_.optim.lr;
  scfg_.min_lr = cfg_.optim.min_lr;
  scfg_.warmup = cfg_.optim.warmup;
  scfg_.total_steps = cfg_.run.steps;
  scfg_.schedule = parse_lr_schedule(cfg_.optim.schedule);
  validate(acfg_);
  validate(scfg_);

  for (const UpdateSlice& sl : sync_->slices())
    update_tensors_.push_back({sl.param, sl.grad, sl.m, sl.v, sl.n, sl.decay});
  tokens_.resize(static_cast<std::size_t>(mb_ * ctx));
  labels_.resize(tokens_.size());
  seq_ids_.resize(static_cast<std::size_t>(mb_));
}

StepResult TrainJob::run_step(std::int64_t step) {
  const std::int64_t G = cfg_.data.global_batch, ctx = cfg_.model.context;
  const int dp = grid_.dp_size(), dp_rank = grid_.dp_rank();
  const float loss_scale = 1.0f / static_cast<float>(G * ctx);
  StepResult r;
  ops_->begin_step(step);
  sync_->begin_step();
  BinaryCounter loss_counter(1);
  for (std::int64_t m = 0; m < n_mb_; ++m) {
    sampler_->fill_microbatch(*dataset_, dp, dp_rank, mb_, m, tokens_.data(), labels_.data());
    for (std::int64_t j = 0; j < mb_; ++j) seq_ids_[j] = dp_rank * per_rank_ + m * mb_ + j;
    const float loss_sum = model_->forward_backward(tokens_.data(), labels_.data(),
                                                    seq_ids_.data(), mb_, step, loss_scale);
    sync_->push_microbatch();
    loss_counter.push(&loss_sum);
  }
  float loss_sum = 0;
  loss_counter.result(&loss_sum);
  allreduce_sum(mode_, grid_.dp_comm(), std::span<float>(&loss_sum, 1));
  r.loss = loss_sum / static_cast<float>(G * ctx);

  sync_->reduce();  // canonical DP reduction, terms combined: this rank's update slices
  const auto tv0 = Clock::now();
  state_->after_reduce(step);
  r.verify_seconds = std::chrono::duration<double>(Clock::now() - tv0).count();
  r.grad_norm = sync_->grad_norm();
  const ClipResult clip = cfg_.optim.clip > 0
                              ? clip_coefficient(r.grad_norm, static_cast<float>(cfg_.optim.clip))
                              : ClipResult{};
  r.lr = lr_at(scfg_, step);
  if (ops_->recording()) {  // per tensor, each update recorded as an op
    for (auto& sl : sync_->slices()) apply_clip(clip, std::span<float>(sl.grad, sl.n));
    const ParamTable& table = model_->table();
    for (std::size_t p = 0; p < table.size(); ++p) {
      UpdateSlice& sl = sync_->slices()[p];
      traced_adamw(*ops_, table[p].name, kctx_, AdamWHyper::at(acfg_, r.lr, step, sl.decay), sl);
    }
  } else {  // the same bits: clip and update every slice chunk by chunk on all threads
    clip_and_adamw_step(kctx_, acfg_, r.lr, step, clip, update_tensors_);
  }
  ops_->end_step();
  sync_->publish_params();  // ZeRO: allgather the updated parameters
  if (bitflip_rank_ == world_.rank() && bitflip_step_ == step) {
    // After the update, the lowest mantissa bit of element 0 of this rank's copy, the way a
    // silent memory error would.
    Tensor& t = model_->params()[bitflip_param_];
    std::uint32_t bits;
    std::memcpy(&bits, t.data<float>(), sizeof bits);
    bits ^= 1u;
    std::memcpy(t.data<float>(), &bits, sizeof bits);
    std::fprintf(stderr, "debug.bitflip: rank %d flipped bit 0 of param/%s[0] after step %lld\n",
                 world_.rank(), model_->table()[bitflip_param_].name.c_str(),
                 static_cast<long long>(step));
  }
  sampler_->advance();

  // All state fingerprinted over logical tensors (+ the replica guard when due).
  const auto tv1 = Clock::now();
  r.fp = state_->finish(step, rng_fingerprint(static_cast<std::uint64_t>(cfg_.run.seed), step + 1),
                        data_fingerprint(sampler_->to_json().dump()));
  r.verify_seconds += std::chrono::duration<double>(Clock::now() - tv1).count();
  return r;
}

}  // namespace lockstep
