// Single-process tests of the GPT model (model/gpt.hpp, model/param_table.hpp, model/ops.hpp,
// parallel/vocab_parallel.hpp): the parameter table and the sparse token-axis
// embedding gradient against literal definitions, and the G3 properties that need no MPI:
// one microbatch of 4 sequences == 4 microbatches of 1 merged with BinaryCounter (loss and
// every gradient term, bitwise), 1 thread == 2 threads, every ISA path, forward_loss ==
// forward_backward's loss; the fused attention kernels (AVX-512) == the GEMM path; the memory
// footprint's count of parameters, gradient terms and forward state == what the model allocates.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "model/gpt.hpp"
#include "model/memory_footprint.hpp"
#include "model/ops.hpp"
#include "model/pipeline_stage.hpp"
#include "parallel/vocab_parallel.hpp"
#include "runtime/csum.hpp"
#include "tests/support/test_batch.hpp"
#include "tests/support/test_data.hpp"
#include "tests/support/test_model_config.hpp"

using namespace lockstep;
using lockstep::testing::Batch;
using lockstep::testing::make_batch;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;
using lockstep::testing::tiny_model_config;

namespace {

// This file's batches: seed 7, sequence ids from 100.
constexpr lockstep::testing::BatchSpec kBatch{.seed = 7, .first_seq_id = 100};

bool grads_equal(const Gpt& a, const Gpt& b) {
  for (std::size_t i = 0; i < a.grads().size(); ++i)
    for (std::size_t k = 0; k < a.grads()[i].size(); ++k)
      if (!a.grads()[i][k].bitwise_equal(b.grads()[i][k])) return false;
  return true;
}

}  // namespace

TEST_CASE("parameter table: names, shapes, partitions, terms, order") {
  const ModelConfig c = tiny_model_config(0.0f, false);
  const ParamTable t = ParamTable::build(c);
  REQUIRE(t.size() == 2 + 10 * 2 + 2);
  CHECK(t[0].name == "embed.weight");
  CHECK(t[0].partition_dim == 0);
  CHECK(t[0].terms == std::vector<std::string>{"head", "lookup"});
  CHECK(t[1].name == "pos_embed.weight");
  CHECK(t[1].partition_dim == -1);
  const auto& q = t[t.index_of("layers.1.attn.q.weight")];
  CHECK(q.shape == Shape{128, 128});
  CHECK(q.partition_dim == 0);
  CHECK(q.weight_decay);
  CHECK(t[t.index_of("layers.0.attn.proj.weight")].partition_dim == 1);
  CHECK(t[t.index_of("layers.0.mlp.fc2.weight")].shape == Shape{128, 256});
  CHECK(t[t.index_of("layers.0.mlp.fc2.weight")].partition_dim == 1);
  CHECK(t[t.index_of("layers.0.mlp.fc1.weight")].partition_dim == 0);
  CHECK_FALSE(t[t.index_of("layers.0.ln1.weight")].weight_decay);
  CHECK(t[t.index_of("layers.0.ln1.weight")].init == InitKind::ones);
  CHECK(t[t.size() - 1].name == "final_ln.bias");
  CHECK_THROWS(t.index_of("layers.0.attn.q.bias"));
  const ParamTable tb = ParamTable::build(tiny_model_config(0.0f, true));
  CHECK(tb[tb.index_of("layers.0.attn.q.bias")].partition_dim == 0);
  CHECK(tb[tb.index_of("layers.0.attn.proj.bias")].partition_dim == -1);
  CHECK(tb[tb.index_of("layers.0.mlp.fc1.bias")].partition_dim == 0);
  CHECK(tb[tb.index_of("layers.0.mlp.fc2.bias")].partition_dim == -1);
  CHECK(model_invariance_reason(c, 4, 16, 1).empty());
  CHECK_FALSE(model_invariance_reason(c, 4, 64, 1).empty());  // d/tp = 32 < one block
  CHECK_FALSE(model_invariance_reason(c, 3, 16, 1).empty());
  CHECK_THROWS(validate_model_config(c, 3));
}

