// The run configuration (DESIGN.md section 6): TOML files with sections model, parallel,
// optim, data, run, ckpt, verify, numerics, debug; every key can be overridden with
// `--set section.key=value`; unknown keys are errors that name the nearest valid key.
// One key table (config_keys()) drives parsing, overrides, the resolved `config.toml`
// written to the run directory, and the help text.
// Determinism contract: the resolved config is a pure function of the file and the
// overrides; floats are kept as doubles and written back in shortest round-trip form, so
// reloading a resolved config reproduces it exactly.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "model/config.hpp"

namespace lockstep::config {

struct ModelSection {
  std::int64_t vocab = 256;
  std::int64_t context = 64;
  std::int64_t layers = 2;
  std::int64_t d_model = 128;
  std::int64_t heads = 4;
  std::int64_t ffn = 512;
  double dropout = 0.0;
  bool bias = false;
  double ln_eps = 1e-5;
};

struct ParallelSection {
  std::int64_t tp = 1;          // tensor-parallel size; dp = ranks / tp
  std::int64_t microbatch = 1;  // sequences per forward/backward
  bool zero = false;            // distributed optimizer (ZeRO-1)
};

struct OptimSection {
  double lr = 3e-4;
  double min_lr = 3e-5;
  std::int64_t warmup = 10;
  std::string schedule = "cosine";  // cosine | linear | constant
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double clip = 1.0;  // global-norm clip; 0 disables
};

struct DataSection {
  std::string path;               // indexed dataset prefix; empty: the built-in corpus
  std::int64_t global_batch = 8;  // sequences per step
};

struct RunSection {
  std::int64_t steps = 20;
  std::int64_t seed = 1234;
  std::string out = "runs/default";
  std::string determinism = "invariant";  // invariant | deterministic | fast
  std::int64_t threads = 0;               // OpenMP threads per rank; 0: cores / ranks
  std::string resume = "none";            // auto | none | PATH
  std::string isa = "auto";               // auto | scalar | avx2 | avx512 (never changes bits)
  std::int64_t stop_at = 0;  // stop after this step as if preempted (0: run all run.steps)
};

struct CkptSection {
  std::int64_t interval = 0;           // 0: only at the end
  std::int64_t keep = 0;               // 0: keep all
  bool save = true;                    // write checkpoints at all
  bool async = false;                  // background writer (snapshot in memory)
  bool load_optim = true;              // resume: load AdamW moments (false: start them at zero)
  bool load_data = true;               // resume: load the data order state (false: restart it)
  bool allow_contract_change = false;  // resume across determinism / reduce_block changes
};

struct VerifySection {
  std::string hash = "lockstep";         // lockstep | torch-xor
  std::int64_t fingerprint_version = 2;  // 1 | 2: lockstep fingerprints' version (verify/)
  std::int64_t state_interval = 1;       // fingerprint all state every N steps (0: never)
  std::int64_t replica_check_interval = 1;
  std::string ops;  // "A-B": op trace for steps A..B
};

struct NumericsSection {
  std::int64_t reduce_block = 64;  // B of the canonical sum
};

struct DebugSection {
  std::string perturb;       // OPNAME: change the reduction order inside that op
  std::string bitflip;       // RANK:STEP:TENSOR
  std::string kill_in_save;  // RANK:STEP: that rank dies after its first shard of that save
  std::string interleave;    // MODE,MODE,...: timing experiment, see launch/train/modes.hpp
};

struct Config {
  ModelSection model;
  ParallelSection parallel;
  OptimSection optim;
  DataSection data;
  RunSection run;
  CkptSection ckpt;
  VerifySection verify;
  NumericsSection numerics;
  DebugSection debug;
};

// A reference to one field of a Config.
using FieldRef = std::variant<std::int64_t*, double*, bool*, std::string*>;

struct KeyInfo {
  std::string name;  // "section.key"
  std::string help;
  std::vector<std::string> choices;  // allowed values for enum-like strings (empty: any)
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

// The model section as the model's own config struct.
ModelConfig model_config(const Config& cfg);

// The valid key closest to `name` by edit distance.
std::string nearest_key(const std::string& name);

}  // namespace lockstep::config
