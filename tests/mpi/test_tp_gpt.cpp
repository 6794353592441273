// GPT tensor parallelism is bitwise invisible (docs/design.md section 2, G3): at TP = 1, 2, 4
// (every TP dividing the world size; the rest of the world is DP replicas running the same batch)
// the loss and every parameter's local gradient terms equal, bit for bit, the matching slice
// of a single-process (grid-less, TP=1) run of the same model computed on every rank. Also
// the initialized parameters (layout-invariant Philox init). Config: vocab 256, context 64,
// 2 layers, d_model 128, 4 heads, ffn 256, reduce_block 16 (at TP=4 every shard owns a power
// of two number of whole blocks: d/tp = 32 = 2 blocks, ffn/tp = 64 = 4, vocab/tp = 64 = 4),
// dropout 0.1, with and without biases, microbatch of 2 sequences, 1 thread (and 2 at np 1).
// GradSync without ZeRO keeps the model's gradient terms in its reduction buffer: a step of 3
// microbatches reduces to the bits of gradients the model owns and that are copied in.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "launch/train/grad_sync.hpp"
#include "model/gpt.hpp"
#include "model/memory_footprint.hpp"
#include "parallel/dp_grad.hpp"
#include "runtime/grid.hpp"
#include "tests/support/test_batch.hpp"
#include "tests/support/test_data.hpp"
#include "tests/support/test_model_config.hpp"

using namespace lockstep;
using lockstep::testing::Batch;
using lockstep::testing::make_batch;
using lockstep::testing::same_bits;
using lockstep::testing::tiny_model_config;

namespace {

// The slice of `full` (a logical tensor, row-major) that the shard `sd` covers.
std::vector<float> slice_of(const Tensor& full, const ShardDesc& sd) {
  const Shape ls = sd.local_shape();
  const float* f = full.data<float>();
  std::vector<float> out(static_cast<std::size_t>(shape_numel(ls)));
  if (ls.size() == 1) {
    for (std::int64_t i = 0; i < ls[0]; ++i) out[i] = f[sd.global_offset[0] + i];
  } else {
    const std::int64_t gc = sd.global_shape[1];
    for (std::int64_t r = 0; r < ls[0]; ++r)
      for (std::int64_t c = 0; c < ls[1]; ++c)
        out[r * ls[1] + c] = f[(r + sd.global_offset[0]) * gc + c + sd.global_offset[1]];
  }
  return out;
}

// This file's batches: seed 99, sequence ids from 10.
constexpr lockstep::testing::BatchSpec kBatch{.seed = 99, .first_seq_id = 10};

}  // namespace

TEST_CASE("GPT loss and gradients are bitwise identical at TP = 1, 2, 4") {
  const Communicator world = Communicator::world();
  const int np = world.size();
  for (bool bias : {true, false}) {
    const ModelConfig cfg = tiny_model_config(0.1f, bias);
    const std::int64_t mb = 2;
    const Batch batch = make_batch(cfg, mb, kBatch);
    const float scale = 1.0f / static_cast<float>(mb * cfg.context);
    for (int threads : {1, 2}) {
      // 2 threads per rank only where the ranks do not oversubscribe this 2-core machine
      // (thread invariance is also covered by tests/unit/test_model.cpp).
      if (threads == 2 && np > 1) continue;  // same decision on every rank
      const KernelCtx ctx = KernelCtx::best(threads, 16);
      // The single-process reference, computed on every rank.
      Gpt ref(cfg, nullptr, Determinism::invariant, ctx);
      ref.init(2024);
      const float ref_loss = ref.forward_backward(batch.tokens.data(), batch.labels.data(),
                                                  batch.seq_ids.data(), mb, 7, scale);
      const float ref_eval = ref.forward_loss(batch.tokens.data(), batch.labels.data(),
                                              batch.seq_ids.data(), mb, 7, true);
      CHECK(std::memcmp(&ref_loss, &ref_eval, 4) == 0);
      for (int tp : {1, 2, 4}) {
        if (np % tp != 0) continue;  // same decision on every rank
        const Grid grid = Grid::create(world, tp);
        INFO("bias=" << bias << " threads=" << threads << " " << grid.describe());
        REQUIRE(model_invariance_reason(cfg, tp, 16, mb).empty());
        Gpt model(cfg, grid, Determinism::invariant, ctx);
        model.init(2024);
        const float loss = model.forward_backward(batch.tokens.data(), batch.labels.data(),
                                                  batch.seq_ids.data(), mb, 7, scale);
        CHECK(std::memcmp(&loss, &ref_loss, 4) == 0);
        int bad_params = 0, bad_grads = 0;
        std::string first_bad;
        for (std::size_t i = 0; i < model.table().size(); ++i) {
          const ShardDesc& sd = model.params()[i].shard();
          const auto p = slice_of(ref.params()[i], sd);
          if (!same_bits(p.data(), model.params()[i].data<float>(), p.size())) ++bad_params;
          for (std::size_t k = 0; k < model.grads()[i].size(); ++k) {
            const auto g = slice_of(ref.grads()[i][k], sd);
            if (!same_bits(g.data(), model.grads()[i][k].data<float>(), g.size())) {
              if (bad_grads++ == 0)
                first_bad = model.table()[i].name + "/" + model.table()[i].terms[k];
            }
          }
        }
        INFO("first differing gradient: " << first_bad);
        CHECK(bad_params == 0);
        CHECK(bad_grads == 0);
      }
    }
  }
}

