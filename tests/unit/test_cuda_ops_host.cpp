// Host/device bodies of the deterministic CUDA kernels (runtime/cuda/row_ops_core.hpp,
// tokens_by_row.hpp), compiled here by the host compiler, against the CPU kernels they must
// reproduce bit for bit: LayerNorm forward and backward (model/ops.hpp), the causal softmax and
// its backward (model/kernels/attn_rows.hpp), the cross-entropy forward and backward
// (parallel/vocab_parallel.hpp, TP = 1), AdamW (optim/adamw.hpp) and the embedding backward
// (parallel/vocab_parallel.hpp token_row_grad). Needs no GPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "model/kernels/attn_rows.hpp"
#include "model/ops.hpp"
#include "optim/adamw.hpp"
#include "parallel/vocab_parallel.hpp"
#include "runtime/cuda/row_ops_core.hpp"
#include "runtime/cuda/tokens_by_row.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::same_bits;

TEST_CASE("CUDA LayerNorm row body == layernorm_forward bit for bit", "[cuda][ops]") {
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
  for (std::int64_t n : {1, 7, 64, 65, 200, 768}) {
    for (int block : {1, 16, 64}) {
      INFO("tree=" << enum_name(tree) << " n=" << n << " block=" << block);
      const std::int64_t T = 11;  // not a multiple of the CPU's 8-row groups
      auto x = testing::mixed_floats(std::size_t(T * n), std::uint64_t(n * 100 + block));
      for (std::int64_t t = 0; t < T; ++t) x[std::size_t(t * n)] += float(t);  // shift the means
      const auto w = testing::mixed_floats(std::size_t(n), 5);
      const auto b = testing::mixed_floats(std::size_t(n), 6);
      std::vector<float> xh(std::size_t(T * n)), rs(static_cast<std::size_t>(T)),
          y(std::size_t(T * n));
      layernorm_forward(KernelCtx{best_isa(), 2, block, tree}, x.data(), T, n, w.data(), b.data(), 1e-5f,
                        xh.data(), rs.data(), y.data());
      std::vector<float> xh2(xh.size()), rs2(rs.size()), y2(y.size());
      for (std::int64_t t = 0; t < T; ++t)
        hd::layernorm_row_forward(x.data() + t * n, n, w.data(), b.data(), 1e-5f,
                                  hd_rule(SumRule{block, tree}),
                                  xh2.data() + t * n, rs2.data() + t, y2.data() + t * n);
      CHECK(same_bits(xh, xh2));
      CHECK(same_bits(rs, rs2));
      CHECK(same_bits(y, y2));
    }
  }
}

TEST_CASE("CUDA LayerNorm backward bodies == layernorm_backward bit for bit", "[cuda][ops]") {
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
    for (std::int64_t n : {1, 7, 64, 65, 200, 768})
      for (int block : {1, 16, 64})
        for (std::int64_t seq : {0, 4}) {  // the token axis flat, or sequences of 4 rows
          const std::int64_t T =
              seq ? 12 : 11;  // 3 sequences; 11: not a multiple of the row groups
          KernelCtx ctx{best_isa(), 2, block, tree};
          if (seq) ctx = ctx.over_sequences(seq);
          const hd::SumRuleHD features = hd_rule(ctx.flat().rule()), tokens = hd_rule(ctx.rule());
          const auto dy = testing::mixed_floats(std::size_t(T * n), std::uint64_t(n * 7 + block));
          const auto xhat = testing::mixed_floats(std::size_t(T * n), 8);
          auto rstd = testing::mixed_floats(std::size_t(T), 9);
          for (float& r : rstd) r = 1.0f + r * r;
          const auto w = testing::mixed_floats(std::size_t(n), 10);
          const auto res = testing::mixed_floats(std::size_t(T * n), 12);
          for (bool accumulate : {false, true}) {
            INFO("tree=" << enum_name(tree) << " n=" << n << " block=" << block << " seq=" << seq
                         << " accumulate=" << accumulate);
            std::vector<float> dx = res, dw(static_cast<std::size_t>(n)),
                               db(static_cast<std::size_t>(n)), scratch(dy.size());
            layernorm_backward(ctx, dy.data(), xhat.data(), rstd.data(), w.data(), T, n, dx.data(),
                               accumulate, dw.data(), db.data(), scratch.data());
            std::vector<float> dx2 = res, dw2(dw.size()), db2(db.size());
            for (std::int64_t t = 0; t < T; ++t)
              hd::layernorm_row_backward(dy.data() + t * n, xhat.data() + t * n,
                                         rstd[std::size_t(t)], w.data(), n, features, accumulate,
                                         dx2.data() + t * n);
            for (std::int64_t j = 0; j < n; ++j)
              hd::layernorm_param_grad_column(dy.data(), xhat.data(), T, n, j, tokens,
                                              dw2.data() + j, db2.data() + j);
            CHECK(same_bits(dx, dx2));
            CHECK(same_bits(dw, dw2));
            CHECK(same_bits(db, db2));
          }
        }
}

