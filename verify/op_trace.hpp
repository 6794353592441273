// The op trace (issue 5, docs/design.md section 5 `ops/`): per rank, one JSON line per op of a
// traced step (forward, backward, gradient reduction, optimizer), appended to
// <run.out>/ops/rank_<5 digits>.jsonl:
//   {"step":S,"op":"layers.0.mlp.fc1.fwd","occ":K,"in":["hex64",...],"out":"hex64","n":N}
// occ is the occurrence index of that op name within the step (microbatches repeat the
// forward and backward ops: occ = microbatch index). `in` / `out` are XXH3-64 of the bytes
// of each input buffer and of the output buffer, exactly as this rank holds them (local
// shards, not logical tensors: the op trace compares two runs of the SAME layout rank by
// rank). A byte hash does not depend on the op name, so an op's output hash reappears as
// the input hash of the ops that read it (data flow is visible in the file). n is the
// output's element count.
// It also answers the ops' perturb(name) question (debug.perturb): true for exactly the op
// of that name.
// Determinism contract: record() only reads its arguments and writes this rank's file (no
// collectives, no effect on results); with an empty step range nothing is opened or written.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/op_observer.hpp"
#include "verify/trace.hpp"

namespace lockstep {

// The steps the op trace records (config key verify.ops, written "A-B"; "" records none).
struct StepRange {
  std::int64_t first = 1, last = 0;  // [first, last]; empty when last < first
  bool empty() const { return last < first; }
  bool contains(std::int64_t step) const { return step >= first && step <= last; }
  // "A-B" with 1 <= A <= B, or "" (empty). Throws lockstep::Error naming `what` otherwise.
  static StepRange parse(const std::string& text, const std::string& what = "verify.ops");
  std::string text() const;  // the inverse of parse
};

struct OpTraceConfig {
  std::string dir;      // <run.out>/ops ; created when recording starts
  int rank = 0;         // world rank: file dir/rank_<5 digits>.jsonl
  StepRange steps;      // record these steps (empty: never)
  std::string perturb;  // debug.perturb op name ("" : none)
  static OpTraceConfig from(const std::string& dir, int rank, const StepRange& steps,
                            const std::string& perturb) {
    return OpTraceConfig{dir, rank, steps, perturb};
  }
};

// The file name of a rank's op trace inside the ops directory: "rank_00003.jsonl".
std::string op_trace_file_name(int rank);

class OpTrace final : public OpObserver {
 public:
  explicit OpTrace(OpTraceConfig cfg);
  ~OpTrace() override;
  OpTrace(const OpTrace&) = delete;
  OpTrace& operator=(const OpTrace&) = delete;

  // recording() becomes true iff step is in range; occurrence counters reset. The file is
  // created (truncated) at the first recorded step of this process.
  void begin_step(std::int64_t step);
  // Flushes the file and stops recording until the next begin_step.
  void end_step();
  bool recording() const override { return recording_; }
  void record(std::string_view op, std::span<const std::span<const float>> inputs,
              std::span<const float> output) override;
  bool perturb(std::string_view op) const override {
    return !cfg_.perturb.empty() && op == cfg_.perturb;
  }

  const OpTraceConfig& config() const { return cfg_; }
  std::int64_t records() const { return records_; }  // lines written so far

 private:
  OpTraceConfig cfg_;
  std::int64_t step_ = 0;
  bool recording_ = false;
  std::int64_t records_ = 0;
  std::unordered_map<std::string, std::int64_t> occurrence_;
  std::unique_ptr<JsonlWriter> out_;
};

}  // namespace lockstep
