#include "launch/train/validate.hpp"

#include <algorithm>
#include <string>

#include "model/gpt.hpp"
#include "model/param_table.hpp"
#include "model/pipeline_stage.hpp"
#include "parallel/microbatch_plan.hpp"
#include "runtime/error.hpp"

namespace lockstep::config {
namespace {

bool pow2(std::int64_t v) {
  return v > 0 && (v & (v - 1)) == 0;
}
std::string str(std::int64_t v) {
  return std::to_string(v);
}

// Why a split of `len` tokens is not an aligned subtree of blocks of B under the pow2 tree
// (empty if it is).
std::string alignment_problem(const std::string& what, std::int64_t len, std::int64_t B) {
  if (len % B != 0) return what + " = " + str(len) + " is not a multiple of reduce_block " + str(B);
  if (!pow2(len / B))
    return what + " = " + str(len) + " is " + str(len / B) + " blocks of " + str(B) +
           ", not a power of two";
  return {};
}

// The names the debug keys give (a tensor of the parameter table, an op of the model), checked
// against the model the config describes (when its shapes are valid at all).
std::vector<std::string> name_problems(const Config& c) {
  std::vector<std::string> p;
  if (!model_config_problems(c.model, 1).empty()) return p;
  const ParamTable table = ParamTable::build(c.model);
  auto need_tensor = [&](const char* key, std::string name) {
    if (name.rfind("param/", 0) == 0) name = name.substr(6);
    if (!table.contains(name))
      p.push_back(std::string(key) + " names the tensor '" + name +
                  "', which the model lacks; use a parameter name such as " + table[0].name +
                  " (trace.jsonl's param/ keys)");
  };
  if (c.debug.bitflip.on()) need_tensor("debug.bitflip", c.debug.bitflip.tensor);
  if (c.debug.nan.on()) need_tensor("debug.nan", c.debug.nan.tensor);
  if (!c.debug.perturb.empty()) {
    try {
      check_perturb_op(c.model, c.debug.perturb);
    } catch (const Error& e) {
      p.push_back(e.what());
    }
  }
  return p;
}

// 1F1B fills the pipeline only with at least one microbatch per stage.
std::vector<std::string> pipeline_schedule_problems(const Config& c, std::int64_t dp) {
  std::vector<std::string> p;
  const std::int64_t pp = c.parallel.pp, m = passes_per_rank(c, dp);
  if (pp <= 1 || m == 0 || c.parallel.schedule != PipeSchedule::one_f_one_b || m >= pp) return p;
  p.push_back("parallel.schedule = 1f1b needs at least parallel.pp = " + str(pp) +
              " microbatches per step and DP rank, but global_batch / dp / microbatch gives " +
              str(m) + "; use parallel.microbatch " +
              str(std::max<std::int64_t>(1, c.data.global_batch / dp / pp)) +
              " or less, or a larger data.global_batch");
  return p;
}

}  // namespace

std::int64_t passes_per_rank(const Config& c, std::int64_t dp) {
  const std::int64_t G = c.data.global_batch, mb = c.parallel.microbatch;
  if (dp < 1 || G < 1 || mb < 1 || G % dp != 0 || mb > G / dp) return 0;
  if (c.numerics.tree == TreeShape::pow2 && (G / dp) % mb != 0) return 0;
  return static_cast<std::int64_t>(plan_microbatches(c.numerics.tree, G / dp, mb).passes.size());
}

std::vector<std::string> config_problems(const Config& c, int world_size) {
  std::vector<std::string> p;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) p.push_back(msg);
  };
  const std::int64_t tp = c.parallel.tp, pp = c.parallel.pp;
  need(tp >= 1, "parallel.tp = " + str(tp) + " must be >= 1");
  const bool grid_ok = world_size >= 1 && tp >= 1 && pp >= 1 && world_size % (tp * pp) == 0;
  if (pp == 1)
    need(grid_ok, "ranks = " + str(world_size) + " is not a multiple of parallel.tp = " + str(tp) +
                      " (ranks = tp x dp); use --np a multiple of tp");
  else if (pp > 1 && tp >= 1)
    need(grid_ok, "ranks = " + str(world_size) +
                      " is not a multiple of parallel.tp x parallel.pp = " + str(tp) + " x " +
                      str(pp) + " (ranks = tp x dp x pp); use --np a multiple of " + str(tp * pp));
  for (auto& line : model_config_problems(c.model, tp)) p.push_back(std::move(line));
  for (auto& line : pipeline_problems(c.model, pp, c.parallel.pp_layers.counts))
    p.push_back(std::move(line));
  const std::int64_t dp = grid_ok ? world_size / (tp * pp) : 1;
  const std::int64_t mb = c.parallel.microbatch, G = c.data.global_batch;
  need(mb >= 1, "parallel.microbatch = " + str(mb) + " must be >= 1");
  need(G >= 1, "data.global_batch = " + str(G) + " must be >= 1");
  if (mb >= 1 && G >= 1 && c.numerics.tree == TreeShape::pow2)
    need(G % (dp * mb) == 0, "data.global_batch = " + str(G) +
                                 " is not divisible by dp x microbatch = " + str(dp) + " x " +
                                 str(mb) + "; choose a multiple of " + str(dp * mb) +
                                 " (numerics.tree = \"pow2\" needs equal microbatches)");
  if (mb >= 1 && G >= 1 && c.numerics.tree == TreeShape::halving) {
    need(G % dp == 0, "data.global_batch = " + str(G) + " is not divisible by dp = " + str(dp) +
                          "; choose a multiple of " + str(dp));
    need(G % dp != 0 || mb <= G / dp,
         "parallel.microbatch = " + str(mb) + " exceeds the " + str(G / dp) +
             " sequences per DP rank (global_batch / dp)");
  }
  for (auto& line : pipeline_schedule_problems(c, dp)) p.push_back(std::move(line));
  for (auto& line : optim_config_problems(c.optim)) p.push_back(std::move(line));
  need(c.run.steps >= 0, "run.steps must be >= 0");
  need(c.run.threads >= 0, "run.threads must be >= 0 (0: cores / ranks)");
  need(!c.run.out.empty(), "run.out must name a run directory");
  need(c.numerics.reduce_block >= 1, "numerics.reduce_block must be >= 1");
  need(c.ckpt.interval >= 0 && c.ckpt.keep >= 0, "ckpt.interval and ckpt.keep must be >= 0");
  need(c.verify.replica_check_interval >= 0, "verify.replica_check_interval must be >= 0");
  need(c.verify.fingerprint_version == 1 || c.verify.fingerprint_version == 2,
       "verify.fingerprint_version must be 1 or 2 (2: the default; 1: as Lockstep wrote before "
       "checkpoint format 2)");
  need(c.verify.state_interval >= 0, "verify.state_interval must be >= 0 (0: off)");
  need(!c.run.resume.empty(), "run.resume must be auto, none or a checkpoint path");
  need(c.run.stop_at >= 0, "run.stop_at must be >= 0 (0: off)");
  // The specs' syntax was checked when they were parsed (launch/train/config.hpp); what needs
  // the world size is checked here.
  need(!c.debug.bitflip.on() || c.debug.bitflip.rank < world_size,
       "debug.bitflip = '" + c.debug.bitflip.text() + "' names rank " + str(c.debug.bitflip.rank) +
           ", but the job has " + str(world_size) + " rank(s)");
  for (auto& line : name_problems(c)) p.push_back(std::move(line));
  need(c.debug.nan.rank < world_size, "debug.nan = '" + c.debug.nan.text() + "' names rank " +
                                          str(c.debug.nan.rank) + ", but the job has " +
                                          str(world_size) + " rank(s)");
  need(c.debug.kill_in_save.rank < world_size,
       "debug.kill_in_save = '" + c.debug.kill_in_save.text() + "' names rank " +
           str(c.debug.kill_in_save.rank) + ", but the job has " + str(world_size) + " rank(s)");
  return p;
}

