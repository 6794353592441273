#include "launch/state_trace.hpp"

#include <omp.h>

#include <algorithm>
#include <string>

#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep {

HashKind parse_hash_kind(const std::string& s) {
  if (s == "lockstep") return HashKind::lockstep;
  if (s == "torch-xor") return HashKind::torch_xor;
  fail("unknown verify.hash '" + s + "'", "use lockstep or torch-xor");
}

StateTrace::StateTrace(GradSync& sync, const Communicator& world, const Grid& grid, HashKind kind,
                       std::int64_t state_interval, std::int64_t guard_interval, int threads)
    : sync_(sync),
      world_(world),
      grid_(grid),
      kind_(kind),
      state_interval_(state_interval),
      guard_interval_(guard_interval),
      threads_(threads),
      grad_(sync.pieces(StateKind::grad)),
      param_(sync.pieces(StateKind::param)),
      m_(sync.pieces(StateKind::adam_m)),
      v_(sync.pieces(StateKind::adam_v)) {}

std::vector<std::uint64_t> StateTrace::hash_local(const std::vector<StatePiece>& pieces,
                                                  HashKind kind, bool owners_only) const {
  std::vector<std::uint64_t> out(pieces.size(), 0);
  const int n = static_cast<int>(pieces.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_)
  for (int i = 0; i < n; ++i) {
    const StatePiece& p = pieces[static_cast<std::size_t>(i)];
    if (owners_only && !p.owner) continue;
    out[static_cast<std::size_t>(i)] =
        kind == HashKind::lockstep
            ? fingerprint(p)
            : torch_xor_hash(std::span<const float>(p.data, static_cast<std::size_t>(p.size())));
  }
  return out;
}

void StateTrace::after_reduce(std::int64_t step) {
  state_due_ = state_interval_ > 0 && step % state_interval_ == 0;
  if (state_due_) grad_local_ = hash_local(grad_, kind_, true);
}

Fingerprints StateTrace::finish(std::int64_t step, std::uint64_t rng_fp, std::uint64_t data_fp) {
  const bool guard_due = guard_interval_ > 0 && step % guard_interval_ == 0;
  if (!state_due_) {
    if (guard_due) guard(step, hash_local(param_, HashKind::lockstep, false));
    last_.clear();
    return {{"rng", rng_fp}, {"data", data_fp}};
  }
  // On guard steps every rank hashes all its parameters (lockstep kind); the trace takes the
  // owners' values from the same numbers.
  std::vector<std::uint64_t> param_local;
  if (guard_due) {
    const auto all = hash_local(param_, HashKind::lockstep, false);
    guard(step, all);
    param_local = kind_ == HashKind::lockstep ? all : hash_local(param_, kind_, true);
    if (kind_ == HashKind::lockstep)
      for (std::size_t i = 0; i < param_.size(); ++i)
        if (!param_[i].owner) param_local[i] = 0;
  } else {
    param_local = hash_local(param_, kind_, true);
  }
  auto m_local = hash_local(m_, kind_, true);
  auto v_local = hash_local(v_, kind_, true);

  std::vector<std::uint64_t> all;
  all.reserve(4 * param_.size());
  for (const auto* part : {&param_local, &grad_local_, &m_local, &v_local})
    all.insert(all.end(), part->begin(), part->end());
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

void StateTrace::guard(std::int64_t step, const std::vector<std::uint64_t>& local) {
  const Communicator& dp = grid_.dp_comm();
  if (dp.size() == 1) return;
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
  auto local = hash_local(pieces, HashKind::lockstep, true);
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
