// The GPT embedding block (model/gpt_impl.hpp): x0 = dropout(tok_emb + pos_emb) with the
// vocab-parallel token lookup, and its backward, the position and token-lookup gradients.
// Determinism contract (docs/design.md sections 2 and 3): the forward is a lookup and one add
// per element (threads split tokens); the embedding dropout mask is Philox at (seed, step,
// layer code 0, site 0, logical token and feature); the gradients are canonical sums over the
// microbatch's tokens into each row (token_row_grad), embed.weight's into its "lookup" term,
// kept apart from the head's (gpt.hpp's GRADIENT CONTRACT).
#include "model/gpt_impl.hpp"
#include "model/ops.hpp"
#include "parallel/vocab_parallel.hpp"

namespace lockstep::gpt_detail {

namespace {
// h[t] = h[t] + pos_emb[t % C] for every token t.
void add_positions(const Pass& ps, const float* pe, float* h) {
  const std::int64_t T = ps.T, C = ps.C, d = ps.d;
#pragma omp parallel for num_threads(ps.ctx.threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) {
    float* x = h + t * d;
    const float* pr = pe + (t % C) * d;
    for (std::int64_t k = 0; k < d; ++k) x[k] = x[k] + pr[k];
  }
}
}  // namespace

void embedding_forward(const Pass& ps, const std::int32_t* tokens) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d;
  ensure(m.h, T * d);
  ensure(m.y, T * d);
  vocab_embedding_forward(ps.tp, tokens, T, ps.P(m.embed), ps.cfg.padded_vocab(), d, m.h.data());
  add_positions(ps, ps.P(m.pos), m.h.data());
  if (m.dropout_on) {
    ensure(m.keep0, T * d);
    dropout_keep_tokens(ps.ctx, ps.seed, dropout_stream(m.step, 0, kDropEmbed), m.seq_ids.data(), T,
                        ps.C, d, ps.p, m.keep0.data());
    dropout_apply(ps.ctx, m.h.data(), m.keep0.data(), ps.rs, T * d, m.h.data());
  }
  if (m.rec) m.record(kEmbedFwd, {ps.pp(m.embed), ps.pp(m.pos), id_bytes(tokens, T)}, cs(m.h));
}

void embedding_backward(const Pass& ps, const std::int32_t* tokens) {
  State& m = ps.m;
  const std::int64_t T = ps.T, d = ps.d;
  // dx0 = dropout'(dh); position and lookup grads over tokens
  const float* dx0 = branch_dropout_backward(ps, m.keep0);
  token_row_grad(ps.tok, m.pos_of.data(), T, dx0, d, d, 0, ps.C, ps.G(m.pos));
  token_row_grad(ps.tok, tokens, T, dx0, d, d, ps.vl * ps.tp.rank(), ps.vl, ps.G(m.embed, 1));
  if (m.rec) {
    m.record(kPosWgrad, {cs(dx0, T * d)}, ps.gg(m.pos));
    m.record(kEmbedWgrad, {cs(dx0, T * d), id_bytes(tokens, T)}, ps.gg(m.embed, 1));
  }
}

}  // namespace lockstep::gpt_detail
