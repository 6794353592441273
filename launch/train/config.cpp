#include "launch/train/config.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "launch/train/modes.hpp"
#include "runtime/error.hpp"
#include "runtime/text.hpp"

namespace lockstep::config {
namespace {

// A key reading or writing the Config field that at(cfg) returns: numbers, booleans and
// strings directly; enums through their name table (the key's choices are its names); spec
// structs through their parse() / text().
template <class At>
KeyInfo key(std::string name, std::string help, At at) {
  using T = std::remove_cvref_t<std::invoke_result_t<At, Config&>>;
  KeyInfo k{std::move(name), std::move(help), {}, {}};
  if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double> ||
                std::is_same_v<T, bool> || std::is_same_v<T, std::string>) {
    k.field = [at](Config& c) -> FieldRef { return &at(c); };
  } else if constexpr (std::is_enum_v<T>) {
    k.choices = enum_name_list<T>();
    k.field = [at](Config& c) -> FieldRef {
      T* f = &at(c);
      return TextField{[f] { return std::string(enum_name(*f)); },
                       [f](const std::string& text, const std::string& what) {
                         *f = parse_enum<T>(text, what);
                       }};
    };
  } else {
    k.field = [at](Config& c) -> FieldRef {
      T* f = &at(c);
      return TextField{
          [f] { return f->text(); },
          [f](const std::string& text, const std::string& what) { *f = T::parse(text, what); }};
    };
  }
  return k;
}

// The field a key names: AT(model.vocab) is [](Config& c) -> auto& { return c.model.vocab; }.
#define AT(path)            \
  [](Config & c) -> auto& { \
    return c.path;          \
  }

std::vector<KeyInfo> make_keys() {
  return {
      key("model.vocab", "vocabulary size (byte tokenizer: 256)", AT(model.vocab)),
      key("model.vocab_pad_to",
          "the model's vocabulary is model.vocab rounded up to a multiple of this (1: none)",
          AT(model.vocab_pad_to)),
      key("model.context", "sequence length in tokens", AT(model.context)),
      key("model.layers", "transformer blocks", AT(model.layers)),
      key("model.d_model", "hidden size", AT(model.d_model)),
      key("model.heads", "attention heads", AT(model.heads)),
      key("model.ffn", "MLP hidden size", AT(model.ffn)),
      key("model.dropout", "dropout probability", AT(model.dropout)),
      key("model.bias", "biases in linear layers", AT(model.bias)),
      key("model.ln_eps", "LayerNorm epsilon", AT(model.ln_eps)),
      key("parallel.tp", "tensor-parallel size (dp = ranks / (tp x pp))", AT(parallel.tp)),
      key("parallel.pp", "pipeline-parallel stages (model.layers / pp layers each)",
          AT(parallel.pp)),
      key("parallel.pp_layers",
          "each stage's layer count, first stage first, e.g. \"3,5\" (empty: equal stages); "
          "never changes bits",
          AT(parallel.pp_layers)),
      key("parallel.schedule",
          "pipeline schedule: 1f1b (holds at most pp microbatches of activations) or gpipe (all "
          "forwards, then all backwards); never changes bits",
          AT(parallel.schedule)),
      key("parallel.microbatch", "sequences per forward/backward", AT(parallel.microbatch)),
      key("parallel.zero", "distributed optimizer (ZeRO-1)", AT(parallel.zero)),
      key("optim.lr", "peak learning rate", AT(optim.schedule.lr)),
      key("optim.min_lr", "final learning rate of the decay", AT(optim.schedule.min_lr)),
      key("optim.warmup", "linear warmup steps", AT(optim.schedule.warmup)),
      key("optim.schedule", "learning-rate decay", AT(optim.schedule.schedule)),
      key("optim.beta1", "AdamW beta1", AT(optim.adamw.beta1)),
      key("optim.beta2", "AdamW beta2", AT(optim.adamw.beta2)),
      key("optim.eps", "AdamW epsilon", AT(optim.adamw.eps)),
      key("optim.weight_decay", "decoupled weight decay (2-D weights only)",
          AT(optim.adamw.weight_decay)),
      key("optim.clip", "global gradient-norm clip (0: off)", AT(optim.clip)),
      key("optim.on_nonfinite",
          "a non-finite loss or gradient: stop the job before the update, or skip the step "
          "(counted, traced, replayed identically)",
          AT(optim.on_nonfinite)),
      key("data.path", "indexed dataset prefix (empty: built-in synthetic corpus)", AT(data.path)),
      key("data.global_batch", "sequences per step", AT(data.global_batch)),
      key("run.steps", "training steps", AT(run.steps)),
      key("run.seed", "seed of init, dropout and data order", AT(run.seed)),
      key("run.out", "run directory", AT(run.out)),
      key("run.determinism", "execution mode", AT(run.determinism)),
      key("run.threads", "OpenMP threads per rank (0: cores / ranks)", AT(run.threads)),
      key("run.resume", "auto | none | checkpoint path", AT(run.resume)),
      key("run.isa", "kernel ISA path (never changes bits)", AT(run.isa)),
      key("run.stop_at", "stop after this step as if preempted: checkpoint and exit 0 (0: off)",
          AT(run.stop_at)),
      key("run.step_timeout",
          "progress watchdog: a rank waiting this long for another aborts the job naming the "
          "ranks that did not arrive (exit 5); auto = max(300 s, 10 x median step), seconds, "
          "or 0 (off)",
          AT(run.step_timeout)),
      key("ckpt.interval", "checkpoint every N steps (0: at the end only)", AT(ckpt.interval)),
      key("ckpt.keep", "keep the newest N checkpoints (0: all)", AT(ckpt.keep)),
      key("ckpt.save", "write checkpoints", AT(ckpt.save)),
      key("ckpt.async", "write checkpoints from a background thread (in-memory snapshot)",
          AT(ckpt.async)),
      key("ckpt.load_optim", "resume: load the AdamW moments (false: restart them at zero)",
          AT(ckpt.load_optim)),
      key("ckpt.load_data", "resume: load the data order (false: restart it at epoch 0)",
          AT(ckpt.load_data)),
      key("ckpt.allow_contract_change",
          "resume across a change of run.determinism / numerics.reduce_block / numerics.tree",
          AT(ckpt.allow_contract_change)),
      key("verify.hash", "fingerprint kind", AT(verify.hash)),
      key("verify.fingerprint_version",
          "lockstep fingerprint version: 2 (default), 1 to compare with runs of Lockstep before "
          "checkpoint format 2",
          AT(verify.fingerprint_version)),
      key("verify.state_interval",
          "fingerprint all state into trace.jsonl every N steps (0: only the exact scalars)",
          AT(verify.state_interval)),
      key("verify.replica_check_interval", "cross-replica check every N steps (0: off)",
          AT(verify.replica_check_interval)),
      key("verify.ops", "op-trace step range A-B (empty: off)", AT(verify.ops)),
      key("numerics.reduce_block", "block size B of the canonical sum", AT(numerics.reduce_block)),
      key("numerics.tree",
          "the canonical tree: halving (contract v2: every power-of-two cut is a node, sequences "
          "are the token axis' leaves) or pow2 (v1, runs and checkpoints made before it)",
          AT(numerics.tree)),
      key("debug.perturb", "op whose reduction order is perturbed (testing the tools)",
          AT(debug.perturb)),
      key("debug.bitflip", "RANK:STEP:TENSOR bit flip (testing the replica guard)",
          AT(debug.bitflip)),
      key("debug.nan",
          "STEP:TENSOR[:RANK]: NaN into element 0 of each rank's (RANK's) slice of TENSOR's "
          "gradient at STEP (testing the non-finite guard)",
          AT(debug.nan)),
      key("debug.kill_in_save",
          "RANK:STEP: that rank dies after its first shard of that save (testing crash safety)",
          AT(debug.kill_in_save)),
      key("debug.interleave",
          "timing experiment (lockstep tax --interleaved): two or more modes trained side by side "
          "in this process on their own state, one step of each in turn; the first writes "
          "trace.jsonl and metrics.jsonl, the step times of all go to tax_steps.jsonl",
          AT(debug.interleave)),
  };
}
#undef AT

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
      [](const auto& p) -> std::string {
        using T = std::remove_pointer_t<std::remove_cvref_t<decltype(p)>>;
        if constexpr (std::is_same_v<T, std::int64_t>) return "an integer";
        if constexpr (std::is_same_v<T, double>) return "a number";
        if constexpr (std::is_same_v<T, bool>) return "true or false";
        return "a string";  // std::string* and TextField
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

// Sets a text key (enum or spec): the choice check first (its message lists the names).
void assign_text(const KeyInfo& key, TextField& f, const std::string& value,
                 const std::string& source) {
  check_choice(key, value, source);
  f.set(value, source + ": " + key.name);
}

// Assigns a TOML node to a field, with a type check.
// A string node's text, or a number as written (shortest round-trip form).
std::string node_text(const toml::node& node) {
  if (node.is_string()) return *node.value<std::string>();
  if (const toml::array* a = node.as_array()) {  // [3, 5] -> "3,5" (parallel.pp_layers)
    std::string t;
    for (const toml::node& e : *a)
      t += (t.empty() ? "" : ",") + (e.is_number() || e.is_string() ? node_text(e) : "?");
    return t;
  }
  if (node.is_integer()) return std::to_string(*node.value<std::int64_t>());
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, *node.value<double>());
  return std::string(buf, res.ptr);
}

void assign_node(Config& cfg, const KeyInfo& key, const toml::node& node,
                 const std::string& source) {
  FieldRef f = key.field(cfg);
  const std::string bad = source + ": " + key.name + " must be " + kind_of(f);
  std::visit(
      [&](auto& p) {
        using T = std::remove_cvref_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::int64_t*>) {
          auto v = node.value<std::int64_t>();
          check(node.is_integer() && v.has_value(), bad);
          *p = *v;
        } else if constexpr (std::is_same_v<T, double*>) {
          check(node.is_number(), bad);
          *p = *node.value<double>();
        } else if constexpr (std::is_same_v<T, bool*>) {
          check(node.is_boolean(), bad);
          *p = *node.value<bool>();
        } else if constexpr (std::is_same_v<T, std::string*>) {
          check(node.is_string(), bad);
          *p = *node.value<std::string>();
        } else {  // a spec or enum: its own parser reads the text (a bare number too,
                  // e.g. step_timeout = 30)
          check(node.is_string() || node.is_number() || node.is_array(), bad);
          assign_text(key, p, node_text(node), source);
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
  // Strings and text keys are taken verbatim; everything else is parsed as a TOML value.
  if (std::holds_alternative<std::string*>(f)) {
    *std::get<std::string*>(f) = value;
    return;
  }
  if (auto* text = std::get_if<TextField>(&f)) {
    assign_text(key, *text, value, "--set");
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

std::string value_text(const Config& cfg_in, const KeyInfo& key) {
  Config cfg = cfg_in;  // field() hands out non-const references
  return std::visit(
      [](const auto& p) -> std::string {
        using T = std::remove_cvref_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::int64_t*>)
          return std::to_string(*p);
        else if constexpr (std::is_same_v<T, double*>)
          return format_double(*p);
        else if constexpr (std::is_same_v<T, bool*>)
          return *p ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string*>)
          return quote(*p);
        else
          return quote(p.get());
      },
      key.field(cfg));
}

std::string to_toml(const Config& cfg) {
  std::string out, section;
  for (const auto& k : config_keys()) {
    const std::string sec = k.name.substr(0, k.name.find('.'));
    if (sec != section) {
      if (!section.empty()) out += '\n';
      out.append("[").append(sec).append("]\n");
      section = sec;
    }
    out += k.name.substr(k.name.find('.') + 1) + " = " + value_text(cfg, k) + "\n";
  }
  return out;
}

LrScheduleConfig lr_schedule(const Config& cfg) {
  LrScheduleConfig s = cfg.optim.schedule;
  s.total_steps = cfg.run.steps;
  return s;
}

KernelCtx kernel_ctx(const Config& cfg, int threads) {
  return KernelCtx{resolve_isa(cfg.run.isa), threads, static_cast<int>(cfg.numerics.reduce_block),
                   cfg.numerics.tree};
}

// ---- the pipeline's layer split -------------------------------------------------------------

StageLayers StageLayers::parse(const std::string& text, const std::string& what) {
  StageLayers s;
  std::string t = text;
  for (char& c : t)
    if (c == ',' || c == '[' || c == ']') c = ' ';
  std::istringstream in(t);
  std::string word;
  while (in >> word) {
    const bool digits =
        word.size() < 10 && word.find_first_not_of("0123456789") == std::string::npos;
    check(digits && std::stoll(word) >= 1,
          what + " = '" + text + "': '" + word + "' is not a layer count >= 1",
          "list each stage's layers, first stage first, e.g. parallel.pp_layers=3,5");
    s.counts.push_back(std::stoll(word));
  }
  return s;
}

std::string StageLayers::text() const {
  std::string t;
  for (const std::int64_t n : counts) t += (t.empty() ? "" : ",") + std::to_string(n);
  return t;
}

// ---- the debug specs -----------------------------------------------------------------------

BitFlip BitFlip::parse(const std::string& text, const std::string& what) {
  BitFlip b;
  if (text.empty()) return b;
  long long rank = -1, step = 0;
  int used = 0;
  const bool ok = std::sscanf(text.c_str(), "%lld:%lld:%n", &rank, &step, &used) == 2 && used > 0 &&
                  static_cast<std::size_t>(used) < text.size() && rank >= 0 && step >= 1 &&
                  text.find_first_of(" \t", static_cast<std::size_t>(used)) == std::string::npos;
  check(ok, what + " = '" + text + "' is not RANK:STEP:TENSOR with RANK >= 0 and STEP >= 1",
        "e.g. debug.bitflip=1:3:param/embed.weight");
  b.rank = static_cast<int>(rank);
  b.step = step;
  b.tensor = text.substr(static_cast<std::size_t>(used));
  return b;
}

std::string BitFlip::text() const {
  return on() ? std::to_string(rank) + ":" + std::to_string(step) + ":" + tensor : "";
}

NanInjection NanInjection::parse(const std::string& text, const std::string& what) {
  NanInjection n;
  if (text.empty()) return n;
  long long step = 0;
  int used = 0;
  const bool ok = std::sscanf(text.c_str(), "%lld:%n", &step, &used) == 1 && used > 0 &&
                  static_cast<std::size_t>(used) < text.size() && step >= 1 &&
                  text.find_first_of(" \t", static_cast<std::size_t>(used)) == std::string::npos;
  check(ok, what + " = '" + text + "' is not STEP:TENSOR[:RANK] with STEP >= 1",
        "e.g. debug.nan=3:embed.weight or debug.nan=3:embed.weight:1");
  n.step = step;
  n.tensor = text.substr(static_cast<std::size_t>(used));
  const auto colon = n.tensor.rfind(':');
  if (colon != std::string::npos) {
    const std::string r = n.tensor.substr(colon + 1);
    check(!r.empty() && r.size() < 6 && r.find_first_not_of("0123456789") == std::string::npos,
          what + " = '" + text + "': RANK '" + r + "' is not a rank number",
          "e.g. debug.nan=3:embed.weight:1");
    n.rank = std::stoi(r);
    n.tensor.resize(colon);
  }
  return n;
}

std::string NanInjection::text() const {
  if (!on()) return "";
  return std::to_string(step) + ":" + tensor + (rank >= 0 ? ":" + std::to_string(rank) : "");
}

KillInSave KillInSave::parse(const std::string& text, const std::string& what) {
  KillInSave k;
  if (text.empty()) return k;
  long long rank = -1, step = 0;
  char tail = 0;
  check(
      std::sscanf(text.c_str(), "%lld:%lld%c", &rank, &step, &tail) == 2 && rank >= 0 && step >= 1,
      what + " = '" + text + "' is not RANK:STEP with RANK >= 0 and STEP >= 1",
      "e.g. debug.kill_in_save=1:4");
  k.rank = static_cast<int>(rank);
  k.step = step;
  return k;
}

std::string KillInSave::text() const {
  return rank >= 0 ? std::to_string(rank) + ":" + std::to_string(step) : "";
}

StepTimeout StepTimeout::parse(const std::string& text, const std::string& what) {
  StepTimeout t;
  if (text == "auto") return t;
  double v = -1;
  const bool plain = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos &&
                     std::count(text.begin(), text.end(), '.') <= 1 && text != ".";
  const auto res = std::from_chars(text.data(), text.data() + text.size(), v);
  check(plain && res.ec == std::errc{} && res.ptr == text.data() + text.size() && v >= 0,
        what + " = '" + text + "' is not 'auto' or a number of seconds >= 0",
        "e.g. run.step_timeout=600 (0: off)");
  t.automatic = false;
  t.seconds = v;
  return t;
}

std::string StepTimeout::text() const {
  if (automatic) return "auto";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, seconds);
  return std::string(buf, res.ptr);
}

Interleave Interleave::parse(const std::string& text, const std::string& what) {
  Interleave r;
  if (text.empty()) return r;
  r.modes = split_list(text);
  bool ok = r.modes.size() >= 2;
  for (std::size_t i = 0; i < r.modes.size(); ++i)
    ok = ok && is_run_mode(r.modes[i]) &&
         std::find(r.modes.begin(), r.modes.begin() + i, r.modes[i]) == r.modes.begin() + i;
  check(ok,
        what + " = '" + text + "' is not a list of two or more distinct modes among " +
            run_modes_text(),
        "e.g. debug.interleave=fast,invariant");
  return r;
}

std::string Interleave::text() const {
  return join_list(modes);
}

}  // namespace lockstep::config
