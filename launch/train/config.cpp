#include "launch/train/config.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "runtime/error.hpp"

namespace lockstep::config {
namespace {

template <class Section, class T>
std::function<FieldRef(Config&)> member(Section Config::*sec, T Section::*field) {
  return [sec, field](Config& c) -> FieldRef { return &((c.*sec).*field); };
}

std::vector<KeyInfo> make_keys() {
  using C = Config;
  return {
      {"model.vocab",
       "vocabulary size (byte tokenizer: 256)",
       {},
       member(&C::model, &ModelSection::vocab)},
      {"model.context", "sequence length in tokens", {}, member(&C::model, &ModelSection::context)},
      {"model.layers", "transformer blocks", {}, member(&C::model, &ModelSection::layers)},
      {"model.d_model", "hidden size", {}, member(&C::model, &ModelSection::d_model)},
      {"model.heads", "attention heads", {}, member(&C::model, &ModelSection::heads)},
      {"model.ffn", "MLP hidden size", {}, member(&C::model, &ModelSection::ffn)},
      {"model.dropout", "dropout probability", {}, member(&C::model, &ModelSection::dropout)},
      {"model.bias", "biases in linear layers", {}, member(&C::model, &ModelSection::bias)},
      {"model.ln_eps", "LayerNorm epsilon", {}, member(&C::model, &ModelSection::ln_eps)},
      {"parallel.tp",
       "tensor-parallel size (dp = ranks / tp)",
       {},
       member(&C::parallel, &ParallelSection::tp)},
      {"parallel.microbatch",
       "sequences per forward/backward",
       {},
       member(&C::parallel, &ParallelSection::microbatch)},
      {"parallel.zero",
       "distributed optimizer (ZeRO-1)",
       {},
       member(&C::parallel, &ParallelSection::zero)},
      {"optim.lr", "peak learning rate", {}, member(&C::optim, &OptimSection::lr)},
      {"optim.min_lr",
       "final learning rate of the decay",
       {},
       member(&C::optim, &OptimSection::min_lr)},
      {"optim.warmup", "linear warmup steps", {}, member(&C::optim, &OptimSection::warmup)},
      {"optim.schedule",
       "learning-rate decay",
       {"cosine", "linear", "constant"},
       member(&C::optim, &OptimSection::schedule)},
      {"optim.beta1", "AdamW beta1", {}, member(&C::optim, &OptimSection::beta1)},
      {"optim.beta2", "AdamW beta2", {}, member(&C::optim, &OptimSection::beta2)},
      {"optim.eps", "AdamW epsilon", {}, member(&C::optim, &OptimSection::eps)},
      {"optim.weight_decay",
       "decoupled weight decay (2-D weights only)",
       {},
       member(&C::optim, &OptimSection::weight_decay)},
      {"optim.clip",
       "global gradient-norm clip (0: off)",
       {},
       member(&C::optim, &OptimSection::clip)},
      {"data.path",
       "indexed dataset prefix (empty: built-in synthetic corpus)",
       {},
       member(&C::data, &DataSection::path)},
      {"data.global_batch", "sequences per step", {}, member(&C::data, &DataSection::global_batch)},
      {"run.steps", "training steps", {}, member(&C::run, &RunSection::steps)},
      {"run.seed", "seed of init, dropout and data order", {}, member(&C::run, &RunSection::seed)},
      {"run.out", "run directory", {}, member(&C::run, &RunSection::out)},
      {"run.determinism",
       "execution mode",
       {"invariant", "deterministic", "fast"},
       member(&C::run, &RunSection::determinism)},
      {"run.threads",
       "OpenMP threads per rank (0: cores / ranks)",
       {},
       member(&C::run, &RunSection::threads)},
      {"run.resume", "auto | none | checkpoint path", {}, member(&C::run, &RunSection::resume)},
      {"run.isa",
       "kernel ISA path (never changes bits)",
       {"auto", "scalar", "avx2", "avx512"},
       member(&C::run, &RunSection::isa)},
      {"run.stop_at",
       "stop after this step as if preempted: checkpoint and exit 0 (0: off)",
       {},
       member(&C::run, &RunSection::stop_at)},
      {"ckpt.interval",
       "checkpoint every N steps (0: at the end only)",
       {},
       member(&C::ckpt, &CkptSection::interval)},
      {"ckpt.keep",
       "keep the newest N checkpoints (0: all)",
       {},
       member(&C::ckpt, &CkptSection::keep)},
      {"ckpt.save", "write checkpoints", {}, member(&C::ckpt, &CkptSection::save)},
      {"ckpt.async",
       "write checkpoints from a background thread (in-memory snapshot)",
       {},
       member(&C::ckpt, &CkptSection::async)},
      {"ckpt.load_optim",
       "resume: load the AdamW moments (false: restart them at zero)",
       {},
       member(&C::ckpt, &CkptSection::load_optim)},
      {"ckpt.load_data",
       "resume: load the data order (false: restart it at epoch 0)",
       {},
       member(&C::ckpt, &CkptSection::load_data)},
      {"ckpt.allow_contract_change",
       "resume across a change of run.determinism / numerics.reduce_block",
       {},
       member(&C::ckpt, &CkptSection::allow_contract_change)},
      {"verify.hash",
       "fingerprint kind",
       {"lockstep", "torch-xor"},
       member(&C::verify, &VerifySection::hash)},
      {"verify.fingerprint_version",
       "lockstep fingerprint version: 2 (default), 1 to compare with runs of Lockstep before "
       "checkpoint format 2",
       {},
       member(&C::verify, &VerifySection::fingerprint_version)},
      {"verify.state_interval",
       "fingerprint all state into trace.jsonl every N steps (0: only the exact scalars)",
       {},
       member(&C::verify, &VerifySection::state_interval)},
      {"verify.replica_check_interval",
       "cross-replica check every N steps (0: off)",
       {},
       member(&C::verify, &VerifySection::replica_check_interval)},
      {"verify.ops",
       "op-trace step range A-B (empty: off)",
       {},
       member(&C::verify, &VerifySection::ops)},
      {"numerics.reduce_block",
       "block size B of the canonical sum",
       {},
       member(&C::numerics, &NumericsSection::reduce_block)},
      {"debug.perturb",
       "op whose reduction order is perturbed (testing the tools)",
       {},
       member(&C::debug, &DebugSection::perturb)},
      {"debug.bitflip",
       "RANK:STEP:TENSOR bit flip (testing the replica guard)",
       {},
       member(&C::debug, &DebugSection::bitflip)},
      {"debug.kill_in_save",
       "RANK:STEP: that rank dies after its first shard of that save (testing crash safety)",
       {},
       member(&C::debug, &DebugSection::kill_in_save)},
      {"debug.interleave",
       "timing experiment (lockstep tax --interleaved): modes (fast, deterministic, invariant, "
       "invariant+verify, invariant+optrace) trained side by side in this process on their own "
       "state, one step of each in turn; the first writes trace.jsonl and metrics.jsonl, the "
       "step times of all go to tax_steps.jsonl",
       {},
       member(&C::debug, &DebugSection::interleave)},
  };
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

const KeyInfo& find_key(const std::string& name, const std::string& source) {
  for (const auto& k : config_keys())
    if (k.name == name) return k;
  fail(source + ": unknown config key '" + name + "'",
       "did you mean '" + nearest_key(name) + "'? (`lockstep train --help-config` lists all keys)");
}

std::string kind_of(const FieldRef& f) {
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::int64_t>) return "an integer";
        if constexpr (std::is_same_v<T, double>) return "a number";
        if constexpr (std::is_same_v<T, bool>) return "true or false";
        return "a string";
      },
      f);
}