TEST_CASE("CUDA softmax row bodies == softmax_causal_rows / softmax_backward_rows bit for bit",
          "[cuda][ops]") {
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
    for (std::int64_t C : {1, 5, 64, 100, 128, 257})
      for (int block : {1, 16, 64}) {
        INFO("tree=" << enum_name(tree) << " C=" << C << " block=" << block);
        const KernelCtx ctx{best_isa(), 1, block, tree};
        const hd::SumRuleHD rule = hd_rule(ctx.rule());
        const float scale = 0.125f;
        auto S = testing::mixed_floats(std::size_t(C * C), std::uint64_t(C + block));
        for (float& v : S) v *= 16.0f;  // rows whose max matters
        std::vector<float> P = S, P2 = S;
        softmax_causal_rows(ctx, P.data(), C, 0, C, scale);
        for (std::int64_t i = 0; i < C; ++i)
          hd::softmax_causal_row(P2.data() + i * C, C, i, scale, rule);
        CHECK(same_bits(P, P2));
        const auto dP = testing::mixed_floats(std::size_t(C * C), 77);
        std::vector<float> G = dP, G2 = dP;
        softmax_backward_rows(ctx, P.data(), G.data(), C, 0, C, scale);
        for (std::int64_t i = 0; i < C; ++i)
          hd::softmax_backward_row(P.data() + i * C, G2.data() + i * C, C, i, scale, rule);
        CHECK(same_bits(G, G2));
      }
}

TEST_CASE("CUDA cross-entropy bodies == vocab_parallel_ce_forward / _backward bit for bit",
          "[cuda][ops]") {
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
    for (std::int64_t V : {1, 7, 256, 1000}) {
      INFO("tree=" << enum_name(tree) << " V=" << V);
      const std::int64_t T = 13;
      const KernelCtx ctx{best_isa(), 2, 64, tree};
      const TpContext tp(nullptr, Determinism::invariant, ctx);
      auto logits = testing::mixed_floats(std::size_t(T * V), std::uint64_t(V));
      for (float& v : logits) v *= 12.0f;
      std::vector<std::int32_t> labels(static_cast<std::size_t>(T));
      for (std::int64_t t = 0; t < T; ++t) labels[std::size_t(t)] = std::int32_t((t * 37) % V);
      const auto Tn = static_cast<std::size_t>(T);
      std::vector<float> l = logits, mx(Tn), se(Tn), loss(Tn), scratch(2 * Tn);
      vocab_parallel_ce_forward(tp, l.data(), labels.data(), T, V, mx.data(), se.data(),
                                scratch.data(), loss.data());
      std::vector<float> l2 = logits, mx2(mx.size()), se2(se.size()), loss2(loss.size());
      for (std::int64_t t = 0; t < T; ++t) {
        float* row = l2.data() + t * V;
        float target;
        mx2[std::size_t(t)] = hd::ce_max_signed_zero(hd::row_max(row, V));
        hd::ce_row_exp(row, V, mx2[std::size_t(t)], labels[std::size_t(t)], hd_rule(ctx.rule()),
                       &se2[std::size_t(t)], &target);
        loss2[std::size_t(t)] = hd::ce_row_loss(se2[std::size_t(t)], mx2[std::size_t(t)], target);
      }
      CHECK(same_bits(l, l2));
      CHECK(same_bits(mx, mx2));
      CHECK(same_bits(se, se2));
      CHECK(same_bits(loss, loss2));
      vocab_parallel_ce_backward(tp, l.data(), se.data(), labels.data(), T, V, 1.0f / 12.0f);
      for (std::int64_t t = 0; t < T; ++t)
        hd::ce_row_backward(l2.data() + t * V, V, se2[std::size_t(t)], labels[std::size_t(t)],
                            1.0f / 12.0f);
      CHECK(same_bits(l, l2));
    }
}