TEST_CASE("token_row_grad equals the literal masked dense csum over tokens") {
  const std::int64_t T = 200, width = 5, rows = 9, row_lo = 3;
  const auto dx = mixed_floats(static_cast<std::size_t>(T * width), 5);
  std::vector<std::int32_t> row_of(T);
  std::uint64_t s = 1;
  for (auto& r : row_of) r = static_cast<std::int32_t>(lockstep::testing::splitmix64(s) % 14);
  for (int B : {1, 4, 16, 64}) {
    for (int threads : {1, 2}) {
      std::vector<float> out(rows * width);
      token_row_grad(KernelCtx{best_isa(), threads, B}, row_of.data(), T, dx.data(), width, width,
                     row_lo, rows, out.data());
      std::vector<float> col(T);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t e = 0; e < width; ++e) {
          for (std::int64_t t = 0; t < T; ++t)
            col[t] = row_of[t] == row_lo + r ? dx[t * width + e] : -0.0f;
          const float want = csum(col.data(), T, SumRule{B});
          CHECK(std::memcmp(&want, &out[r * width + e], 4) == 0);
        }
    }
  }
}

TEST_CASE("token_row_grad over sequences equals the literal csum of the token tree") {
  // 5 sequences of 5 blocks: the tree over sequences, each over its blocks, is 6 levels high
  // for 25 leaves (two more than log2), the deepest stack the dense path must hold.
  const std::int64_t B = 16, seq = 80, T = 5 * seq, width = 3;
  const auto dx = mixed_floats(static_cast<std::size_t>(T * width), 11);
  std::vector<std::int32_t> row_of(T);
  std::uint64_t s = 7;
  for (auto& r : row_of) r = static_cast<std::int32_t>(lockstep::testing::splitmix64(s) % 40);
  for (std::int64_t rows : {3, 40}) {  // dense and sparse paths
    KernelCtx ctx{best_isa(), 2, static_cast<int>(B), TreeShape::halving};
    ctx = ctx.over_sequences(seq);
    std::vector<float> out(static_cast<std::size_t>(rows * width));
    token_row_grad(ctx, row_of.data(), T, dx.data(), width, width, 0, rows, out.data());
    std::vector<float> col(T);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t e = 0; e < width; ++e) {
        for (std::int64_t t = 0; t < T; ++t) col[t] = row_of[t] == r ? dx[t * width + e] : -0.0f;
        const float want = csum(col.data(), T, ctx.rule());
        INFO("rows=" << rows << " r=" << r << " e=" << e);
        CHECK(std::memcmp(&want, &out[r * width + e], 4) == 0);
      }
  }
}

TEST_CASE("GPT: 1 microbatch of 4 == 4 microbatches of 1 merged by the tree (bitwise)") {
  for (float dropout : {0.0f, 0.1f}) {
    const ModelConfig cfg = tiny_model_config(dropout, true);
    const KernelCtx ctx = KernelCtx::best(1, 16);
    const Batch b = make_batch(cfg, 4, kBatch);
    const float scale = 1.0f / static_cast<float>(4 * cfg.context);
    Gpt whole(cfg, nullptr, Determinism::invariant, ctx);
    whole.init(3);
    const float loss4 =
        whole.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 4, 2, scale);

    Gpt part(cfg, nullptr, Determinism::invariant, ctx);
    part.init(3);
    // halving (the context's tree): the 4 sequences are the leaves of the tree over tokens
    TreeCombiner loss_counter(1, ctx.tree, 4);
    std::vector<std::vector<TreeCombiner>> counters;
    for (const auto& terms : part.grads()) {
      counters.emplace_back();
      for (const Tensor& g : terms) counters.back().emplace_back(g.numel(), ctx.tree, 4);
    }
    for (std::int64_t m = 0; m < 4; ++m) {
      const std::int64_t off = m * cfg.context;
      const float l = part.forward_backward(b.tokens.data() + off, b.labels.data() + off,
                                            b.seq_ids.data() + m, 1, 2, scale);
      loss_counter.push(&l);
      for (std::size_t i = 0; i < counters.size(); ++i)
        for (std::size_t k = 0; k < counters[i].size(); ++k)
          counters[i][k].push(part.grads()[i][k].data<float>());
    }
    float loss_merged;
    loss_counter.result(&loss_merged);
    INFO("dropout " << dropout);
    CHECK(std::memcmp(&loss_merged, &loss4, 4) == 0);
    int bad = 0;
    for (std::size_t i = 0; i < counters.size(); ++i)
      for (std::size_t k = 0; k < counters[i].size(); ++k) {
        std::vector<float> merged(static_cast<std::size_t>(whole.grads()[i][k].numel()));
        counters[i][k].result(merged.data());
        if (!same_bits(merged.data(), whole.grads()[i][k].data<float>(), merged.size())) {
          UNSCOPED_INFO("differs: " << whole.table()[i].name << "/" << whole.table()[i].terms[k]);
          ++bad;
        }
      }
    CHECK(bad == 0);
  }
}