void check_choice(const KeyInfo& key, const std::string& value, const std::string& source) {
  if (key.choices.empty()) return;
  if (std::find(key.choices.begin(), key.choices.end(), value) != key.choices.end()) return;
  std::string list;
  for (const auto& c : key.choices) list += (list.empty() ? "" : ", ") + c;
  fail(source + ": " + key.name + " = '" + value + "' is not allowed", "use one of " + list);
}

// Assigns a TOML node to a field, with a type check.
void assign_node(Config& cfg, const KeyInfo& key, const toml::node& node,
                 const std::string& source) {
  FieldRef f = key.field(cfg);
  const std::string bad = source + ": " + key.name + " must be " + kind_of(f);
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::int64_t>) {
          auto v = node.value<std::int64_t>();
          check(node.is_integer() && v.has_value(), bad);
          *p = *v;
        } else if constexpr (std::is_same_v<T, double>) {
          check(node.is_number(), bad);
          *p = *node.value<double>();
        } else if constexpr (std::is_same_v<T, bool>) {
          check(node.is_boolean(), bad);
          *p = *node.value<bool>();
        } else {
          check(node.is_string(), bad);
          *p = *node.value<std::string>();
          check_choice(key, *p, source);
        }
      },
      f);
}

std::string format_double(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  // TOML floats need a '.', an exponent, inf or nan.
  if (s.find_first_of(".eEin") == std::string::npos) s += ".0";
  return s;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

const std::vector<KeyInfo>& config_keys() {
  static const std::vector<KeyInfo> keys = make_keys();
  return keys;
}

std::string nearest_key(const std::string& name) {
  std::string best;
  std::size_t best_d = static_cast<std::size_t>(-1);
  for (const auto& k : config_keys()) {
    // Compare against the full name and against the key without its section, so both
    // "model.dmodel" and "d_modle" find "model.d_model".
    const std::string shortname = k.name.substr(k.name.find('.') + 1);
    std::size_t d = std::min(edit_distance(name, k.name), edit_distance(name, shortname));
    if (d < best_d) best_d = d, best = k.name;
  }
  return best;
}

void load_toml_text(Config& cfg, const std::string& text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(std::string_view(text), std::string_view(source));
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    fail(source + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) +
             ": TOML syntax error: " + std::string(e.description()),
         "fix the line named; see launch/configs/tiny.toml for the format");
  }
  for (auto&& [sec_key, sec_node] : root) {
    const std::string sec(sec_key.str());
    const toml::table* tbl = sec_node.as_table();
    if (!tbl) {
      // A bare key at top level: name the nearest section.key.
      find_key(sec, source);
      fail(source + ": '" + sec + "' must be inside a [section]",
           "e.g. [" + nearest_key(sec).substr(0, nearest_key(sec).find('.')) + "]");
    }
    for (auto&& [k, node] : *tbl) {
      const std::string full = sec + "." + std::string(k.str());
      assign_node(cfg, find_key(full, source), node, source);
    }
  }
}