TEST_CASE("CUDA AdamW element == adamw_step bit for bit", "[cuda][ops]") {
  const AdamWConfig cfg;
  for (std::int64_t step : {1, 2, 10, 1000}) {
    for (bool decay : {true, false}) {
      const AdamWHyper h = AdamWHyper::at(cfg, 3e-4 * double(step % 7 + 1), step, decay);
      const std::size_t n = 1031;
      auto p = testing::mixed_floats(n, 1), g = testing::mixed_floats(n, 2);
      auto m = testing::mixed_floats(n, 3), v = testing::mixed_floats(n, 4);
      for (auto& e : v) e = e * e;  // second moments are non-negative
      auto p2 = p, m2 = m, v2 = v;
      adamw_step(h, p, g, m, v);
      const AdamWScalars s = adamw_scalars(h);
      const hd::AdamWScalarsHD sd{s.decay,           s.decay_factor, s.beta1,
                                  s.one_minus_beta1, s.beta2,        s.one_minus_beta2,
                                  s.bc2_sqrt,        s.eps,          s.step_size};
      for (std::size_t i = 0; i < n; ++i) hd::adamw_element(sd, p2[i], g[i], m2[i], v2[i]);
      CHECK(same_bits(p, p2));
      CHECK(same_bits(m, m2));
      CHECK(same_bits(v, v2));
    }
  }
}

TEST_CASE("CUDA embedding-gradient body == token_row_grad bit for bit", "[cuda][ops]") {
  // rows * blocks small vs large picks token_row_grad's dense or sparse path; both must match.
  struct Case {
    std::int64_t T, rows, row_lo;
    int block;
  };
  for (TreeShape tree : {TreeShape::pow2, TreeShape::halving})
  for (std::int64_t seq : {0, 100})
  for (const Case& c : {Case{300, 40, 0, 7}, Case{300, 5000, 100, 7}, Case{1000, 257, 3, 64},
                        Case{64, 3, 0, 64}, Case{0, 4, 0, 64}, Case{129, 1, 0, 1}}) {
    if (seq > 0 && (tree == TreeShape::pow2 || c.T % seq != 0)) continue;
    INFO("tree=" << enum_name(tree) << " seq=" << seq << " T=" << c.T << " rows=" << c.rows << " row_lo=" << c.row_lo << " block=" << c.block);
    const std::int64_t width = 9, ld = 11;
    std::vector<std::int32_t> row_of(std::size_t(c.T));
    std::uint64_t s = std::uint64_t(c.T * 7 + c.rows);
    // Skewed ids: a few hot rows, some ids outside [row_lo, row_lo + rows).
    for (auto& r : row_of) {
      const std::uint64_t u = testing::splitmix64(s);
      r = std::int32_t(u % 4 == 0 ? c.row_lo + std::int64_t(u >> 40) % 3
                                  : std::int64_t(u >> 20) % (c.rows + c.row_lo + 10));
    }
    const auto dX = testing::mixed_floats(std::size_t(std::max<std::int64_t>(1, c.T * ld)), 17);
    std::vector<float> want(std::size_t(c.rows * width)), got(want.size());
    KernelCtx ctx{best_isa(), 2, c.block, tree};
    ctx.sequence = seq;
    token_row_grad(ctx, row_of.data(), c.T, dX.data(), width, ld,
                   c.row_lo, c.rows, want.data());
    const cuda::TokensByRow g = cuda::group_tokens_by_row(row_of.data(), c.T, c.row_lo, c.rows);
    for (std::int64_t r = 0; r < c.rows; ++r)
      for (std::int64_t col = 0; col < width; ++col)
        got[std::size_t(r * width + col)] =
            hd::embedding_grad_column(g.positions.data() + g.offsets[std::size_t(r)],
                                      g.offsets[std::size_t(r + 1)] - g.offsets[std::size_t(r)],
                                      dX.data(), ld, col, c.T, hd_rule(ctx.rule()));
    CHECK(same_bits(want, got));
  }
}
