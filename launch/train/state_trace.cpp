#include "launch/train/state_trace.hpp"

#include <omp.h>

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "model/pipeline_stage.hpp"
#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep {

StateTrace::StateTrace(GradSync& sync, const Communicator& world, const Grid& grid, HashKind kind,
                       FpVersion version, std::int64_t state_interval, std::int64_t guard_interval,
                       int threads)
    : sync_(sync),
      world_(world),
      grid_(grid),
      kind_(kind),
      version_(version),
      state_interval_(state_interval),
      guard_interval_(guard_interval),
      threads_(threads),
      grad_(sync.pieces(StateKind::grad)),
      param_(sync.pieces(StateKind::param)),
      m_(sync.pieces(StateKind::adam_m)),
      v_(sync.pieces(StateKind::adam_v)) {}

namespace {

// CPU seconds of the calling thread (CLOCK_THREAD_CPUTIME_ID), or of the process.
double cpu_seconds(clockid_t clock) {
  timespec ts{};
  check(clock_gettime(clock, &ts) == 0,
        std::string("state_trace: clock_gettime failed: ") + std::strerror(errno),
        "CPU-time clocks are needed for metrics.jsonl's verify_cpu_ms");
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Runs job(i) for i < n on `threads` threads (dynamic schedule) and returns the results;
// adds the elapsed time to `wall` and the threads' CPU time to `cpu_total`. Each thread reads
// its CPU clock once before and once after its share of the jobs (not twice per job).
template <class Job>
std::vector<std::uint64_t> hash_on_threads(int n, int threads, Job&& job, double& wall,
                                           double& cpu_total) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> out(static_cast<std::size_t>(n), 0);
  const int team = threads > 1 ? threads : 1;
  std::vector<double> cpu(static_cast<std::size_t>(team), 0.0);
#pragma omp parallel num_threads(team) if (team > 1)
  {
    const double c0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
    // nowait: a thread reads its clock as soon as it runs out of jobs, so the time it would
    // spend waiting at the loop's barrier is not counted (as when each job was timed).
#pragma omp for schedule(dynamic, 1) nowait
    for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = job(i);
    cpu[static_cast<std::size_t>(omp_get_thread_num())] = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
  }
  for (double x : cpu) cpu_total += x;
  wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace

double process_cpu_seconds() {
  return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
}

namespace {

// One unit of hashing work: elements [a, b) of the flat range of piece `piece` of group
// `group`.
struct Chunk {
  std::size_t group, piece;
  std::int64_t a, b;
};

// `piece` restricted to its local elements [a, b): its fingerprint is their share.
StatePiece sub_piece(const StatePiece& p, std::int64_t a, std::int64_t b) {
  StatePiece s = p;
  s.flat_begin = p.flat_begin + a;
  s.flat_end = p.flat_begin + b;
  s.data = p.data + a;
  return s;
}

}  // namespace

std::vector<std::vector<std::uint64_t>> StateTrace::hash_owned(
    const std::vector<const std::vector<StatePiece>*>& groups, HashKind kind) {
  std::vector<std::vector<std::uint64_t>> out;
  std::vector<Chunk> chunks;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    out.emplace_back(groups[g]->size(), 0);
    for (std::size_t i = 0; i < groups[g]->size(); ++i) {
      const StatePiece& p = (*groups[g])[i];
      if (!p.owner) continue;
      check_piece(p);
      for (std::int64_t a = 0; a < p.size(); a += kChunk)
        chunks.push_back({g, i, a, std::min(p.size(), a + kChunk)});
    }
  }
  const std::vector<std::uint64_t> part = hash_on_threads(
      static_cast<int>(chunks.size()), threads_,
      [&](int c) {
        const Chunk& k = chunks[static_cast<std::size_t>(c)];
        const StatePiece& p = (*groups[k.group])[k.piece];
        return kind == HashKind::lockstep ? fingerprint(sub_piece(p, k.a, k.b), version_)
                                          : torch_xor_hash(std::span<const float>(
                                                p.data + k.a, static_cast<std::size_t>(k.b - k.a)));
      },
      hash_seconds_, hash_cpu_seconds_);
  // Exact integer combination, in chunk order (any order gives the same value).
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    std::uint64_t& dst = out[chunks[c].group][chunks[c].piece];
    dst = kind == HashKind::lockstep ? dst + part[c] : dst ^ part[c];
  }
  return out;
}

void StateTrace::after_reduce(std::int64_t step) {
  state_due_ = state_interval_ > 0 && step % state_interval_ == 0;
  if (state_due_) grad_local_ = hash_owned({&grad_}, kind_)[0];
}

Fingerprints StateTrace::finish(std::int64_t step, std::uint64_t rng_fp, std::uint64_t data_fp) {
  const bool guard_due = guard_interval_ > 0 && step % guard_interval_ == 0;
  if (guard_due) guard(step);
  if (!state_due_) {
    last_.clear();
    return {{"rng", rng_fp}, {"data", data_fp}};
  }
  const auto local = hash_owned({&param_, &m_, &v_}, kind_);

  std::vector<std::uint64_t> all;
  all.reserve(4 * param_.size());
  const std::vector<std::uint64_t>* parts[] = {&local[0], &grad_local_, &local[1], &local[2]};
  for (const auto* part : parts) all.insert(all.end(), part->begin(), part->end());
  allreduce_u64(world_, all, kind_ == HashKind::lockstep ? IntOp::sum : IntOp::bxor);

  Fingerprints fp;
  std::size_t k = 0;
  for (const std::vector<StatePiece>* group : {&param_, &grad_, &m_, &v_})
    for (const auto& p : *group) fp.emplace_back(p.name, all[k++]);
  fp.emplace_back("rng", rng_fp);
  fp.emplace_back("data", data_fp);
  last_ = fp;
  return fp;
}

