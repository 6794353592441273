// What one TP rank of one pipeline stage of the GPT keeps in memory (docs/design.md section 8,
// "memory per stage"): its parameter shards, its gradient term buffers, the forward state of one
// microbatch (every buffer the backward reads: activations, saved statistics, dropout masks,
// logits) and the backward's scratch. The forward state is counted buffer by buffer as
// model/gpt_*.cpp allocate them in a training step (op trace off), so it equals
// Gpt::forward_state_bytes() after such a step (tests/unit/test_model.cpp checks it); the scratch
// is the backward's dense buffers and the attention's per-thread scratch, approximately, plus
// the GEMMs' own buffers, which a thread keeps at the largest size any call needed (the
// largest over the stage's GEMM shapes, equal to what a one-thread step holds: test_model.cpp).
// Determinism contract: bookkeeping only, no arithmetic on model values.
#pragma once

#include <cstdint>

#include "model/config.hpp"
#include "model/pipeline_stage.hpp"
#include "runtime/gemm.hpp"
#include "runtime/isa.hpp"

namespace lockstep {

struct StageFootprint {
  std::int64_t param_floats = 0;            // the stage's parameter shards on this TP rank
  std::int64_t grad_floats = 0;             // the model's gradient term buffers (one per term held)
  bool terms_whole_lines = true;  // every term a multiple of 16 floats (64-byte boundaries)
  // The largest group of Gpt::grad_groups(), each term rounded up to 16 floats: the scratch of
  // launch/train/grad_sync.hpp's streamed microbatches.
  std::int64_t grad_group_floats = 0;
  std::int64_t forward_state_bytes = 0;     // one microbatch of mb sequences, kept to backward
  std::int64_t backward_scratch_bytes = 0;  // once per rank, reused by every microbatch
  // The GEMMs' grow-only per-thread buffers (runtime/gemm.hpp, gemm_scratch) at the largest
  // size the stage's linear layers, LM head and attention products need: once per rank.
  std::int64_t gemm_scratch_bytes = 0;
};

// The footprint of `stage` on one of `tp` TP ranks for microbatches of `mb` sequences, with the
// model's dropout on (training) or off; `ctx`: the rank's kernels (threads, ISA, reduce block
// and tree), `impl` the GEMM its determinism mode runs.
StageFootprint stage_footprint(const ModelConfig& cfg, int tp, const PipelineStage& stage,
                               std::int64_t mb, const KernelCtx& ctx, GemmImpl impl);

}  // namespace lockstep
