// The GPT model (model/gpt.hpp): construction (parameters and gradient terms by the table),
// init, the op-trace hook, and the forward and backward drivers, which call the blocks in
// order (model/gpt_impl.hpp: embedding, per layer attention and MLP, LM head and loss; their
// files are model/gpt_{embedding,attention,mlp,head,residual}.cpp, the op names
// model/gpt_op_names.cpp, the causal attention GEMMs model/gpt_causal_gemms.cpp).
// Determinism contract (docs/design.md sections 2 and 3): gpt.hpp's; the drivers add no
// arithmetic of their own, and the blocks run (and record) in the order of op_names().
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "model/gpt_impl.hpp"
#include "model/gpt_op_names.hpp"
#include "runtime/error.hpp"

namespace lockstep {

using namespace gpt_detail;

struct Gpt::Impl : State {
  std::vector<ForwardState> slots;  // pipeline activation slots (set_slots)
};

namespace {
// The forward's state of this microbatch: sizes, the dropout and op-trace switches, the FFN
// row stride (State::ffn_ld), the sequences' ids, every token's position; no residual add
// pending.
void begin_forward(State& m, const ModelConfig& cfg, int tp, const std::int64_t* seq_ids,
                   std::int64_t mb, std::int64_t step, bool train) {
  const std::int64_t C = cfg.context, T = mb * C, fl = cfg.ffn / tp;
  m.T = T;
  m.mb = mb;
  m.step = step;
  m.train = train;
  m.dropout_on = train && cfg.dropout > 0.0f;
  m.rec = m.obs && m.obs->recording();
  m.ffn_ld = m.rec ? fl : gemm_row_stride(fl);
  m.seq_ids.assign(seq_ids, seq_ids + mb);
  m.pos_of.resize(static_cast<std::size_t>(T));
  for (std::int64_t t = 0; t < T; ++t) m.pos_of[t] = static_cast<std::int32_t>(t % C);
  m.pending_res = -1;
}
}  // namespace

gpt_detail::Pass::Pass(State& state, const ModelConfig& config, const TpContext& tpc,
                       std::vector<Tensor>& parameters, GradTerms& gradients,
                       std::uint64_t dropout_seed)
    : m(state),
      cfg(config),
      tp(tpc),
      ctx(tpc.kernel()),
      tok(tpc.tokens()),
      params(parameters),
      grads(gradients),
      seed(dropout_seed),
      C(config.context),
      d(config.d_model),
      T(state.T),
      mb(state.mb),
      dl(config.d_model / tpc.size()),
      fl(config.ffn / tpc.size()),
      vl(config.padded_vocab() / tpc.size()),
      H(config.heads),
      Hl(config.heads / tpc.size()),
      hd(config.head_dim()),
      h0(Hl * tpc.rank()),
      p(config.dropout),
      rs(state.dropout_on ? 1.0f / (1.0f - p) : 1.0f),
      scale(1.0f / std::sqrt(static_cast<float>(hd))),
      B(ctx.reduce_block) {}

void Gpt::set_observer(OpObserver* observer) {
  Impl& m = *impl_;
  m.obs = observer;
  m.op_name.clear();
  m.op_perturb.clear();
  if (!observer) return;
  m.op_name = op_id_names(cfg_.layers);
  const int n = static_cast<int>(m.op_name.size());
  m.op_perturb.assign(static_cast<std::size_t>(n), 0);
  for (int i = 0; i < n; ++i) m.op_perturb[i] = observer->perturb(m.op_name[i]) ? 1 : 0;
}

Gpt::Gpt(const ModelConfig& cfg, const Grid* grid, Determinism mode, KernelCtx ctx,
         std::span<const std::int64_t> stage_layers)
    : cfg_(cfg),
      table_(ParamTable::build(cfg)),
      tp_(grid, mode, ctx, cfg.context),
      stage_(PipelineStage::of(cfg, grid ? grid->pp_size() : 1, grid ? grid->pp_rank() : 0,
                               stage_layers)),
      impl_(std::make_unique<Impl>()) {
  validate_model_config(cfg_, tp_.size());
  // The gradient terms are views into one block, each on a 64-byte line. A trainer that keeps
  // them elsewhere (launch/train/grad_sync.hpp points them into its reducer's buffer) then
  // leaves the block untouched: its pages, zero until written, never become resident, where
  // one small tensor per term, freed, would stay resident among the parameters in the heap.
  const auto lines = [](std::int64_t n) { return (n + 15) / 16 * 16; };  // a term's floats
  std::int64_t grad_floats = 0;
  for (std::size_t i = 0; i < table_.size(); ++i) {
    if (!stage_.holds(table_[i])) continue;
    const std::int64_t n = shape_numel(table_[i].shard(tp_.size(), tp_.rank()).local_shape());
    grad_floats += static_cast<std::int64_t>(table_[i].terms.size()) * lines(n);
  }
  grad_block_ = Tensor::zeros(DType::f32, {grad_floats}, "grad");
  std::int64_t at = 0;
  for (std::size_t i = 0; i < table_.size(); ++i) {
    const ParamSpec& s = table_[i];
    const ShardDesc sd = s.shard(tp_.size(), tp_.rank());
    // A parameter of another pipeline stage has no storage here (empty tensors).
    const bool held = stage_.holds(s);
    const Shape shape = held ? sd.local_shape() : Shape{0};
    Tensor param = Tensor::zeros(DType::f32, shape, s.name);
    if (held) param.set_shard(sd);
    params_.push_back(std::move(param));
    std::vector<Tensor> terms;
    for (const std::string& tn : s.terms) {
      Tensor t = Tensor::view(grad_block_.data<float>() + at, DType::f32, shape, {},
                              "grad/" + s.name + "/" + tn);
      if (held) t.set_shard(sd);
      at += lines(shape_numel(shape));
      terms.push_back(std::move(t));
    }
    grads_.push_back(std::move(terms));
  }
  auto idx = [&](const std::string& n) {
    return table_.contains(n) ? static_cast<int>(table_.index_of(n)) : -1;
  };
  impl_->embed = idx("embed.weight");
  impl_->pos = idx("pos_embed.weight");
  impl_->lnfw = idx("final_ln.weight");
  impl_->lnfb = idx("final_ln.bias");
  for (std::int64_t l = 0; l < cfg_.layers; ++l) {
    const std::string L = "layers." + std::to_string(l) + ".";
    impl_->li.push_back(
        LayerIdx{idx(L + "ln1.weight"), idx(L + "ln1.bias"), idx(L + "attn.q.weight"),
                 idx(L + "attn.q.bias"), idx(L + "attn.k.weight"), idx(L + "attn.k.bias"),
                 idx(L + "attn.v.weight"), idx(L + "attn.v.bias"), idx(L + "attn.proj.weight"),
                 idx(L + "attn.proj.bias"), idx(L + "ln2.weight"), idx(L + "ln2.bias"),
                 idx(L + "mlp.fc1.weight"), idx(L + "mlp.fc1.bias"), idx(L + "mlp.fc2.weight"),
                 idx(L + "mlp.fc2.bias")});
  }
  impl_->acts.resize(static_cast<std::size_t>(cfg_.layers));
}

Gpt::~Gpt() = default;

void Gpt::init(std::uint64_t seed) {
  seed_ = seed;
  for (std::size_t i = 0; i < table_.size(); ++i)
    if (stage_.holds(table_[i])) init_param(table_[i], i, seed, params_[i]);
}

std::span<const float> Gpt::token_losses() const {
  return impl_->loss_tok;
}

float Gpt::forward_loss(const std::int32_t* tokens, const std::int32_t* labels,
                        const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                        bool train) {
  return forward(tokens, labels, seq_ids, mb, step, train);
}

float Gpt::forward_backward(const std::int32_t* tokens, const std::int32_t* labels,
                            const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                            float loss_scale) {
  const float loss = forward(tokens, labels, seq_ids, mb, step, true);
  backward(tokens, labels, loss_scale);
  return loss;
}

float Gpt::forward(const std::int32_t* tokens, const std::int32_t* labels,
                   const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step, bool train) {
  check(mb >= 1, "Gpt::forward: microbatch of " + std::to_string(mb) + " sequences",
        "pass at least one sequence");
  begin_forward(*impl_, cfg_, tp_.size(), seq_ids, mb, step, train);
  const Pass ps(*impl_, cfg_, tp_, params_, grads_, seed_);
  embedding_forward(ps, tokens);
  for (std::int64_t l = 0; l < cfg_.layers; ++l) {
    attention_forward(ps, l);
    mlp_forward(ps, l);
  }
  return lm_head_forward(ps, labels);
}

void Gpt::set_slots(std::int64_t n) {
  impl_->slots.resize(static_cast<std::size_t>(n));
  for (ForwardState& f : impl_->slots) f.acts.resize(static_cast<std::size_t>(cfg_.layers));
}

std::int64_t Gpt::forward_state_bytes() const {
  std::int64_t b = static_cast<const ForwardState&>(*impl_).bytes();
  for (const ForwardState& f : impl_->slots) b += f.bytes();
  return b;
}

void Gpt::swap_slot(std::int64_t slot) {
  check(
      slot >= 0 && slot < static_cast<std::int64_t>(impl_->slots.size()),
      "Gpt: activation slot " + std::to_string(slot) + " of " + std::to_string(impl_->slots.size()),
      "call set_slots with the schedule's slot count first");
  std::swap(static_cast<ForwardState&>(*impl_), impl_->slots[static_cast<std::size_t>(slot)]);
}

float Gpt::forward_stage(std::int64_t slot, const std::int32_t* tokens, const std::int32_t* labels,
                         const std::int64_t* seq_ids, std::int64_t mb, std::int64_t step,
                         const float* h_in) {
  check(mb >= 1, "Gpt::forward_stage: microbatch of " + std::to_string(mb) + " sequences",
        "pass at least one sequence");
  swap_slot(slot);
  begin_forward(*impl_, cfg_, tp_.size(), seq_ids, mb, step, true);
  const Pass ps(*impl_, cfg_, tp_, params_, grads_, seed_);
  if (stage_.first()) {
    embedding_forward(ps, tokens);
  } else {
    ensure(impl_->h, ps.T * ps.d);
    ensure(impl_->y, ps.T * ps.d);
    std::copy_n(h_in, ps.T * ps.d, impl_->h.data());
  }
  for (std::int64_t l = stage_.first_layer; l < stage_.end_layer; ++l) {
    attention_forward(ps, l);
    mlp_forward(ps, l);
  }
  float loss = 0.0f;
  if (stage_.last())
    loss = lm_head_forward(ps, labels);
  else
    finish_stream(ps);
  swap_slot(slot);
  return loss;
}

std::span<const float> Gpt::stage_output(std::int64_t slot) const {
  const ForwardState& f = impl_->slots.at(static_cast<std::size_t>(slot));
  return cs(f.h);
}

void Gpt::backward_stage(std::int64_t slot, const std::int32_t* tokens, const std::int32_t* labels,
                         float loss_scale, const float* dh_in) {
  swap_slot(slot);
  impl_->rec = impl_->obs && impl_->obs->recording();
  const Pass ps(*impl_, cfg_, tp_, params_, grads_, seed_);
  int group = 0;  // grad_groups()' order
  auto ready = [&] {
    if (grads_ready_) grads_ready_(group);
    ++group;
  };
  if (stage_.last()) {
    lm_head_backward(ps, labels, loss_scale);
    ready();
  } else {
    State& m = *impl_;
    ensure(m.dh, ps.T * ps.d);
    ensure(m.dy, ps.T * ps.d);
    ensure(m.ln_scratch, ps.T * ps.d);
    std::copy_n(dh_in, ps.T * ps.d, m.dh.data());
  }
  for (std::int64_t l = stage_.end_layer - 1; l >= stage_.first_layer; --l) {
    mlp_backward(ps, l);
    attention_backward(ps, l);
    ready();
  }
  if (stage_.first()) {
    embedding_backward(ps, tokens);
    ready();
  }
  swap_slot(slot);
}

std::span<const float> Gpt::stage_input_grad() const {
  return cs(impl_->dh);
}

std::vector<std::vector<GradTermId>> Gpt::grad_groups() const {
  const Impl& m = *impl_;
  // The terms this stage computes, of the listed ones.
  auto computed = [&](std::initializer_list<GradTermId> ids) {
    std::vector<GradTermId> v;
    for (const GradTermId& id : ids)
      if (id.param >= 0 && stage_.holds_term(table_[static_cast<std::size_t>(id.param)],
                                             static_cast<std::size_t>(id.term)))
        v.push_back(id);
    return v;
  };
  std::vector<std::vector<GradTermId>> g;
  if (stage_.last()) g.push_back(computed({{m.embed, 0}, {m.lnfw, 0}, {m.lnfb, 0}}));
  for (std::int64_t l = stage_.end_layer - 1; l >= stage_.first_layer; --l) {
    const LayerIdx& I = m.li[static_cast<std::size_t>(l)];
    g.push_back(computed({{I.ln1w, 0},
                          {I.ln1b, 0},
                          {I.q, 0},
                          {I.qb, 0},
                          {I.k, 0},
                          {I.kb, 0},
                          {I.v, 0},
                          {I.vb, 0},
                          {I.proj, 0},
                          {I.projb, 0},
                          {I.ln2w, 0},
                          {I.ln2b, 0},
                          {I.fc1, 0},
                          {I.fc1b, 0},
                          {I.fc2, 0},
                          {I.fc2b, 0}}));
  }
  if (stage_.first()) g.push_back(computed({{m.pos, 0}, {m.embed, 1}}));
  std::size_t n = 0, terms = 0;
  for (const auto& grp : g) n += grp.size();
  for (std::size_t p = 0; p < table_.size(); ++p)
    for (std::size_t t = 0; t < table_[p].terms.size(); ++t)
      if (stage_.holds_term(table_[p], t)) ++terms;
  check(n == terms, "Gpt::grad_groups: " + std::to_string(n) + " of the stage's " +
                        std::to_string(terms) + " gradient terms grouped");
  return g;
}

void Gpt::backward(const std::int32_t* tokens, const std::int32_t* labels, float loss_scale) {
  impl_->rec = impl_->obs && impl_->obs->recording();
  const Pass ps(*impl_, cfg_, tp_, params_, grads_, seed_);
  auto ready = [&](std::int64_t group) {
    if (grads_ready_) grads_ready_(static_cast<int>(group));
  };
  lm_head_backward(ps, labels, loss_scale);
  ready(0);
  for (std::int64_t l = cfg_.layers - 1; l >= 0; --l) {
    mlp_backward(ps, l);
    attention_backward(ps, l);
    ready(cfg_.layers - l);
  }
  embedding_backward(ps, tokens);
  ready(cfg_.layers + 1);
}

}  // namespace lockstep