void StateTrace::guard(std::int64_t step) {
  const bool stages = grid_.pp_size() > 1;
  if (grid_.dp_comm().size() == 1 && !stages) return;
  const std::vector<std::uint64_t> local = hash_on_threads(
      static_cast<int>(param_.size()), threads_,
      [&](int i) {
        const StatePiece& p = param_[static_cast<std::size_t>(i)];
        return xxh3_64(p.data, static_cast<std::size_t>(p.size()) * sizeof(float));
      },
      hash_seconds_, hash_cpu_seconds_);
  if (grid_.dp_comm().size() > 1) guard_replicas(step, local);
  if (stages) guard_stages(step, local);
}

// The copies of a parameter that several pipeline stages hold (the tied embed.weight on the
// first and the last stage) must be identical after every update.
void StateTrace::guard_stages(std::int64_t step, const std::vector<std::uint64_t>& local) {
  const PipelineStage& stage = sync_.model().stage();
  const ParamTable& table = sync_.model().table();
  std::vector<std::uint64_t> lo(local.size(), ~std::uint64_t{0}), hi(local.size(), 0);
  for (std::size_t i = 0; i < local.size(); ++i)
    if (stage.holds(table[i])) lo[i] = hi[i] = local[i];
  allreduce_u64(grid_.pp_comm(), lo, IntOp::min);
  allreduce_u64(grid_.pp_comm(), hi, IntOp::max);
  for (std::size_t i = 0; i < local.size(); ++i)
    if (stage.holds(table[i]) && lo[i] != hi[i])
      fail("replica guard: at step " + std::to_string(step) + " tensor '" + param_[i].name +
               "' differs between the pipeline stages that hold it (this is stage " +
               std::to_string(stage.index) + ", " + grid_.tag() + ": " + hex64(local[i]) + ")",
           "the stages' copies of a tied parameter must receive the same update; silent data "
           "corruption or a bug. Resume from the last checkpoint (run.resume=auto)");
}

void StateTrace::guard_replicas(std::int64_t step, const std::vector<std::uint64_t>& local) {
  const Communicator& dp = grid_.dp_comm();
  std::vector<std::uint64_t> lo(local), hi(local);
  allreduce_u64(dp, lo, IntOp::min);
  allreduce_u64(dp, hi, IntOp::max);
  for (std::size_t i = 0; i < local.size(); ++i) {
    if (lo[i] == hi[i]) continue;
    // Every replica's value, to name the ranks.
    std::vector<std::uint64_t> each(static_cast<std::size_t>(dp.size()), 0);
    each[static_cast<std::size_t>(dp.rank())] = local[i];
    allreduce_u64(dp, each, IntOp::sum);
    // With three or more replicas a strict majority names the corrupted one(s).
    std::vector<int> same(each.size(), 0);  // replicas holding each replica's value
    for (std::size_t r = 0; r < each.size(); ++r)
      same[r] = static_cast<int>(std::count(each.begin(), each.end(), each[r]));
    const int best = *std::max_element(same.begin(), same.end());
    std::string values;
    for (int r = 0; r < dp.size(); ++r)
      values += "\n    dp rank " + std::to_string(r) + " (world rank " +
                std::to_string(grid_.rank_of(grid_.tp_rank(), r)) + "): " + hex64(each[r]) +
                (2 * best > dp.size() && same[r] < best ? "  <- differs from the majority" : "");
    fail("replica guard: at step " + std::to_string(step) + " tensor '" + param_[i].name +
             "' (TP rank " + std::to_string(grid_.tp_rank()) +
             " shard) differs across the DP replicas:" + values,
         "silent data corruption or a nondeterministic op on one replica; the job stops here. "
         "Resume from the last checkpoint (run.resume=auto) after checking the node");
  }
}

std::map<std::string, std::uint64_t> StateTrace::checkpoint_fingerprints() {
  std::map<std::string, std::uint64_t> out;
  if (kind_ == HashKind::lockstep && !last_.empty()) {
    for (const auto& [name, v] : last_)
      if (name.rfind("grad/", 0) != 0 && name != "rng" && name != "data") out[name] = v;
    return out;
  }
  const auto pieces = checkpoint_pieces();
  const double keep = hash_seconds_, keep_cpu = hash_cpu_seconds_;  // not a step's verify_ms
  auto local = hash_owned({&pieces}, HashKind::lockstep)[0];
  hash_seconds_ = keep;
  hash_cpu_seconds_ = keep_cpu;
  allreduce_u64(world_, local, IntOp::sum);
  for (std::size_t i = 0; i < pieces.size(); ++i) out[pieces[i].name] = local[i];
  return out;
}

std::vector<StatePiece> StateTrace::checkpoint_pieces() {
  std::vector<StatePiece> out(param_);
  out.insert(out.end(), m_.begin(), m_.end());
  out.insert(out.end(), v_.begin(), v_.end());
  return out;
}

std::uint64_t rng_fingerprint(std::uint64_t seed, std::int64_t next_step) {
  const std::uint64_t words[3] = {0x524e47ull /* "RNG" */, seed,
                                  static_cast<std::uint64_t>(next_step)};
  return xxh3_64(words, sizeof words);
}

std::uint64_t data_fingerprint(const std::string& sampler_json) {
  return xxh3_64(sampler_json.data(), sampler_json.size());
}

}  // namespace lockstep