TEST_CASE("GPT: threads and ISA paths do not change bits; forward_loss == forward_backward") {
  const ModelConfig cfg = tiny_model_config(0.1f, true);
  const Batch b = make_batch(cfg, 2, kBatch);
  const float scale = 1.0f / static_cast<float>(2 * cfg.context);
  Gpt ref(cfg, nullptr, Determinism::invariant, KernelCtx::best(1, 16));
  ref.init(9);
  const float l0 =
      ref.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 2, 4, scale);
  const float le = ref.forward_loss(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 2, 4);
  CHECK(std::memcmp(&l0, &le, 4) == 0);
  const float lnodrop =
      ref.forward_loss(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 2, 4, false);
  CHECK(lnodrop != l0);
  for (Isa isa : supported_isas()) {
    for (int threads : {1, 2}) {
      INFO(isa_name(isa) << " threads " << threads);
      Gpt m(cfg, nullptr, Determinism::invariant, KernelCtx{isa, threads, 16});
      m.init(9);
      const float l =
          m.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 2, 4, scale);
      CHECK(std::memcmp(&l, &l0, 4) == 0);
      CHECK(grads_equal(m, ref));
    }
  }
}

TEST_CASE("GPT: gradients are overwritten per call, and another step changes dropout") {
  const ModelConfig cfg = tiny_model_config(0.1f, false);
  const Batch b = make_batch(cfg, 1, kBatch);
  Gpt m(cfg, nullptr, Determinism::invariant, KernelCtx::best(1, 16));
  m.init(1);
  const float a =
      m.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 1, 0, 0.01f);
  const Tensor g = m.grads()[2][0].clone();
  const float a2 =
      m.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 1, 0, 0.01f);
  CHECK(std::memcmp(&a, &a2, 4) == 0);
  CHECK(g.bitwise_equal(m.grads()[2][0]));
  const float c =
      m.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 1, 1, 0.01f);
  CHECK(c != a);
}

TEST_CASE("GPT: gradient terms are disjoint 64-byte-aligned views into one block") {
  // One block (never touched where a trainer moves the terms elsewhere: gpt.cpp), each term on
  // its own cache lines, in table order, so vector loads stay aligned as with own tensors.
  const ModelConfig cfg = tiny_model_config(0.0f, true);
  Gpt m(cfg, nullptr, Determinism::invariant, KernelCtx::best(1, 16));
  const float* next = nullptr;
  std::int64_t terms = 0;
  for (const auto& param_terms : m.grads())
    for (const Tensor& t : param_terms) {
      INFO(t.describe());
      CHECK_FALSE(t.owns_storage());
      const float* p = t.data<float>();
      CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
      if (next) CHECK(p == next);  // right after the previous term, rounded up to 16 floats
      next = p + (t.numel() + 15) / 16 * 16;
      ++terms;
    }
  CHECK(terms > static_cast<std::int64_t>(m.params().size()));  // the tied embedding: 2 terms
}

TEST_CASE("GPT: fused attention kernels and recomputed probabilities == the GEMM path") {
  // AVX-512 takes model/kernels/attn_gemm.hpp's kernels (and, without dropout, recomputes each
  // head's probabilities in the backward); the scalar path runs CausalGemms' GEMMs on stored
  // probabilities. Zeroed q/v rows of heads 0 and 1 in layer 0 make whole attention outputs
  // and key gradients zero, so the kernels' zero-row fix-ups run too.
  if (!isa_supported(Isa::avx512)) {
    WARN("no AVX-512 on this CPU: the fused attention path is not taken; skipped");
    return;
  }
  for (float dropout : {0.0f, 0.1f}) {
    for (Determinism mode : {Determinism::invariant, Determinism::deterministic}) {
      for (int B : {32, 64}) {
        for (bool zero_heads : {false, true}) {
          INFO("dropout " << dropout << " mode " << static_cast<int>(mode) << " B " << B
                          << " zero heads " << zero_heads);
          const ModelConfig cfg = tiny_model_config(dropout, true);
          const Batch b = make_batch(cfg, 2, kBatch);
          const float scale = 1.0f / static_cast<float>(2 * cfg.context);
          auto build = [&](Isa isa, int threads) {
            auto m = std::make_unique<Gpt>(cfg, nullptr, mode, KernelCtx{isa, threads, B});
            m->init(5);
            if (zero_heads) {
              const ParamTable t = ParamTable::build(cfg);
              const std::int64_t hd = cfg.d_model / cfg.heads;
              for (const char* name : {"layers.0.attn.v.weight", "layers.0.attn.v.bias"}) {
                float* w = m->params()[t.index_of(name)].data<float>();
                const std::int64_t row = std::string(name).ends_with("bias") ? 1 : cfg.d_model;
                std::fill(w, w + hd * row, 0.0f);  // head 0's outputs
              }
              for (const char* name : {"layers.0.attn.q.weight", "layers.0.attn.q.bias"}) {
                float* w = m->params()[t.index_of(name)].data<float>();
                const std::int64_t row = std::string(name).ends_with("bias") ? 1 : cfg.d_model;
                std::fill(w + hd * row, w + 2 * hd * row, 0.0f);  // head 1's queries
              }
            }
            return m;
          };
          auto ref = build(Isa::scalar, 1);
          const float l0 = ref->forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(),
                                                 2, 3, scale);
          for (int threads : {1, 2}) {
            auto m = build(Isa::avx512, threads);
            const float l = m->forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(),
                                                2, 3, scale);
            CHECK(std::memcmp(&l, &l0, 4) == 0);
            CHECK(grads_equal(*m, *ref));
          }
        }
      }
    }
  }
}