TEST_CASE("GPT deterministic and fast modes run at every TP and repeat bitwise (G1)") {
  const Communicator world = Communicator::world();
  const ModelConfig cfg = tiny_model_config(0.1f, false);
  const std::int64_t mb = 1;
  const Batch batch = make_batch(cfg, mb, kBatch);
  for (Determinism mode : {Determinism::deterministic, Determinism::fast}) {
    for (int tp : {1, 2, 4}) {
      if (world.size() % tp != 0) continue;
      const Grid grid = Grid::create(world, tp);
      Gpt model(cfg, grid, mode, KernelCtx::best(1, 16));
      model.init(5);
      const float a = model.forward_backward(batch.tokens.data(), batch.labels.data(),
                                             batch.seq_ids.data(), mb, 1, 1.0f / 64);
      const Tensor g0 = model.grads()[2][0].clone();
      const float b = model.forward_backward(batch.tokens.data(), batch.labels.data(),
                                             batch.seq_ids.data(), mb, 1, 1.0f / 64);
      INFO(determinism_name(mode) << " " << grid.describe());
      CHECK(a > 4.0f);
      CHECK(a < 8.0f * 64);
      if (mode == Determinism::deterministic) {
        CHECK(std::memcmp(&a, &b, 4) == 0);
        CHECK(g0.bitwise_equal(model.grads()[2][0]));
      }
    }
  }
}

namespace {
// An observer that only keeps the reducer from streaming (recording() is true) and drops
// every record: GradSync then takes its copying path.
struct Recording final : OpObserver {
  bool recording() const override { return true; }
  void record(std::string_view, std::span<const std::span<const float>>,
              std::span<const float>) override {}
  bool perturb(std::string_view) const override { return false; }
};
}  // namespace

TEST_CASE("GradSync: gradients written in place reduce to the bits of copied ones") {
  // 6 microbatches of one sequence: the halving tree's nodes open two stack levels and merge
  // one and two levels deep. Streamed (the default: written into the combiner's levels, or
  // merged group by group from a scratch), and copied (while the leaves are recorded), for
  // two steps each (the second reuses every buffer): all equal the owned gradients pushed
  // through a plain GradReducer.
  const Communicator world = Communicator::world();
  const Grid grid = Grid::create(world, 1);  // every rank a DP replica
  const ModelConfig cfg = tiny_model_config(0.1f, true);
  const std::int64_t m = 6;
  const Batch batch = make_batch(cfg, m, kBatch);
  const KernelCtx ctx = KernelCtx::best(1, 16);
  Gpt in_place(cfg, grid, Determinism::invariant, ctx),
      owned(cfg, grid, Determinism::invariant, ctx);
  in_place.init(7);
  owned.init(7);
  GradSync sync(in_place, grid, Determinism::invariant, false, 1, TreeShape::halving, m);
  REQUIRE(sync.grads_in_place());
  for (const auto& terms : in_place.grads())
    for (const Tensor& t : terms) CHECK(!t.owns_storage());
  std::vector<std::int64_t> offset;  // of each parameter's first term in the flat layout
  std::int64_t len = 0;
  for (const auto& terms : owned.grads()) {
    offset.push_back(len);
    for (const Tensor& t : terms) len += t.numel();
  }
  Recording rec;
  for (const bool streamed : {true, false})
    for (int step = 0; step < 2; ++step) {
      sync.reducer().set_observer(streamed ? nullptr : &rec);
      GradReducer ref(len, Determinism::invariant, TreeShape::halving, m);
      std::vector<float> flat(static_cast<std::size_t>(len));
      sync.begin_step();
      for (std::int64_t i = 0; i < m; ++i) {
        const std::int32_t* tok = batch.tokens.data() + i * cfg.context;
        const std::int32_t* lab = batch.labels.data() + i * cfg.context;
        sync.begin_microbatch(1);
        in_place.forward_backward(tok, lab, batch.seq_ids.data() + i, 1, 3 + step, 0.01f);
        sync.push_microbatch(1);
        owned.forward_backward(tok, lab, batch.seq_ids.data() + i, 1, 3 + step, 0.01f);
        float* at = flat.data();
        for (const auto& terms : owned.grads())
          for (const Tensor& t : terms) at = std::copy_n(t.data<float>(), t.numel(), at);
        ref.push_microbatch(flat.data(), 1);
      }
      sync.reduce();
      ref.allreduce(grid.dp_comm(), flat);
      INFO("streamed=" << streamed << " step=" << step);
      // Streaming used one parameter group's scratch, as the memory estimate counts it.
      const StageFootprint f =
          stage_footprint(cfg, 1, in_place.stage(), 1, KernelCtx::best(1), GemmImpl::canonical);
      CHECK(sync.scratch_floats() == f.grad_group_floats);
      int bad = 0, moved = 0;
      for (std::size_t p = 0; p < offset.size(); ++p) {
        const UpdateSlice& sl = sync.slices()[p];
        std::vector<const float*> terms;
        for (std::size_t k = 0; k < owned.grads()[p].size(); ++k)
          terms.push_back(flat.data() + offset[p] + static_cast<std::int64_t>(k) * sl.n);
        std::vector<float> want(static_cast<std::size_t>(sl.n));
        combine_grad_terms(terms, sl.n, want.data());
        if (!same_bits(want.data(), sl.grad, want.size())) ++bad;
        // after reduce() the model's terms are views of the reduced gradient again
        if (owned.grads()[p].size() == 1 && in_place.grads()[p][0].data<float>() != sl.grad)
          ++moved;
      }
      CHECK(bad == 0);
      CHECK(moved == 0);
    }
}