void load_toml_file(Config& cfg, const std::string& path) {
  std::ifstream in(path);
  check(in.good(), "cannot read config file '" + path + "'",
        "check the path; shipped presets are in launch/configs/");
  std::stringstream ss;
  ss << in.rdbuf();
  load_toml_text(cfg, ss.str(), path);
}

void apply_override(Config& cfg, const std::string& assignment) {
  const auto eq = assignment.find('=');
  check(eq != std::string::npos && eq > 0,
        "--set '" + assignment + "' is not of the form section.key=value",
        "e.g. --set parallel.tp=2");
  const std::string name = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  const KeyInfo& key = find_key(name, "--set");
  FieldRef f = key.field(cfg);
  // Strings are taken verbatim; everything else is parsed as a TOML value.
  if (std::holds_alternative<std::string*>(f)) {
    check_choice(key, value, "--set");
    *std::get<std::string*>(f) = value;
    return;
  }
  toml::table t;
  try {
    t = toml::parse(std::string_view("v = " + value), std::string_view("--set"));
  } catch (const toml::parse_error&) {
    fail("--set " + name + "=" + value + ": '" + value + "' is not " + kind_of(f));
  }
  assign_node(cfg, key, *t.get("v"), "--set");
}

std::string to_toml(const Config& cfg_in) {
  Config cfg = cfg_in;  // field() hands out non-const pointers
  std::string out, section;
  for (const auto& k : config_keys()) {
    const std::string sec = k.name.substr(0, k.name.find('.'));
    if (sec != section) {
      if (!section.empty()) out += '\n';
      out.append("[").append(sec).append("]\n");
      section = sec;
    }
    out += k.name.substr(k.name.find('.') + 1) + " = ";
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::int64_t>)
            out += std::to_string(*p);
          else if constexpr (std::is_same_v<T, double>)
            out += format_double(*p);
          else if constexpr (std::is_same_v<T, bool>)
            out += *p ? "true" : "false";
          else
            out += quote(*p);
        },
        k.field(cfg));
    out += "\n";
  }
  return out;
}

ModelConfig model_config(const Config& c) {
  ModelConfig m;
  m.vocab = c.model.vocab;
  m.context = c.model.context;
  m.layers = c.model.layers;
  m.d_model = c.model.d_model;
  m.heads = c.model.heads;
  m.ffn = c.model.ffn;
  m.dropout = static_cast<float>(c.model.dropout);
  m.bias = c.model.bias;
  m.ln_eps = static_cast<float>(c.model.ln_eps);
  return m;
}

}  // namespace lockstep::config