TEST_CASE("GPT: stage_footprint counts what the model allocates") {
  for (const float dropout : {0.0f, 0.1f})
    for (const bool bias : {false, true})
      for (const std::int64_t mb : {1, 3}) {
        const ModelConfig cfg = tiny_model_config(dropout, bias);
        const Batch b = make_batch(cfg, mb, kBatch);
        const KernelCtx ctx = KernelCtx::best(1, 16);
        Gpt m(cfg, nullptr, Determinism::invariant, ctx);
        m.init(1);
        // In a fresh thread, whose GEMM buffers start empty: what the step's GEMMs make them.
        std::int64_t gemm_bytes = 0;
        std::thread([&] {
          const std::int64_t before = gemm_scratch_held_bytes();
          m.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), mb, 0, 0.01f);
          gemm_bytes = gemm_scratch_held_bytes() - before;
        }).join();
        const StageFootprint f = stage_footprint(cfg, 1, m.stage(), mb, ctx, GemmImpl::canonical);
        std::int64_t params = 0, grads = 0;
        for (std::size_t i = 0; i < m.params().size(); ++i) {
          params += m.params()[i].numel();
          for (const Tensor& t : m.grads()[i]) grads += t.numel();
        }
        INFO("dropout " << dropout << ", bias " << bias << ", mb " << mb);
        CHECK(f.param_floats == params);
        CHECK(f.grad_floats == grads);
        CHECK(f.forward_state_bytes == m.forward_state_bytes());
        CHECK(f.gemm_scratch_bytes == gemm_bytes);
      }
}

TEST_CASE("PipelineStage: equal and listed splits; every parameter has one owning stage") {
  ModelConfig cfg = tiny_model_config(0.0f, true);
  cfg.layers = 6;
  const std::vector<std::int64_t> listed{1, 3, 2};
  const ParamTable table = ParamTable::build(cfg);
  for (const auto& split : {std::vector<std::int64_t>{}, listed}) {
    INFO("split of " << split.size() << " counts");
    CHECK(pipeline_problems(cfg, 3, split).empty());
    std::int64_t next = 0;
    std::vector<int> owners(table.size(), 0), holders(table.size(), 0);
    for (int s = 0; s < 3; ++s) {
      const PipelineStage st = PipelineStage::of(cfg, 3, s, split);
      CHECK(st.first_layer == next);
      CHECK(st.end_layer - st.first_layer == (split.empty() ? 2 : split[s]));
      next = st.end_layer;
      for (std::size_t i = 0; i < table.size(); ++i) {
        owners[i] += st.owns(table[i]);
        holders[i] += st.holds(table[i]);
      }
    }
    CHECK(next == 6);
    for (std::size_t i = 0; i < table.size(); ++i) {
      INFO(table[i].name);
      CHECK(owners[i] == 1);
      CHECK(holders[i] == (table[i].name == "embed.weight" ? 2 : 1));  // first and last stage
    }
  }
  const std::vector<std::int64_t> wrong_sum{1, 3, 3}, wrong_count{3, 3}, empty_stage{0, 4, 2};
  CHECK(pipeline_problems(cfg, 3, wrong_sum).size() == 1);
  CHECK(pipeline_problems(cfg, 3, wrong_count).size() == 1);
  CHECK(pipeline_problems(cfg, 3, empty_stage).size() == 1);
  CHECK(pipeline_problems(cfg, 4).size() == 1);  // 6 layers are not 4 equal stages
}
