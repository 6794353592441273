#include "launch/grad_sync.hpp"

#include <algorithm>

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

GradSync::GradSync(Gpt& model, const Grid& grid, Determinism mode, bool zero)
    : model_(model),
      grid_(grid),
      zero_(zero),
      part_(numels(model), term_counts(model), grid.dp_size(), grid.dp_rank()),
      reducer_(zero ? part_.grad_block() * grid.dp_size() : [&] {
        std::int64_t total = 0;
        for (const auto& terms : model.grads())
          for (const auto& t : terms) total += t.numel();
        return total;
      }(),
               mode) {
  for (const auto& terms : model.grads()) {
    term_offset_.emplace_back();
    for (const auto& t : terms) {
      term_offset_.back().push_back(flat_len_);
      flat_len_ += t.numel();
    }
  }
  const ParamTable& table = model.table();
  auto& params = model.params();
  flat_.resize(static_cast<std::size_t>(zero ? part_.grad_block() * grid.dp_size() : flat_len_));
  reduced_.resize(static_cast<std::size_t>(zero ? part_.grad_block() : flat_len_));
  for (std::size_t p = 0; p < params.size(); ++p) {
    const std::int64_t n = zero ? part_.owned(p) : params[p].numel();
    const std::int64_t first = zero ? part_.first(p) : 0;
    grad_.emplace_back(static_cast<std::size_t>(zero ? part_.segment(p) : n));
    m_.emplace_back(static_cast<std::size_t>(n));
    v_.emplace_back(static_cast<std::size_t>(n));
    const bool counted = table[p].partition_dim >= 0 || grid.tp_rank() == 0;
    slices_.push_back({params[p].data<float>() + first, grad_.back().data(), m_.back().data(),
                       v_.back().data(), n, first, table[p].weight_decay, counted});
  }
  if (zero) {
    param_block_.resize(static_cast<std::size_t>(part_.param_block()));
    all_params_.resize(static_cast<std::size_t>(part_.param_block() * grid.dp_size()));
  }
}

void GradSync::push_microbatch() {
  const GradTerms& g = model_.grads();
  if (zero_) {
    std::vector<std::vector<const float*>> ptrs;
    for (const auto& terms : g) {
      ptrs.emplace_back();
      for (const auto& t : terms) ptrs.back().push_back(t.data<float>());
    }
    part_.pack_grads(ptrs, flat_.data());
  } else {
    for (std::size_t p = 0; p < g.size(); ++p)
      for (std::size_t t = 0; t < g[p].size(); ++t)
        std::copy_n(g[p][t].data<float>(), g[p][t].numel(), flat_.data() + term_offset_[p][t]);
  }
  reducer_.push_microbatch(flat_.data());
}

void GradSync::reduce() {
  if (zero_)
    reducer_.reduce_scatter(grid_.dp_comm(), reduced_);
  else
    reducer_.allreduce(grid_.dp_comm(), reduced_);
  for (std::size_t p = 0; p < slices_.size(); ++p) {
    std::vector<const float*> terms;
    const int nt = static_cast<int>(term_offset_[p].size());
    for (int t = 0; t < nt; ++t)
      terms.push_back(reduced_.data() + (zero_ ? part_.grad_offset(p, t) : term_offset_[p][t]));
    combine_grad_terms(terms, slices_[p].n, slices_[p].grad);
  }
}

float GradSync::grad_norm() const {
  SquareSumAccumulator sq;
  for (const auto& sl : slices_)
    if (sl.count_in_norm) sq.add(std::span<const float>(sl.grad, static_cast<std::size_t>(sl.n)));
  if (zero_) allreduce_square_sum(grid_.dp_comm(), sq);
  allreduce_square_sum(grid_.tp_comm(), sq);
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
  auto& params = model_.params();
  std::vector<StatePiece> out;
  for (std::size_t p = 0; p < params.size(); ++p) {
    const int pi = static_cast<int>(p);
    const bool tp_owner = table[p].partition_dim >= 0 || grid_.tp_rank() == pi % grid_.tp_size();
    const bool dp_owner = grid_.dp_rank() == pi % grid_.dp_size();
    const std::string name = state_prefix(kind) + table[p].name;
    if (kind == StateKind::param) {
      out.push_back(piece_of(name, params[p], tp_owner && dp_owner));
      continue;
    }
    StatePiece s = piece_of(name, params[p], tp_owner && (zero_ || dp_owner));
    const UpdateSlice& sl = slices_[p];
    s.flat_begin = sl.first;
    s.flat_end = sl.first + sl.n;
    s.data = kind == StateKind::grad ? sl.grad : kind == StateKind::adam_m ? sl.m : sl.v;
    check_piece(s);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace lockstep