void validate_or_throw(const Config& cfg, int world_size) {
  const auto problems = config_problems(cfg, world_size);
  if (problems.empty()) return;
  std::string msg = "invalid configuration:";
  for (const auto& line : problems) msg += "\n  " + line;
  fail(msg, "fix the keys named (in the TOML file or with --set section.key=value)");
}

std::string GuaranteeReport::summary() const {
  std::string s, why;
  for (const auto& g : levels) {
    s += (s.empty() ? "" : "  ") + g.level + (g.holds ? " ✓" : " ✗");
    if (!g.holds) why += "\n  " + g.level + " lost: " + g.why;
  }
  return s + why;
}

GuaranteeReport guarantees(const Config& c, int world_size) {
  GuaranteeReport r;
  const Determinism mode = c.run.determinism;
  const std::int64_t tp = c.parallel.tp, dp = world_size / (tp * c.parallel.pp),
                     B = c.numerics.reduce_block;
  if (mode == Determinism::fast) {
    const std::string why = "determinism = fast may use nondeterministic kernels and orders";
    for (const char* g : {"G1", "G2", "G3", "G4"}) r.levels.push_back({g, false, why});
    return r;
  }
  r.levels.push_back({"G1", true, "fixed reduction orders for this layout"});
  r.levels.push_back({"G2", true, "a checkpoint holds all state that influences the next step"});
  std::string why;
  if (mode != Determinism::invariant) {
    why = std::string("determinism = ") + determinism_name(mode) +
          " uses layout-dependent reduction orders";
  } else {
    const auto& m = c.model;
    const TreeShape tree = c.numerics.tree;
    std::vector<std::string> problems;
    auto add = [&](const std::string& s) {
      if (!s.empty()) problems.push_back(s);
    };
    if (!pow2(tp)) add("TP = " + str(tp) + " is not a power of two");
    if (!pow2(dp)) add("DP = " + str(dp) + " is not a power of two");
    if (pow2(tp) && tp > 1) {
      add(feature_cut_problem(tree, "row-parallel K per TP rank (model.d_model / tp)",
                              "model.d_model", m.d_model, tp, B));
      add(feature_cut_problem(tree, "row-parallel K per TP rank (model.ffn / tp)", "model.ffn",
                              m.ffn, tp, B));
      add(feature_cut_problem(tree, "vocab shard per TP rank (padded vocab / tp)",
                              "a padded vocab (model.vocab_pad_to) of", m.padded_vocab(), tp, B));
    }
    // Under halving the token axis is a tree over sequences: a power-of-two DP dividing the
    // global batch cuts it at nodes, and launch splits any microbatch at the tree's nodes.
    if (tree == TreeShape::pow2) {
      add(alignment_problem("tokens per microbatch (microbatch x context)",
                            c.parallel.microbatch * m.context, B));
      if (dp > 1)
        add(alignment_problem("tokens per DP rank (global_batch / dp x context)",
                              c.data.global_batch / dp * m.context, B));
    }
    for (const auto& p : problems) why += (why.empty() ? "" : "; ") + p;
  }
  const bool g3 = why.empty();
  r.levels.push_back({"G3", g3, why});
  r.levels.push_back({"G4", g3, g3 ? "" : "needs G3"});
  return r;
}

}  // namespace lockstep::config
