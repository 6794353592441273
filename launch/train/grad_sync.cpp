#include "launch/train/grad_sync.hpp"

#include <omp.h>

#include <algorithm>

#include "model/pipeline_stage.hpp"
#include "optim/grad_norm.hpp"
#include "runtime/collectives.hpp"

namespace lockstep {
namespace {

std::vector<std::int64_t> numels(Gpt& m) {
  std::vector<std::int64_t> n;
  for (const auto& p : m.params()) n.push_back(p.numel());
  return n;
}

std::vector<int> term_counts(Gpt& m) {
  std::vector<int> t;
  for (const auto& terms : m.grads()) t.push_back(static_cast<int>(terms.size()));
  return t;
}

}  // namespace

// The piece of a parameter this rank's pipeline stage does not hold: its place in the
// logical tensor (this TP rank's box), no elements, not an owner.
StatePiece GradSync::absent_piece(const std::string& name, const ParamSpec& spec) const {
  const ShardDesc sd = spec.shard(grid_.tp_size(), grid_.tp_rank());
  StatePiece s;
  s.name = name;
  s.global_shape = spec.shape;
  s.box_offset = sd.global_offset;
  s.box_shape = sd.local_shape();
  s.owner = false;
  check_piece(s);
  return s;
}

const char* state_prefix(StateKind k) {
  switch (k) {
    case StateKind::grad:
      return "grad/";
    case StateKind::adam_m:
      return "adam_m/";
    case StateKind::adam_v:
      return "adam_v/";
    case StateKind::param:
      return "param/";
  }
  return "";
}

GradSync::GradSync(Gpt& model, const Grid& grid, Determinism mode, bool zero, int threads,
                   TreeShape tree, std::int64_t leaves)
    : model_(model),
      grid_(grid),
      zero_(zero),
      threads_(std::max(1, threads)),
      part_(numels(model), term_counts(model), grid.dp_size(), grid.dp_rank()),
      reducer_(zero ? part_.grad_block() * grid.dp_size() : [&] {
        std::int64_t total = 0;
        for (const auto& terms : model.grads())
          for (const auto& t : terms) total += t.numel();
        return total;
      }(),
               mode, tree, leaves, std::max(1, threads)),
      leaves_(leaves) {
  for (const auto& terms : model.grads()) {
    term_offset_.emplace_back();
    for (const auto& t : terms) {
      term_offset_.back().push_back(flat_len_);
      flat_len_ += t.numel();
    }
  }
  const ParamTable& table = model.table();
  const PipelineStage& stage = model.stage();
  auto& params = model.params();
  if (zero) flat_.resize(static_cast<std::size_t>(part_.grad_block() * grid.dp_size()));
  reduced_.resize(static_cast<std::size_t>(zero ? part_.grad_block() : flat_len_));
  for (std::size_t p = 0; p < params.size(); ++p) {
    // Parameters of other pipeline stages: no update slice here (their owners update them).
    const bool held = stage.holds(table[p]);
    const std::int64_t n = !held ? 0 : zero ? part_.owned(p) : params[p].numel();
    const std::int64_t first = zero ? part_.first(p) : 0;
    // One term: the reduced buffer already holds the gradient (reduced_ never moves).
    const bool own_grad = term_offset_[p].size() > 1;
    grad_.emplace_back(own_grad ? static_cast<std::size_t>(zero ? part_.segment(p) : n) : 0);
    m_.emplace_back(static_cast<std::size_t>(n));
    v_.emplace_back(static_cast<std::size_t>(n));
    float* grad = own_grad
                      ? grad_.back().data()
                      : reduced_.data() + (zero ? part_.grad_offset(p, 0) : term_offset_[p][0]);
    const bool counted =
        (table[p].partition_dim >= 0 || grid.tp_rank() == 0) && stage.owns(table[p]);
    slices_.push_back({params[p].data<float>() + first, grad, m_.back().data(), v_.back().data(), n,
                       first, table[p].weight_decay, counted});
  }
  if (zero) {
    param_block_.resize(static_cast<std::size_t>(part_.param_block()));
    all_params_.resize(static_cast<std::size_t>(part_.param_block() * grid.dp_size()));
  }
  if (!zero) place_grads_in_buffer();
  can_stream_ = in_place_;
  if (!can_stream_) return;
  // Each group's terms from offset 0 of the scratch, each on a 64-byte line (as in reduced_).
  groups_ = model.grad_groups();
  scratch_offset_.resize(term_offset_.size());
  for (std::size_t p = 0; p < term_offset_.size(); ++p)
    scratch_offset_[p].resize(term_offset_[p].size());
  for (const auto& group : groups_) {
    std::int64_t at = 0;
    for (const GradTermId& id : group) {
      scratch_offset_[id.param][id.term] = at;
      at += (model.grads()[id.param][id.term].numel() + 15) / 16 * 16;
    }
    scratch_len_ = std::max(scratch_len_, at);
  }
  model.set_grads_ready([this](int group) { group_ready(group); });
}

GradSync::~GradSync() {
  if (can_stream_) model_.set_grads_ready(nullptr);
}

void GradSync::point_terms(float* base, const std::vector<std::vector<std::int64_t>>& offset) {
  GradTerms& g = model_.grads();
  for (std::size_t p = 0; p < g.size(); ++p)
    for (std::size_t t = 0; t < g[p].size(); ++t) g[p][t].rebind(base + offset[p][t]);
}

void GradSync::group_ready(int group) {
  if (!merging_) return;
  const GradTerms& g = model_.grads();
  for (const GradTermId& id : groups_[static_cast<std::size_t>(group)])
    reducer_.merge_part(term_offset_[id.param][id.term],
                        scratch_.data() + scratch_offset_[id.param][id.term],
                        g[id.param][id.term].numel());
}

// Without ZeRO the flat buffer holds every term at term_offset_: the model's terms become views
// of it (their own storage is freed), when each view starts on a 64-byte boundary (the kernels
// that write gradients may use aligned vector stores).
void GradSync::place_grads_in_buffer() {
  GradTerms& g = model_.grads();
  for (std::size_t p = 0; p < g.size(); ++p)
    for (std::size_t t = 0; t < g[p].size(); ++t)
      if (term_offset_[p][t] % 16 != 0) return;
  const ParamTable& table = model_.table();
  const PipelineStage& stage = model_.stage();
  for (std::size_t p = 0; p < g.size(); ++p)
    for (std::size_t t = 0; t < g[p].size(); ++t) {
      Tensor& term = g[p][t];
      Tensor view = Tensor::view(reduced_.data() + term_offset_[p][t], DType::f32, term.shape(), {},
                                 term.name());
      if (term.numel() > 0) view.set_shard(term.shard());
      if (term.numel() > 0 && !stage.holds_term(table[p], t))
        absent_terms_.push_back({term_offset_[p][t], term.numel()});
      term = std::move(view);
    }
  in_place_ = true;
}

void GradSync::begin_microbatch(std::int64_t width) {
  reducer_.flush_deferred();
  if (reducer_.microbatches() == 0) {  // the step's first microbatch decides
    streaming_ = can_stream_ && width < leaves_ && !reducer_.keeps_leaves();
    reducer_.set_root_buffer(streaming_ ? reduced_.data() : nullptr);
    // The copying path writes into reduced_ (a streamed step's first level is reduced_ too).
    if (can_stream_ && !streaming_) point_terms(reduced_.data(), term_offset_);
  }
  if (!streaming_) {
    for (const Span& a : absent_terms_) std::fill_n(reduced_.data() + a.offset, a.n, 0.0f);
    return;
  }
  float* level = reducer_.open_microbatch(width);
  merging_ = level == nullptr;
  if (!merging_) {
    point_terms(level, term_offset_);
    for (const Span& a : absent_terms_) std::fill_n(level + a.offset, a.n, 0.0f);
    return;
  }
  if (std::ssize(scratch_) != scratch_len_) scratch_.resize(static_cast<std::size_t>(scratch_len_));
  point_terms(scratch_.data(), scratch_offset_);
}

void GradSync::push_microbatch(std::int64_t width) {
  if (streaming_) {  // written in place, or merged group by group already
    if (merging_) {
      for (const Span& a : absent_terms_) reducer_.merge_part(a.offset, nullptr, a.n);  // zeros
      reducer_.close_microbatch();
    }
    merging_ = false;
    return;
  }
  const GradTerms& g = model_.grads();
  // The previous microbatch (if any) leaves the buffer for the counter before it is reused.
  reducer_.flush_deferred();
  if (zero_) {
    std::vector<std::vector<const float*>> ptrs;
    for (const auto& terms : g) {
      ptrs.emplace_back();
      for (const auto& t : terms) ptrs.back().push_back(t.data<float>());
    }
    part_.pack_grads(ptrs, flat_.data());
    reducer_.push_microbatch_deferred(flat_.data(), width);
    return;
  }
  if (in_place_) {  // the backward wrote the terms into reduced_ already
    reducer_.push_microbatch_deferred(reduced_.data(), width);
    return;
  }
  // Copy every term into its place in reduced_, the pieces spread over the threads.
  struct Piece {
    const float* src;
    std::int64_t n, dst;
  };
  constexpr std::int64_t kPiece = std::int64_t{1} << 16;
  std::vector<Piece> pieces;
  for (std::size_t p = 0; p < g.size(); ++p)
    for (std::size_t t = 0; t < g[p].size(); ++t)
      for (std::int64_t a = 0; a < g[p][t].numel(); a += kPiece)
        pieces.push_back({g[p][t].data<float>() + a, std::min(kPiece, g[p][t].numel() - a),
                          term_offset_[p][t] + a});
  const int np = static_cast<int>(pieces.size());
#pragma omp parallel for num_threads(threads_) schedule(static) if (threads_ > 1)
  for (int i = 0; i < np; ++i)
    std::copy_n(pieces[i].src, pieces[i].n, reduced_.data() + pieces[i].dst);
  reducer_.push_microbatch_deferred(reduced_.data(), width);
}

void GradSync::reduce() {
  if (streaming_) point_terms(reduced_.data(), term_offset_);  // the step's gradient is there
  if (zero_)
    reducer_.reduce_scatter(grid_.dp_comm(), reduced_);
  else
    reducer_.allreduce(grid_.dp_comm(), reduced_);
  for (std::size_t p = 0; p < slices_.size(); ++p) {
    const int nt = static_cast<int>(term_offset_[p].size());
    if (nt == 1) continue;  // the slice reads reduced_ directly
    std::vector<float*> terms;
    for (int t = 0; t < nt; ++t)
      terms.push_back(reduced_.data() + (zero_ ? part_.grad_offset(p, t) : term_offset_[p][t]));
    exchange_stage_terms(p, terms);
    combine_grad_terms(std::vector<const float*>(terms.begin(), terms.end()), slices_[p].n,
                       slices_[p].grad);
  }
}

// A parameter whose terms are computed on different pipeline stages (the tied embed.weight:
// "lookup" on the first, "head" on the last): each holder sends its fully reduced terms to the
// other and receives theirs (exact copies of the same DP segment), so both combine the same
// values in table order and apply the same update.
void GradSync::exchange_stage_terms(std::size_t p, const std::vector<float*>& terms) {
  const PipelineStage& stage = model_.stage();
  const ParamSpec& spec = model_.table()[p];
  if (stage.count == 1 || !stage.holds(spec)) return;
  const std::int64_t n = slices_[p].n;
  for (std::size_t t = 0; t < terms.size(); ++t) {
    if (stage.holds_term(spec, t)) continue;
    // The term lives on the other end of the pipeline (first <-> last); it needs ours.
    const int partner = stage.first() ? stage.count - 1 : 0;
    std::size_t mine = 0;
    while (mine < terms.size() && !stage.holds_term(spec, mine)) ++mine;
    exchange(grid_.pp_comm(), partner, std::span<const float>(terms[mine], n),
             std::span<float>(terms[t], n));
  }
}

float GradSync::grad_norm() const {
  // Chunks of every counted slice over the threads; each thread's exact partial sum is
  // merged (integer additions: neither the chunking nor the merge order changes a bit).
  // Without ZeRO every DP replica holds the whole reduced gradient, so DP rank r sums only
  // the chunks k with k % dp == r and the exact limb allreduce over DP adds the shares up.
  struct Chunk {
    const float* x;
    std::int64_t n;
  };
  constexpr std::int64_t kChunk = std::int64_t{1} << 16;
  const int dp = grid_.dp_size(), dp_rank = grid_.dp_rank();
  const bool split = !zero_ && dp > 1;
  std::vector<Chunk> chunks;
  std::int64_t k = 0;
  for (const auto& sl : slices_)
    if (sl.count_in_norm)
      for (std::int64_t a = 0; a < sl.n; a += kChunk, ++k)
        if (!split || k % dp == dp_rank)
          chunks.push_back({sl.grad + a, std::min(kChunk, sl.n - a)});
  const int nc = static_cast<int>(chunks.size());
  const int team = std::max(1, std::min(threads_, nc));
  std::vector<SquareSumAccumulator> part(static_cast<std::size_t>(team));
#pragma omp parallel for num_threads(team) schedule(dynamic, 1) if (team > 1)
  for (int c = 0; c < nc; ++c)
    part[static_cast<std::size_t>(omp_get_thread_num())].add(
        std::span<const float>(chunks[c].x, static_cast<std::size_t>(chunks[c].n)));
  SquareSumAccumulator sq;
  for (const auto& acc : part) sq.merge(acc);
  if (zero_ || split) allreduce_square_sum(grid_.dp_comm(), sq);
  allreduce_square_sum(grid_.tp_comm(), sq);
  if (grid_.pp_size() > 1) allreduce_square_sum(grid_.pp_comm(), sq);  // each stage's owned
  return sq.norm();
}

void GradSync::publish_params() {
  if (!zero_) return;
  std::vector<const float*> src;
  std::vector<float*> dst;
  for (auto& p : model_.params()) src.push_back(p.data<float>()), dst.push_back(p.data<float>());
  part_.pack_params(src, param_block_.data());
  allgather(grid_.dp_comm(), param_block_, all_params_);
  part_.unpack_params(all_params_.data(), dst);
}

std::vector<StatePiece> GradSync::pieces(StateKind kind) {
  const ParamTable& table = model_.table();
  const PipelineStage& stage = model_.stage();
  auto& params = model_.params();
  std::vector<StatePiece> out;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const int pi = static_cast<int>(p);
    // Every rank lists every tensor (the trace's sums run over the world in table order); only
    // the owning pipeline stage's pieces count.
    const bool tp_owner = stage.owns(table[p]) &&
                          (table[p].partition_dim >= 0 || grid_.tp_rank() == pi % grid_.tp_size());
    const bool dp_owner = grid_.dp_rank() == pi % grid_.dp_size();
    const std::string name = state_prefix(kind) + table[p].name;
    if (!stage.holds(table[p])) {
      out.push_back(absent_piece(name, table[p]));
      continue;
    }
    if (kind == StateKind::param) {
      out.push_back(piece_of(name, params[p], tp_owner && dp_owner));
      continue;
    }
    StatePiece s = piece_of(name, params[p], tp_owner && (zero_ || dp_owner));
    const UpdateSlice& sl = slices_[p];  // empty on stages that do not hold the parameter
    s.flat_begin = sl.first;
    s.flat_end = sl.first + sl.n;
    s.data = kind == StateKind::grad ? sl.grad : kind == StateKind::adam_m ? sl.m : sl.v;
    check_piece(s);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lockstep
