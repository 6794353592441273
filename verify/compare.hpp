// `lockstep verify compare RUN_A RUN_B`: where two runs first parted, by progressive
// narrowing (issue 5):
//  1. the first step whose trace line (exact scalars, state fingerprints, digest) differs,
//     and whether the logged loss still agrees there (a hidden divergence: the loss a user
//     watches shows nothing while the state has already parted);
//  2. at that step, which state groups and tensors differ, in phase order data/schedule ->
//     forward/loss -> gradients (grad/) -> reduced gradients (grad_norm) -> optimizer state
//     (adam_m/, adam_v/) -> parameters (param/);
//  3. with op traces of that step in both runs (RUN/ops/rank_*.jsonl, verify/op_trace.hpp),
//     per rank: the first op in record order whose inputs match and whose output differs
//     (the origin), set apart from the downstream receivers (ops whose inputs already differ).
// Trace lines are read tolerantly: a scalar may be "loss": "dec" with "loss_hex", or
// "loss": {"hex": .., "dec": ..}; fingerprints come from "fp"; unknown top-level keys are
// compared exactly as JSON. metrics.jsonl, when present, supplies the logged loss.
// Fingerprints made by different schemes (verify.hash, verify.fingerprint_version) always
// differ, so such a pair is compared on its exact scalars only, with a note saying so.
// Determinism contract: a pure function of the files; the verdict is bitwise (a field
// differs iff its text differs).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::verify {

// ---- op traces ----------------------------------------------------------------------------
struct OpRecord {
  std::string op;
  std::int64_t occ = 0;
  std::vector<std::string> in;
  std::string out;
  std::int64_t n = 0;
};

struct RankOpDiff {
  int rank = 0;
  std::int64_t compared = 0;            // records present in both runs
  std::int64_t only_a = 0, only_b = 0;  // records present in one run only
  std::int64_t differing = 0;           // records whose output differs
  std::optional<std::string> origin;    // "op#occ" of the first op with equal inputs, other output
  std::vector<std::string> other_origins;  // later ops of that kind (should be empty)
  std::vector<std::string> receivers;      // ops with differing inputs and output, record order
};

struct OpDiff {
  std::int64_t step = 0;
  bool available = false;  // both runs have op records for the step on at least one rank
  std::string note;        // why not, or caveats
  std::vector<RankOpDiff> ranks;
  // The origin op name (without occurrence) found on the most ranks, and those ranks.
  std::string origin_op;
  std::vector<int> origin_ranks;
};

// Records of `step` in ops_dir/rank_*.jsonl, by rank (ranks without records are absent).
std::map<int, std::vector<OpRecord>> load_op_records(const std::string& ops_dir, std::int64_t step);
// Compares the op records of `step` in two ops directories (RUN/ops).
OpDiff compare_op_traces(const std::string& ops_a, const std::string& ops_b, std::int64_t step);

// ---- state traces ---------------------------------------------------------------------------
struct TensorDiff {
  std::string name;
  int phase = 0;
  std::string a, b;  // the two values as written
};

struct StepDiff {
  std::int64_t step = 0;
  bool differs = false;
  std::vector<TensorDiff> items;  // differing scalars and fingerprints, phase order
};

struct CompareReport {
  std::string run_a, run_b;
  // The fingerprint schemes of the two traces ("lockstep v2", "lockstep v1", "torch-xor"; ""
  // unknown). Fingerprints of different schemes are never compared (always differ).
  std::string scheme_a, scheme_b;
  // Contract constants the two runs differ in ("numerics.tree = pow2 in A, halving in B"), read
  // from their config.toml by the caller; runs under different contracts are not expected to
  // share bits, and the report says so first.
  std::vector<std::string> contract_differences;
  bool fingerprints_comparable() const {
    return scheme_a.empty() || scheme_b.empty() || scheme_a == scheme_b;
  }
  std::int64_t steps_a = 0, steps_b = 0, common = 0;
  std::optional<std::int64_t> first_step;  // first divergent step
  std::vector<std::int64_t> divergent_steps;
  // Loss at the first divergent step and over the run.
  bool loss_bits_equal_at_first = true;
  bool loss_logged_equal_at_first = true;  // the logged decimal (metrics.jsonl or trace)
  std::optional<std::int64_t> first_loss_bits_step, first_loss_logged_step;
  std::optional<std::int64_t> first_loss_rounded_step;  // %.4f, as a console log shows it
  StepDiff first;                                       // the items at first_step
  OpDiff ops;                                           // op-level narrowing at first_step
  // Per common step: ulp distance of the two losses (0: identical bits), and how many
  // fingerprints/scalars differ.
  std::vector<std::int64_t> steps;
  std::vector<double> loss_ulps;
  std::vector<int> n_differing;

  bool identical() const { return !first_step && steps_a == steps_b; }
  bool hidden() const { return first_step && loss_logged_equal_at_first; }
  std::string to_text() const;
  nlohmann::ordered_json to_json() const;
  std::string to_html() const;
};

// The phase of a trace item name (0 data/schedule, 1 forward/loss, 2 gradients, 3 reduced
// gradients, 4 optimizer state, 5 parameters, 6 other) and its label.
int phase_of(const std::string& name);
const char* phase_name(int phase);

// Reads RUN/trace.jsonl (+ metrics.jsonl, ops/) of both runs. `scheme_a`/`scheme_b`: each
// trace's fingerprint scheme when the caller knows it (from the run's config.toml); when both
// are known and differ, fingerprints and digests are left out of the comparison. Throws
// lockstep::Error on missing or unreadable files.
CompareReport compare_runs(const std::string& run_a, const std::string& run_b,
                           const std::string& scheme_a = "", const std::string& scheme_b = "");

}  // namespace lockstep::verify
