// The run configuration (docs/design.md section 6): TOML files with sections model, parallel,
// optim, data, run, ckpt, verify, numerics, debug; every key can be overridden with
// `--set section.key=value`; unknown keys are errors that name the nearest valid key.
// One typed Config: its sections are the libraries' own config structs where a library owns
// the concept (ModelConfig, OptimConfig, DataConfig), the rest are defined here. Enum-valued
// keys are parsed at load into enums whose names come from one table per enum
// (runtime/enum_names.hpp); the debug.* and verify.ops specs are parsed at load into
// structs. One key table (config_keys()) drives parsing, overrides, the resolved
// `config.toml` written to the run directory, `--help-config` and docs/cli.md.
// Determinism contract: the resolved config is a pure function of the file and the
// overrides; floats are kept as doubles and written back in shortest round-trip form, so
// reloading a resolved config reproduces it exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "data/gpt_dataset.hpp"
#include "model/config.hpp"
#include "optim/optim_config.hpp"
#include "parallel/pipeline_schedule.hpp"
#include "runtime/determinism.hpp"
#include "runtime/isa.hpp"
#include "runtime/watchdog.hpp"
#include "verify/fingerprint.hpp"
#include "verify/op_trace.hpp"

namespace lockstep::config {

// parallel.pp_layers = "1,3" (or the TOML array [1, 3]): each pipeline stage's layer count,
// first stage first; empty: equal stages.
struct StageLayers {
  std::vector<std::int64_t> counts;
  static StageLayers parse(const std::string& text, const std::string& what);
  std::string text() const;
};

struct ParallelSection {
  std::int64_t tp = 1;  // tensor-parallel size; dp = ranks / (tp x pp)
  std::int64_t pp = 1;  // pipeline stages (contiguous layer ranges)
  StageLayers pp_layers;  // the stages' layer counts (empty: model.layers / pp each)
  PipeSchedule schedule = PipeSchedule::one_f_one_b;  // the pipeline's order of passes
  std::int64_t microbatch = 1;  // sequences per forward/backward
  bool zero = false;            // distributed optimizer (ZeRO-1)
};

// run.step_timeout = "auto" | SECONDS: the progress watchdog's timeout (runtime/watchdog.hpp):
// "auto" = max(300 s, 10 x the median step after the first 2), SECONDS > 0 fixed, "0" off.
struct StepTimeout {
  bool automatic = true;
  double seconds = 0;  // when !automatic (0: off)
  watchdog::TimeoutSetting setting() const { return {automatic, seconds}; }
  static StepTimeout parse(const std::string& text, const std::string& what);
  std::string text() const;
};

struct RunSection {
  std::int64_t steps = 20;
  std::int64_t seed = 1234;
  std::string out = "runs/default";
  Determinism determinism = Determinism::invariant;
  std::int64_t threads = 0;              // OpenMP threads per rank; 0: cores / ranks
  std::string resume = "none";           // auto | none | PATH
  IsaChoice isa = IsaChoice::automatic;  // never changes bits
  std::int64_t stop_at = 0;  // stop after this step as if preempted (0: run all run.steps)
  StepTimeout step_timeout;  // progress watchdog; never changes bits
};

struct CkptSection {
  std::int64_t interval = 0;           // 0: only at the end
  std::int64_t keep = 0;               // 0: keep all
  bool save = true;                    // write checkpoints at all
  bool async = false;                  // background writer (snapshot in memory)
  bool load_optim = true;              // resume: load AdamW moments (false: start them at zero)
  bool load_data = true;               // resume: load the data order state (false: restart it)
  bool allow_contract_change = false;  // resume across determinism / reduce_block / tree changes
};

struct VerifySection {
  HashKind hash = HashKind::lockstep;
  std::int64_t fingerprint_version = 2;  // 1 | 2: lockstep fingerprints' version (verify/)
  std::int64_t state_interval = 1;       // fingerprint all state every N steps (0: never)
  std::int64_t replica_check_interval = 1;
  StepRange ops;  // "A-B": op trace for steps A..B
};

struct NumericsSection {
  std::int64_t reduce_block = 64;  // B of the canonical sum
  TreeShape tree = kDefaultTree;   // the canonical tree (contract v2 halving, v1 pow2)
};

// debug.bitflip = RANK:STEP:TENSOR: after the update of STEP, that rank flips the lowest
// mantissa bit of element 0 of its copy of TENSOR ("param/<name>" or "<name>").
struct BitFlip {
  int rank = -1;  // -1: off
  std::int64_t step = 0;
  std::string tensor;
  bool on() const { return rank >= 0; }
  static BitFlip parse(const std::string& text, const std::string& what);
  std::string text() const;
};

// debug.kill_in_save = RANK:STEP: that rank dies after its first shard of that step's save.
struct KillInSave {
  int rank = -1;  // -1: off
  std::int64_t step = 0;
  static KillInSave parse(const std::string& text, const std::string& what);
  std::string text() const;
};

// debug.interleave = MODE,MODE,...: two or more distinct modes of launch/train/modes.hpp.
struct Interleave {
  std::vector<std::string> modes;  // empty: off
  bool on() const { return !modes.empty(); }
  static Interleave parse(const std::string& text, const std::string& what);
  std::string text() const;
};

// debug.nan = STEP:TENSOR[:RANK]: after the gradient reduction of STEP (and its fingerprint),
// element 0 of every rank's slice of TENSOR's gradient (only RANK's, if given) becomes NaN
// (testing the non-finite guard).
struct NanInjection {
  std::int64_t step = 0;  // 0: off
  std::string tensor;
  int rank = -1;  // -1: every rank holding a slice
  bool on() const { return step > 0; }
  static NanInjection parse(const std::string& text, const std::string& what);
  std::string text() const;
};

struct DebugSection {
  std::string perturb;  // OPNAME: change the reduction order inside that op
  BitFlip bitflip;
  NanInjection nan;
  KillInSave kill_in_save;
  Interleave interleave;  // timing experiment, see launch/experiments/interleave.hpp
};

struct Config {
  ModelConfig model;
  ParallelSection parallel;
  OptimConfig optim;
  data::DataConfig data;
  RunSection run;
  CkptSection ckpt;
  VerifySection verify;
  NumericsSection numerics;
  DebugSection debug;
};

// A key written as text (enums and specs): reads and writes its field through its own table
// or parser.
struct TextField {
  std::function<std::string()> get;
  std::function<void(const std::string& text, const std::string& what)> set;
};
// A reference to one field of a Config.
using FieldRef = std::variant<std::int64_t*, double*, bool*, std::string*, TextField>;

struct KeyInfo {
  std::string name;  // "section.key"
  std::string help;
  std::vector<std::string> choices;  // allowed values of an enum key (empty: any)
  std::function<FieldRef(Config&)> field;
};

// The key table, in the order the resolved config is written.
const std::vector<KeyInfo>& config_keys();

// Reads a TOML file into cfg (on top of what cfg holds). Throws lockstep::Error naming the
// file, the key and the problem (unknown key -> nearest valid one, wrong type -> expected).
void load_toml_file(Config& cfg, const std::string& path);
// Parses TOML text (source names it in errors).
void load_toml_text(Config& cfg, const std::string& text, const std::string& source);
// Applies one `section.key=value` override.
void apply_override(Config& cfg, const std::string& assignment);
// The resolved config as TOML, every key, in table order.
std::string to_toml(const Config& cfg);
// One key's value as config.toml writes it (strings quoted).
std::string value_text(const Config& cfg, const KeyInfo& key);

// The learning-rate schedule of this run (optim's schedule, total_steps = run.steps).
LrScheduleConfig lr_schedule(const Config& cfg);

// A rank's kernels: run.isa resolved on this CPU, `threads`, numerics.reduce_block and tree.
KernelCtx kernel_ctx(const Config& cfg, int threads);

// The valid key closest to `name` by edit distance.
std::string nearest_key(const std::string& name);

}  // namespace lockstep::config
