#include "launch/train/train_job.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <span>
#include <string>

#include "optim/clip.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "runtime/collectives.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/watchdog.hpp"
#include "verify/trace.hpp"

namespace lockstep {
namespace {

using Clock = std::chrono::steady_clock;

// A debug key's tensor ("param/<name>" or "<name>", checked by the validator): its index in
// the parameter table.
std::size_t param_index(const std::string& name, const ParamTable& table) {
  return table.index_of(name.rfind("param/", 0) == 0 ? name.substr(6) : name);
}

bool all_finite(const float* x, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace

TrainJob::TrainJob(const config::Config& cfg, Context& mpi)
    : cfg_(cfg),
      world_(mpi.world()),
      kctx_(config::kernel_ctx(cfg, static_cast<int>(cfg.run.threads))),
      grid_(Grid::create(mpi.world(), static_cast<int>(cfg.parallel.tp),
                         static_cast<int>(cfg.parallel.pp))),
      schedule_(config::lr_schedule(cfg)) {
  validate(kctx_);
  mpi.set_tag(grid_.tag());
  const Determinism mode = cfg_.run.determinism;

  // ---- data ------------------------------------------------------------------------------
  const std::int64_t G = cfg_.data.global_batch, ctx = cfg_.model.context;
  const auto seed = static_cast<std::uint64_t>(cfg_.run.seed);
  mb_ = cfg_.parallel.microbatch;
  per_rank_ = G / grid_.dp_size();
  plan_ = plan_microbatches(cfg_.numerics.tree, per_rank_, mb_);
  dataset_ = std::make_unique<data::GptDataset>(data::open_token_source(cfg_.data, seed), ctx,
                                                cfg_.model.vocab);
  sampler_ = std::make_unique<data::Sampler>(data::SamplerConfig{dataset_->num_samples(), G, seed});

  // ---- model, optimizer state and the traces ----------------------------------------------
  model_ = std::make_unique<Gpt>(cfg_.model, grid_, mode, kctx_, cfg_.parallel.pp_layers.counts);
  model_->init(seed);
  sync_ = std::make_unique<GradSync>(*model_, grid_, mode, cfg_.parallel.zero, kctx_.threads,
                                     plan_.tree, plan_.leaves);
  state_ = std::make_unique<StateTrace>(
      *sync_, world_, grid_, cfg_.verify.hash,
      fp_version_from_int(cfg_.verify.fingerprint_version, "verify.fingerprint_version"),
      cfg_.verify.state_interval, cfg_.verify.replica_check_interval, kctx_.threads);
  if (cfg_.debug.bitflip.on())
    bitflip_param_ = param_index(cfg_.debug.bitflip.tensor, model_->table());
  if (cfg_.debug.nan.on()) nan_param_ = param_index(cfg_.debug.nan.tensor, model_->table());
  ops_ = std::make_unique<OpTrace>(OpTraceConfig::from(cfg_.run.out + "/ops", world_.rank(),
                                                       cfg_.verify.ops, cfg_.debug.perturb));
  model_->set_observer(ops_.get());
  sync_->reducer().set_observer(ops_.get());

  for (const UpdateSlice& sl : sync_->slices())
    update_tensors_.push_back({sl.param, sl.grad, sl.m, sl.v, sl.n, sl.decay});
  const std::int64_t held = grid_.pp_size() > 1 ? per_rank_ : mb_;  // sequences held at once
  tokens_.resize(static_cast<std::size_t>(held * ctx));
  labels_.resize(tokens_.size());
  seq_ids_.resize(static_cast<std::size_t>(held));
  if (grid_.pp_size() > 1) setup_pipeline();
}

// The stage's link, activation slots and transfer buffers (PP > 1).
void TrainJob::setup_pipeline() {
  link_ = std::make_unique<StageLink>(grid_);
  const auto m = static_cast<std::int64_t>(plan_.passes.size());
  slots_ = pipeline_slots(cfg_.parallel.schedule, grid_.pp_size(), grid_.pp_rank(), m);
  model_->set_slots(slots_);
  const PipelineStage& st = model_->stage();
  for (const Microbatch& mbt : plan_.passes) {
    const auto n = static_cast<std::size_t>(mbt.count * cfg_.model.context * cfg_.model.d_model);
    recv_h_.emplace_back(st.first() ? 0 : n);
    send_h_.emplace_back(st.last() ? 0 : n);
    recv_dh_.emplace_back(st.last() ? 0 : n);
    send_dh_.emplace_back(st.first() ? 0 : n);
  }
}

StepResult TrainJob::run_step(std::int64_t step) {
  const auto t_step = Clock::now();
  StepResult r;
  watchdog::set_step(step);  // the heartbeat (runtime/watchdog.hpp): plain stores
  watchdog::set_phase("forward/backward");
  ops_->begin_step(step);
  sync_->begin_step();
  const auto t0 = Clock::now();
  r.loss = grid_.pp_size() > 1 ? pipeline_forward_backward(step) : forward_backward(step);
  watchdog::set_phase("grad sync");
  sync_->reduce();  // canonical DP reduction, terms combined: this rank's update slices
  const auto tv0 = Clock::now();
  const double sync_seconds = std::chrono::duration<double>(tv0 - t0).count() - passes_seconds_;
  watchdog::set_phase("fingerprints");
  state_->after_reduce(step);
  r.verify_seconds = std::chrono::duration<double>(Clock::now() - tv0).count();
  inject_nan(step);
  watchdog::set_phase("grad norm");
  r.grad_norm = sync_->grad_norm();
  r.lr = lr_at(schedule_, step);
  watchdog::set_phase("optimizer");
  if (std::isfinite(r.loss) && std::isfinite(r.grad_norm)) {
    update(step - skipped_, r.grad_norm, r.lr);
  } else {  // the guard: nothing of this step is applied
    r.nonfinite = locate_nonfinite();
    r.stopped = cfg_.optim.on_nonfinite == NonfinitePolicy::stop;
    r.skipped = !r.stopped;
    skipped_ += r.skipped ? 1 : 0;
  }
  ops_->end_step();
  if (r.stopped) return r;
  sync_->publish_params();  // ZeRO: allgather the updated parameters
  flip_bit(step);
  sampler_->advance();

  // All state fingerprinted over logical tensors (+ the replica guard when due).
  const auto tv1 = Clock::now();
  watchdog::set_phase("fingerprints");
  r.fp = state_->finish(step, rng_fingerprint(static_cast<std::uint64_t>(cfg_.run.seed), step + 1),
                        data_fingerprint(sampler_->to_json().dump()));
  r.verify_seconds += std::chrono::duration<double>(Clock::now() - tv1).count();
  if (world_.size() > 1) {
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - t_step).count();
    rank_metrics(r, passes_seconds_, sync_seconds, elapsed_s);
  }
  return r;
}

// Every rank's compute and sync time of the step (StepResult), the step so far on its own clock,
// and with PP its pipeline wait (taken out of its compute: every wait of the link lies inside the
// passes), peak RSS and forward-state bytes (Gpt::forward_state_bytes, in MiB): one allgather,
// for metrics.jsonl.
void TrainJob::rank_metrics(StepResult& r, double compute_s, double sync_s, double elapsed_s) {
  const double wait_s = link_ ? link_->take_wait_seconds() : 0.0;
  std::vector<float> mine = {static_cast<float>((compute_s - wait_s) * 1e3),
                             static_cast<float>(sync_s * 1e3), static_cast<float>(elapsed_s * 1e3)};
  if (link_) {
    rusage ru{};
    check(getrusage(RUSAGE_SELF, &ru) == 0,
          "getrusage failed on rank " + std::to_string(world_.rank()),
          "needed for metrics.jsonl's peak_rss_mib");
    mine.push_back(static_cast<float>(wait_s * 1e3));
    mine.push_back(static_cast<float>(static_cast<double>(ru.ru_maxrss) / 1024.0));
    mine.push_back(
        static_cast<float>(static_cast<double>(model_->forward_state_bytes()) / (1024.0 * 1024.0)));
  }
  const std::size_t per = mine.size();
  std::vector<float> all(per * static_cast<std::size_t>(world_.size()));
  allgather(world_, std::span<const float>(mine), all);
  for (std::size_t i = 0; i < all.size(); i += per) {
    r.compute_ms.push_back(all[i]);
    r.sync_ms.push_back(all[i + 1]);
    r.rank_ms.push_back(all[i + 2]);
    if (!link_) continue;
    r.pipeline_wait_ms.push_back(all[i + 3]);
    r.peak_rss_mib.push_back(all[i + 4]);
    r.activation_mib.push_back(all[i + 5]);
  }
}

// Every microbatch of this rank through the model (gradients pushed to the reducer), and the
// mean loss over the global batch: microbatch sums by the rank's tree (the plan's nodes), DP by
// the tree over ranks.
float TrainJob::forward_backward(std::int64_t step) {
  const std::int64_t G = cfg_.data.global_batch, ctx = cfg_.model.context;
  const int dp = grid_.dp_size(), dp_rank = grid_.dp_rank();
  const float loss_scale = 1.0f / static_cast<float>(G * ctx);
  TreeCombiner loss_counter(1, plan_.tree, plan_.leaves);
  const auto t0 = Clock::now();
  for (const Microbatch& mbt : plan_.passes) {
    sampler_->fill_sequences(*dataset_, dp, dp_rank, mbt.first, mbt.count, tokens_.data(),
                             labels_.data());
    for (std::int64_t j = 0; j < mbt.count; ++j) seq_ids_[j] = dp_rank * per_rank_ + mbt.first + j;
    sync_->begin_microbatch(mbt.width);
    const float loss_sum = model_->forward_backward(tokens_.data(), labels_.data(), seq_ids_.data(),
                                                    mbt.count, step, loss_scale);
    sync_->push_microbatch(mbt.width);
    loss_counter.push_node(&loss_sum, mbt.width);
  }
  passes_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  float loss_sum = 0;
  loss_counter.result(&loss_sum);
  allreduce_sum(cfg_.run.determinism, grid_.dp_comm(), std::span<float>(&loss_sum, 1));
  return loss_sum / static_cast<float>(G * ctx);
}

// This stage's passes in the schedule's order (parallel/pipeline_schedule.hpp): activations
// arrive from the previous stage and leave for the next, gradients the other way, every receive
// posted at the start. Backwards run in microbatch order on every stage, so the gradient
// combiner gets the same nodes in the same order as forward_backward; the loss is the last
// stage's, combined as there and then copied to every stage.
float TrainJob::pipeline_forward_backward(std::int64_t step) {
  const std::int64_t G = cfg_.data.global_batch, ctx = cfg_.model.context;
  const float loss_scale = 1.0f / static_cast<float>(G * ctx);
  const PipelineStage& st = model_->stage();
  const auto m = static_cast<std::int64_t>(plan_.passes.size());
  const auto t0 = Clock::now();
  fill_batch();
  for (std::int64_t i = 0; i < m; ++i) {
    if (!st.first()) link_->post_recv_forward(i, recv_h_[i].data(), std::ssize(recv_h_[i]));
    if (!st.last()) link_->post_recv_backward(i, recv_dh_[i].data(), std::ssize(recv_dh_[i]));
  }
  TreeCombiner loss_counter(1, plan_.tree, plan_.leaves);
  for (const PipeAction& a : pipeline_actions(cfg_.parallel.schedule, st.count, st.index, m)) {
    const std::int64_t i = a.microbatch, slot = i % slots_;
    const Microbatch& mbt = plan_.passes[static_cast<std::size_t>(i)];
    const std::int32_t* tok = tokens_.data() + mbt.first * ctx;
    const std::int32_t* lab = labels_.data() + mbt.first * ctx;
    if (a.forward) {
      if (!st.first()) link_->wait_recv_forward(i);
      const float loss = model_->forward_stage(slot, tok, lab, seq_ids_.data() + mbt.first,
                                               mbt.count, step, recv_h_[i].data());
      if (st.last()) {
        loss_counter.push_node(&loss, mbt.width);
        continue;
      }
      std::ranges::copy(model_->stage_output(slot), send_h_[i].begin());
      link_->send_forward(i, send_h_[i].data(), std::ssize(send_h_[i]));
    } else {
      if (!st.last()) link_->wait_recv_backward(i);
      sync_->begin_microbatch(mbt.width);
      model_->backward_stage(slot, tok, lab, loss_scale, recv_dh_[i].data());
      sync_->push_microbatch(mbt.width);
      if (st.first()) continue;
      std::ranges::copy(model_->stage_input_grad(), send_dh_[i].begin());
      link_->send_backward(i, send_dh_[i].data(), std::ssize(send_dh_[i]));
    }
  }
  link_->wait_sends();
  passes_seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  float loss_sum = 0;
  if (st.last()) {
    loss_counter.result(&loss_sum);
    allreduce_sum(cfg_.run.determinism, grid_.dp_comm(), std::span<float>(&loss_sum, 1));
  }
  broadcast(grid_.pp_comm(), std::span<float>(&loss_sum, 1), st.count - 1);
  return loss_sum / static_cast<float>(G * ctx);
}

// Every microbatch's sequences of this step at once (a stage holds several in flight).
void TrainJob::fill_batch() {
  const std::int64_t ctx = cfg_.model.context;
  const int dp = grid_.dp_size(), dp_rank = grid_.dp_rank();
  for (const Microbatch& mbt : plan_.passes) {
    sampler_->fill_sequences(*dataset_, dp, dp_rank, mbt.first, mbt.count,
                             tokens_.data() + mbt.first * ctx, labels_.data() + mbt.first * ctx);
    for (std::int64_t j = 0; j < mbt.count; ++j)
      seq_ids_[mbt.first + j] = dp_rank * per_rank_ + mbt.first + j;
  }
}

// Clip and AdamW over every update slice, chunk by chunk on all threads; `step` is AdamW's
// step count (the training step less the steps skipped before it). While the op trace
// records, the same update runs one slice at a time, each recorded as the op
// "<param>.adam.update" (inputs: parameter, clipped gradient, m, v before the update; output:
// the parameter after): the same bits (the update is elementwise).
void TrainJob::update(std::int64_t step, float grad_norm, float lr) {
  const ClipResult clip = cfg_.optim.clip > 0
                              ? clip_coefficient(grad_norm, static_cast<float>(cfg_.optim.clip))
                              : ClipResult{};
  const AdamWConfig& adamw = cfg_.optim.adamw;
  if (!ops_->recording()) {
    clip_and_adamw_step(kctx_, adamw, lr, step, clip, update_tensors_);
    return;
  }
  const ParamTable& table = model_->table();
  for (std::size_t p = 0; p < update_tensors_.size(); ++p) {
    const AdamWTensor& t = update_tensors_[p];
    const auto n = static_cast<std::size_t>(t.n);
    const std::vector<float> p0(t.param, t.param + n), m0(t.m, t.m + n), v0(t.v, t.v + n);
    clip_and_adamw_step(kctx_, adamw, lr, step, clip, std::span<const AdamWTensor>(&t, 1));
    const std::span<const float> in[] = {p0, std::span<const float>(t.grad, n), m0, v0};
    ops_->record(table[p].name + ".adam.update", in, std::span<const float>(t.param, n));
  }
}

// debug.bitflip: after the update of its step, the lowest mantissa bit of element 0 of this
// rank's copy of the tensor, the way a silent memory error would.
void TrainJob::flip_bit(std::int64_t step) {
  const config::BitFlip& flip = cfg_.debug.bitflip;
  if (!flip.on() || flip.rank != world_.rank() || flip.step != step) return;
  Tensor& t = model_->params()[bitflip_param_];
  if (t.numel() == 0) {  // another pipeline stage's parameter
    std::fprintf(stderr, "debug.bitflip: rank %d (%s) does not hold param/%s; nothing flipped\n",
                 world_.rank(), grid_.tag().c_str(), model_->table()[bitflip_param_].name.c_str());
    return;
  }
  std::uint32_t bits;
  std::memcpy(&bits, t.data<float>(), sizeof bits);
  bits ^= 1u;
  std::memcpy(t.data<float>(), &bits, sizeof bits);
  std::fprintf(stderr, "debug.bitflip: rank %d flipped bit 0 of param/%s[0] after step %lld\n",
               world_.rank(), model_->table()[bitflip_param_].name.c_str(),
               static_cast<long long>(step));
}

// debug.nan: element 0 of every local slice (or RANK's) of the tensor's reduced gradient becomes
// NaN, after
// the gradient fingerprint (so the trace is the same on every layout) and before the norm.
void TrainJob::inject_nan(std::int64_t step) {
  const config::NanInjection& nan = cfg_.debug.nan;
  if (!nan.on() || nan.step != step || (nan.rank >= 0 && nan.rank != world_.rank())) return;
  const UpdateSlice& sl = sync_->slices()[nan_param_];
  if (sl.n > 0) sl.grad[0] = std::numeric_limits<float>::quiet_NaN();
}

// The first tensor in table order whose gradient holds a non-finite element on some rank, and
// the lowest such rank: one integer min over the world (tensor index x world size + rank).
Nonfinite TrainJob::locate_nonfinite() const {
  const auto world = static_cast<std::uint64_t>(world_.size());
  std::uint64_t mine = std::numeric_limits<std::uint64_t>::max();
  const auto& slices = sync_->slices();
  for (std::size_t p = 0; p < slices.size(); ++p)
    if (!all_finite(slices[p].grad, slices[p].n)) {
      mine = p * world + static_cast<std::uint64_t>(world_.rank());
      break;
    }
  const std::uint64_t first = allreduce_u64(world_, mine, IntOp::min);
  Nonfinite nf;
  if (first == std::numeric_limits<std::uint64_t>::max()) return nf;
  nf.tensor = model_->table()[static_cast<std::size_t>(first / world)].name;
  nf.rank = static_cast<int>(first % world);
  nf.tag = grid_.tag_of(nf.rank);
  return nf;
}

std::string Nonfinite::describe(std::int64_t step, float loss, float grad_norm) const {
  const std::string values = "loss " + dec_float(loss) + ", grad_norm " + dec_float(grad_norm);
  if (tensor.empty())
    return "step " + std::to_string(step) + ": " + values + " (every gradient element is finite)";
  return "step " + std::to_string(step) + ": the gradient of " + tensor +
         " is not finite (the first such tensor in table order; on rank " + std::to_string(rank) +
         ", " + tag + "); " + values;
}

}  // namespace lockstep
