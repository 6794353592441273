#include "launch/train/memory_estimate.hpp"

#include <algorithm>
#include <thread>

#include "launch/train/validate.hpp"
#include "model/memory_footprint.hpp"
#include "model/pipeline_stage.hpp"
#include "parallel/microbatch_plan.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "runtime/collectives.hpp"
#include "runtime/csum.hpp"
#include "runtime/gemm.hpp"
#include "runtime/text.hpp"

namespace lockstep::config {
namespace {
constexpr std::int64_t kF = sizeof(float);

// The kernel threads of one rank: run.threads, else the cores shared by the ranks.
int rank_threads(const Config& c, int world_size) {
  if (c.run.threads > 0) return static_cast<int>(c.run.threads);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, world_size));
}

// The partial sums the microbatch combiner holds at its peak (runtime/csum.hpp): none for one
// microbatch (reduced from the model's buffer), else the deepest stack of the plan's nodes
// (ceil(log2 m) for a power-of-two m, fewer for others: 3 for 12 single-sequence passes).
std::int64_t combiner_levels(const Config& c, std::int64_t dp) {
  const std::int64_t seqs = c.data.global_batch / dp;
  const MicrobatchPlan plan = plan_microbatches(c.numerics.tree, seqs, c.parallel.microbatch);
  if (plan.passes.size() <= 1) return 0;
  std::vector<std::int64_t> widths;
  for (const Microbatch& mb : plan.passes) widths.push_back(mb.width);
  return TreeCombiner::peak_levels(plan.tree, plan.leaves, widths);
}

// The collectives' grow-only scratch (runtime/collectives.hpp), one buffer per communicator, in
// invariant mode (the other modes call MPI's reductions, whose buffers are Open MPI's): the DP
// group's for the step's gradient of G floats (an allreduce, or ZeRO's reduce-scatter of the
// flat buffer, G padded by at most a float per parameter and rank) and the TP group's for its
// largest allreduce, a microbatch's tokens x d_model (row-parallel outputs, their input
// gradients, the vocab-parallel embedding).
std::int64_t collective_scratch_floats(const Config& c, std::int64_t dp, int tp, std::int64_t mb,
                                       std::int64_t G) {
  if (c.run.determinism != Determinism::invariant) return 0;
  const auto g = static_cast<std::size_t>(G);
  const std::size_t dp_floats = c.parallel.zero
                                    ? tree_reduce_scatter_scratch(static_cast<int>(dp), g)
                                    : tree_allreduce_scratch(static_cast<int>(dp), g);
  const auto acts = static_cast<std::size_t>(mb * c.model.context * c.model.d_model);
  return static_cast<std::int64_t>(dp_floats + tree_allreduce_scratch(tp, acts));
}

// Stage s's ranks (launch/train/grad_sync.cpp, parallel/dp_grad.hpp). Gradients: the model's
// term buffers (without ZeRO they are the reducer's flat buffer itself; with ZeRO that buffer
// holds the whole microbatch again, plus this rank's reduced segment) and the combiner's partial
// sums; streamed (no ZeRO) the flat buffer is the combiner's first level, plus one parameter
// group's scratch. AdamW: m and v of the owned elements, a multi-term parameter's
// combined gradient, and ZeRO's allgather buffers.
StageMemory stage_memory(const Config& c, int world_size, int s, std::int64_t m) {
  const int tp = static_cast<int>(c.parallel.tp), pp = static_cast<int>(c.parallel.pp);
  const std::int64_t dp = world_size / (tp * pp);
  const std::int64_t zdp = c.parallel.zero ? dp : 1;
  const std::int64_t mb = std::min(c.parallel.microbatch, c.data.global_batch / dp);
  const PipelineStage stage = PipelineStage::of(c.model, pp, s, c.parallel.pp_layers.counts);
  const KernelCtx ctx = kernel_ctx(c, rank_threads(c, world_size));
  const StageFootprint f =
      stage_footprint(c.model, tp, stage, mb, ctx, gemm_impl_for(c.run.determinism, ctx.isa));
  const std::int64_t W = f.param_floats, G = f.grad_floats;
  const std::int64_t levels = combiner_levels(c, dp);
  StageMemory r;
  r.stage = s;
  r.weights = kF * W;
  // Streamed microbatches (no ZeRO, terms in place): reduced_ is the combiner's level 0, and
  // a merging microbatch needs one parameter group's scratch.
  const bool streams = !c.parallel.zero && f.terms_whole_lines && levels > 0;
  const std::int64_t flat = c.parallel.zero ? G + G / dp : f.terms_whole_lines ? 0 : G;
  r.gradients = streams ? kF * (levels * G + f.grad_group_floats) : kF * (G + flat + levels * G);
  r.optimizer = kF * (2 * W / zdp + (G - W) / zdp + (c.parallel.zero ? W + W / dp : 0));
  r.slots = pp > 1 ? pipeline_slots(c.parallel.schedule, pp, s, m) : 1;
  r.microbatch_bytes = f.forward_state_bytes;
  r.activations = r.slots * f.forward_state_bytes;
  r.scratch = f.backward_scratch_bytes + f.gemm_scratch_bytes +
              kF * collective_scratch_floats(c, dp, tp, mb, G);
  return r;
}

std::string breakdown(const StageMemory& r) {
  std::string s = human_bytes(r.total()) + " = weights " + human_bytes(r.weights) +
                  " + gradients " + human_bytes(r.gradients) + " + AdamW " +
                  human_bytes(r.optimizer) + " + activations ";
  if (r.slots > 1) s += std::to_string(r.slots) + " x ";
  return s + human_bytes(r.microbatch_bytes) + " + scratch " + human_bytes(r.scratch);
}
}  // namespace

std::vector<StageMemory> memory_estimate(const Config& c, int world_size) {
  std::vector<StageMemory> out;
  if (!config_problems(c, world_size).empty()) return out;
  const std::int64_t m = passes_per_rank(c, world_size / (c.parallel.tp * c.parallel.pp));
  for (int s = 0; s < c.parallel.pp; ++s) out.push_back(stage_memory(c, world_size, s, m));
  return out;
}

std::int64_t all_ranks_bytes(const std::vector<StageMemory>& est, int world_size) {
  std::int64_t all = 0;
  for (const StageMemory& r : est) all += r.total() * (world_size / std::ssize(est));
  return all;
}

std::vector<std::string> memory_lines(const Config& c, int world_size) {
  const std::vector<StageMemory> est = memory_estimate(c, world_size);
  std::vector<std::string> lines;
  if (est.empty()) return lines;
  const std::string sum = "; all " + std::to_string(world_size) + " ranks " +
                          human_bytes(all_ranks_bytes(est, world_size)) + ", plus about " +
                          human_bytes(kProcessBytes) + " per process";
  if (est.size() == 1) return {"memory per rank (estimate): " + breakdown(est[0]) + sum};
  lines.push_back("memory per rank (estimate)" + sum + ":");
  for (const StageMemory& r : est)
    lines.push_back("  stage " + std::to_string(r.stage) + ": " + breakdown(r));
  return lines;
}

}  // namespace lockstep::config
