// Config loading, overrides, the resolved TOML round trip, validation messages and the
// guarantee statement per layout.
#include <catch2/catch.hpp>

#include <string>

#include "launch/train/config.hpp"
#include "launch/train/memory_estimate.hpp"
#include "launch/train/validate.hpp"
#include "model/memory_footprint.hpp"
#include "model/pipeline_stage.hpp"
#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/text.hpp"

using namespace lockstep;
using namespace lockstep::config;

namespace {
std::string preset(const char* name) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/launch/configs/" + name;
}
Config tiny() {
  Config c;
  load_toml_file(c, preset("tiny.toml"));
  return c;
}
}  // namespace

TEST_CASE("presets load and are valid on the layouts they are meant for") {
  Config t = tiny();
  REQUIRE(t.model.d_model == 128);
  REQUIRE(t.model.dropout == 0.1);
  for (int ranks : {1, 2, 4}) REQUIRE(config_problems(t, ranks).empty());
  Config b;
  load_toml_file(b, preset("bench-small.toml"));
  REQUIRE(b.model.context == 256);
  REQUIRE(b.data.global_batch == 16);
  REQUIRE(config_problems(b, 2).empty());
  // GPT-2 small: 50257 tokens padded to 50304 rows (a multiple of 128), valid at TP 1, 2, 4.
  Config g;
  load_toml_file(g, preset("gpt2-small.toml"));
  REQUIRE((g.model.d_model == 768 && g.model.heads == 12 && g.model.ffn == 3072));
  REQUIRE((g.model.vocab == 50257 && g.model.padded_vocab() == 50304));
  for (int tp : {1, 2, 4}) {
    g.parallel.tp = tp;
    INFO(tp);
    REQUIRE(config_problems(g, tp).empty());
  }
}

TEST_CASE("model.vocab_pad_to: the model's vocabulary, independent of the layout") {
  Config c = tiny();
  apply_override(c, "model.vocab=250");
  REQUIRE(c.model.padded_vocab() == 250);
  apply_override(c, "parallel.tp=4");
  REQUIRE(config_problems(c, 4).size() == 1);  // 250 rows do not split 4 ways
  REQUIRE(config_problems(c, 4)[0].find("model.vocab_pad_to") != std::string::npos);
  apply_override(c, "model.vocab_pad_to=128");
  REQUIRE(c.model.padded_vocab() == 256);
  REQUIRE(config_problems(c, 4).empty());
  apply_override(c, "model.vocab_pad_to=0");
  REQUIRE(!config_problems(c, 4).empty());
}

TEST_CASE("--set overrides parse by the key's type") {
  Config c = tiny();
  apply_override(c, "parallel.tp=2");
  apply_override(c, "optim.lr=0.5");
  apply_override(c, "optim.lr=1");  // an integer is a fine number
  apply_override(c, "model.bias=true");
  apply_override(c, "run.out=runs/x y");
  apply_override(c, "run.determinism=fast");
  REQUIRE(c.parallel.tp == 2);
  REQUIRE(c.optim.schedule.lr == 1.0);
  REQUIRE(c.run.determinism == Determinism::fast);
  REQUIRE(c.model.bias);
  REQUIRE(c.run.out == "runs/x y");
  REQUIRE_THROWS_WITH(apply_override(c, "parallel.tp=two"), Catch::Contains("an integer"));
  REQUIRE_THROWS_WITH(apply_override(c, "model.bias=1"), Catch::Contains("true or false"));
  REQUIRE_THROWS_WITH(apply_override(c, "run.determinism=exact"),
                      Catch::Contains("invariant, deterministic, fast"));
  REQUIRE_THROWS_WITH(apply_override(c, "tp"), Catch::Contains("section.key=value"));
}

TEST_CASE("unknown keys are errors that name the nearest valid key") {
  Config c;
  REQUIRE_THROWS_WITH(apply_override(c, "model.dmodel=3"), Catch::Contains("'model.d_model'"));
  REQUIRE_THROWS_WITH(apply_override(c, "paralel.tp=3"), Catch::Contains("'parallel.tp'"));
  REQUIRE_THROWS_WITH(load_toml_text(c, "[optim]\nlearning_rate = 1\n", "x.toml"),
                      Catch::Contains("x.toml") && Catch::Contains("optim.learning_rate"));
  REQUIRE_THROWS_WITH(load_toml_text(c, "[model]\nlayers = \"two\"\n", "x.toml"),
                      Catch::Contains("model.layers must be an integer"));
  REQUIRE_THROWS_WITH(load_toml_text(c, "[model\nlayers = 2\n", "x.toml"),
                      Catch::Contains("x.toml:1") && Catch::Contains("syntax"));
  REQUIRE_THROWS_WITH(load_toml_text(c, "steps = 3\n", "x.toml"), Catch::Contains("run.steps"));
  REQUIRE_THROWS_WITH(load_toml_file(c, "/nonexistent.toml"), Catch::Contains("/nonexistent.toml"));
  REQUIRE(nearest_key("d_modle") == "model.d_model");
}

TEST_CASE("the resolved config round-trips exactly") {
  Config c = tiny();
  apply_override(c, "optim.lr=0.00030000000000000003");
  apply_override(c, "data.path=a \"quoted\" path");
  const std::string text = to_toml(c);
  Config d;
  load_toml_text(d, text, "resolved");
  REQUIRE(to_toml(d) == text);
  REQUIRE(d.optim.schedule.lr == c.optim.schedule.lr);
  REQUIRE(d.data.path == c.data.path);
}

TEST_CASE("bad configs: one clear line per problem") {
  struct Case {
    const char* set;
    int ranks;
    const char* message;
  };
  const Case cases[] = {
      {"parallel.tp=3", 3, "model.heads = 4 is not divisible by parallel.tp = 3"},
      {"parallel.tp=2", 3, "ranks = 3 is not a multiple of parallel.tp = 2"},
      {"model.ffn=501", 2, "model.ffn = 501 is not divisible by parallel.tp = 2"},
      {"data.global_batch=6", 4, "data.global_batch = 6 is not divisible by dp = 4"},
      {"parallel.microbatch=0", 1, "parallel.microbatch = 0 must be >= 1"},
      {"model.heads=3", 1, "model.d_model = 128 is not divisible by model.heads = 3"},
      {"model.dropout=1.5", 1, "model.dropout must be in [0, 1)"},
      {"optim.eps=0", 1, "optim.eps must be > 0"},
      {"numerics.reduce_block=0", 1, "numerics.reduce_block must be >= 1"},
  };
  for (const auto& k : cases) {
    Config c = tiny();
    if (std::string(k.set).rfind("model.ffn", 0) == 0) apply_override(c, "parallel.tp=2");
    apply_override(c, k.set);
    INFO(k.set << " on " << k.ranks << " ranks");
    const auto problems = config_problems(c, k.ranks);
    REQUIRE_FALSE(problems.empty());
    bool found = false;
    for (const auto& p : problems) found = found || p.find(k.message) != std::string::npos;
    REQUIRE(found);
    REQUIRE_THROWS_AS(validate_or_throw(c, k.ranks), Error);
  }
}

TEST_CASE("guarantees: which layouts keep G3 and why not") {
  auto holds = [](const Config& c, int ranks, const char* level) {
    for (const auto& g : guarantees(c, ranks).levels)
      if (g.level == level) return g.holds;
    return false;
  };
  Config c = tiny();
  for (auto [tp, ranks, mb] :
       {std::tuple{1, 1, 1}, {1, 2, 1}, {2, 2, 1}, {2, 4, 1}, {1, 1, 2}, {1, 2, 2}}) {
    c.parallel.tp = tp;
    c.parallel.microbatch = mb;
    INFO("tp=" << tp << " ranks=" << ranks << " mb=" << mb);
    REQUIRE(holds(c, ranks, "G3"));
    REQUIRE(holds(c, ranks, "G4"));
  }
  c.parallel.tp = 4;  // d_model / 4 = 32 < one block of 64
  REQUIRE_FALSE(holds(c, 4, "G3"));
  REQUIRE(guarantees(c, 4).summary().find("d_model / tp") != std::string::npos);
  REQUIRE(holds(c, 4, "G1"));
  c.parallel.tp = 1;
  c.data.global_batch = 12;  // 3 ranks x 4 sequences: DP = 3
  REQUIRE_FALSE(holds(c, 3, "G3"));
  REQUIRE(guarantees(c, 3).summary().find("DP = 3 is not a power of two") != std::string::npos);
  c = tiny();
  c.run.determinism = Determinism::deterministic;
  REQUIRE(holds(c, 2, "G2"));
  REQUIRE_FALSE(holds(c, 2, "G3"));
  c.run.determinism = Determinism::fast;
  REQUIRE_FALSE(holds(c, 1, "G1"));
}

TEST_CASE("numerics.tree: halving keeps G3 on GPT-2's shapes where pow2 loses it, and says why") {
  auto g3 = [](const Config& c, int ranks) {
    for (const auto& g : guarantees(c, ranks).levels)
      if (g.level == "G3") return g;
    return Guarantee{};
  };
  Config g;
  load_toml_file(g, preset("gpt2-small.toml"));
  REQUIRE(g.numerics.tree == TreeShape::halving);  // the default contract
  // TP 2 (d_model / 2 = 6 blocks), DP 2 and DP 4 (6 and 3 sequences per rank), TP 2 x DP 2,
  // microbatch 1..4 (split at the nodes): all G3 under halving.
  for (auto [tp, ranks] : {std::pair{1, 1}, {2, 2}, {1, 2}, {1, 4}, {2, 4}})
    for (int mb : {1, 2, 3}) {
      g.parallel.tp = tp;
      g.parallel.microbatch = mb;
      INFO("tp=" << tp << " ranks=" << ranks << " mb=" << mb);
      REQUIRE(config_problems(g, ranks).empty());
      REQUIRE(g3(g, ranks).holds);
    }
  // TP 4: the 50304-row vocab is 196.5 blocks per rank; padding to a multiple of 256 fixes it.
  g.parallel.tp = 4;
  g.parallel.microbatch = 1;
  REQUIRE_FALSE(g3(g, 4).holds);
  REQUIRE(g3(g, 4).why.find("a padded vocab (model.vocab_pad_to) of 50176 or 50432") !=
          std::string::npos);
  apply_override(g, "model.vocab_pad_to=256");
  REQUIRE(g3(g, 4).holds);
  apply_override(g, "model.vocab_pad_to=128");
  // pow2: TP 2 loses G3 naming the axis, the block count and the sizes that keep it.
  apply_override(g, "numerics.tree=pow2");
  g.parallel.tp = 2;
  g.parallel.microbatch = 1;
  REQUIRE_FALSE(g3(g, 2).holds);
  const std::string why = g3(g, 2).why;
  INFO(why);
  REQUIRE(why.find("model.d_model / tp) = 384 is not a power-of-two number of blocks of 64; "
                   "model.d_model 512 or 1024 would keep G3") != std::string::npos);
  // pow2 needs equal microbatches; halving takes any size up to the rank's sequences.
  g.parallel.tp = 1;
  g.parallel.microbatch = 5;
  REQUIRE_FALSE(config_problems(g, 1).empty());
  apply_override(g, "numerics.tree=halving");
  REQUIRE(config_problems(g, 1).empty());
  g.parallel.microbatch = 13;
  REQUIRE_FALSE(config_problems(g, 1).empty());
  // halving: a shard that is not whole blocks names the nearby sizes.
  Config c = tiny();
  apply_override(c, "model.ffn=1600");
  apply_override(c, "numerics.reduce_block=64");
  c.parallel.tp = 4;
  c.model.d_model = 256;
  const std::string w = g3(c, 4).why;
  INFO(w);
  REQUIRE(w.find("(model.ffn / tp) = 400 is not a whole number of blocks of 64; model.ffn 1536 "
                 "or 1792 would keep G3") != std::string::npos);
  // the tree is part of config.toml
  REQUIRE(to_toml(c).find("tree = \"halving\"") != std::string::npos);
}

TEST_CASE("malformed checkpoint, verify and fault-injection keys are refused") {
  // Specs are parsed when they are read: a malformed one is refused by the override itself.
  for (const char* set : {"verify.ops=5",
                          "verify.ops=3-2",
                          "verify.ops=0-2",
                          "debug.bitflip=0:1",
                          "debug.bitflip=1:0:param/x",
                          "debug.kill_in_save=0",
                          "debug.interleave=fast",
                          "debug.interleave=fast,fast",
                          "debug.interleave=fast,quick",
                          "debug.interleave=,",
                          "run.isa=avx1024",
                          "verify.hash=md5",
                          "optim.schedule=step",
                          "debug.nan=3",
                          "debug.nan=0:embed.weight",
                          "debug.nan=x:embed.weight",
                          "debug.nan=3:embed.weight:x",
                          "optim.on_nonfinite=ignore",
                          "run.step_timeout=abc",
                          "run.step_timeout=-1",
                          "run.step_timeout=",
                          "run.step_timeout=1e3",
                          "run.step_timeout=inf",
                          "run.step_timeout=3s"}) {
    Config c = tiny();
    INFO(set);
    const std::string key(set, std::string(set).find('='));
    REQUIRE_THROWS_WITH(apply_override(c, set), Catch::Contains(key));
  }
  // What needs the layout is refused by the validator.
  for (const char* set :
       {"run.resume=", "debug.bitflip=7:1:param/embed.weight", "debug.bitflip=1:1:param/x",
        "debug.perturb=layers.0.attn.nothing.fwd", "run.stop_at=-1", "debug.kill_in_save=2:1",
        "ckpt.interval=-1", "debug.nan=2:param/nothing", "debug.nan=2:embed.weight:2"}) {
    Config c = tiny();
    apply_override(c, set);
    INFO(set);
    REQUIRE(config_problems(c, 2).size() == 1);
  }
  for (const char* set :
       {"verify.ops=2-4", "run.resume=auto", "debug.bitflip=1:3:param/embed.weight",
        "debug.kill_in_save=1:2", "debug.perturb=layers.0.attn.scores.fwd", "ckpt.interval=5",
        "run.stop_at=3", "debug.interleave=fast,invariant",
        "debug.interleave=invariant+optrace,deterministic,fast", "debug.nan=2:embed.weight",
        "debug.nan=2:param/layers.1.mlp.fc2.weight:1", "optim.on_nonfinite=skip"}) {
    Config c = tiny();
    apply_override(c, set);
    INFO(set);
    REQUIRE(config_problems(c, 2).empty());
  }
}

TEST_CASE("run.step_timeout: auto (default), seconds, or 0 (off)") {
  Config c = tiny();
  REQUIRE(c.run.step_timeout.automatic);
  REQUIRE(to_toml(c).find("step_timeout = \"auto\"") != std::string::npos);
  for (const auto& [set, seconds] : {std::pair{"run.step_timeout=30", 30.0},
                                     {"run.step_timeout=2.5", 2.5},
                                     {"run.step_timeout=0", 0.0}}) {
    INFO(set);
    apply_override(c, set);
    REQUIRE_FALSE(c.run.step_timeout.automatic);
    REQUIRE(c.run.step_timeout.seconds == seconds);
    REQUIRE(config_problems(c, 2).empty());
  }
  REQUIRE(to_toml(c).find("step_timeout = \"0\"") != std::string::npos);
  apply_override(c, "run.step_timeout=auto");
  REQUIRE(c.run.step_timeout.automatic);
  // In a TOML file the seconds may be written as a bare number too.
  for (const auto& [text, seconds] :
       {std::pair{"[run]\nstep_timeout = 30\n", 30.0}, {"[run]\nstep_timeout = 2.5\n", 2.5}}) {
    Config d = tiny();
    load_toml_text(d, text, "inline");
    REQUIRE(d.run.step_timeout.seconds == seconds);
  }
}

TEST_CASE("enum keys and specs are typed at load and written back as read") {
  Config c = tiny();
  for (const char* set : {"run.determinism=deterministic", "run.isa=avx2", "verify.hash=torch-xor",
                          "optim.schedule=linear", "verify.ops=2-4", "debug.bitflip=1:3:param/x",
                          "debug.kill_in_save=1:2", "debug.interleave=fast,invariant",
                          "debug.nan=4:embed.weight", "optim.on_nonfinite=skip"})
    apply_override(c, set);
  REQUIRE(c.run.determinism == Determinism::deterministic);
  REQUIRE(c.run.isa == IsaChoice::avx2);
  REQUIRE(c.verify.hash == HashKind::torch_xor);
  REQUIRE(c.optim.schedule.schedule == LrSchedule::linear);
  REQUIRE((c.verify.ops.first == 2 && c.verify.ops.last == 4));
  REQUIRE((c.debug.bitflip.rank == 1 && c.debug.bitflip.step == 3));
  REQUIRE(c.debug.bitflip.tensor == "param/x");
  REQUIRE((c.debug.kill_in_save.rank == 1 && c.debug.kill_in_save.step == 2));
  REQUIRE(c.debug.interleave.modes == std::vector<std::string>{"fast", "invariant"});
  REQUIRE((c.debug.nan.step == 4 && c.debug.nan.tensor == "embed.weight"));
  REQUIRE(c.optim.on_nonfinite == NonfinitePolicy::skip);
  const std::string text = to_toml(c);
  for (const char* line :
       {"determinism = \"deterministic\"", "isa = \"avx2\"", "hash = \"torch-xor\"",
        "schedule = \"linear\"", "ops = \"2-4\"", "bitflip = \"1:3:param/x\"",
        "kill_in_save = \"1:2\"", "interleave = \"fast,invariant\"", "nan = \"4:embed.weight\"",
        "on_nonfinite = \"skip\""})
    CHECK(text.find(line) != std::string::npos);
  Config d;
  load_toml_text(d, text, "resolved");
  REQUIRE(to_toml(d) == text);
  // The choices a key lists are its enum's names.
  for (const auto& k : config_keys())
    if (k.name == "run.determinism")
      REQUIRE(k.choices == std::vector<std::string>{"invariant", "deterministic", "fast"});
}

TEST_CASE("memory estimate: PP divides the state, schedules set the slots, ZeRO divides AdamW") {
  Config c = tiny();
  apply_override(c, "model.layers=4");
  apply_override(c, "run.threads=1");
  const auto one = memory_estimate(c, 1);
  REQUIRE(one.size() == 1);
  CHECK(one[0].slots == 1);
  CHECK(one[0].activations == one[0].microbatch_bytes);
  apply_override(c, "parallel.pp=4");  // 8 microbatches of 1 on 4 stages
  const auto pp = memory_estimate(c, 4);
  REQUIRE(pp.size() == 4);
  std::int64_t weights = 0;
  for (const StageMemory& s : pp) {
    INFO("stage " << s.stage);
    CHECK(s.slots == 4 - s.stage);  // 1F1B: min(P - s, m)
    CHECK(s.activations == s.slots * s.microbatch_bytes);
    weights += s.weights;
  }
  // Every parameter once, the tied embedding twice (first and last stage).
  const std::int64_t embed = 4 * c.model.padded_vocab() * c.model.d_model;
  CHECK(weights == one[0].weights + embed);
  CHECK(pp[1].weights == pp[2].weights);                   // middle stages: one layer each
  CHECK(pp[0].microbatch_bytes < pp[3].microbatch_bytes);  // the last holds the logits
  apply_override(c, "parallel.schedule=gpipe");
  for (const StageMemory& s : memory_estimate(c, 4)) CHECK(s.slots == 8);
  // ZeRO-1 at DP 4: a quarter of the moments, plus the allgather buffers (1 + 1/4 weights).
  apply_override(c, "parallel.pp=1");
  const auto dp4 = memory_estimate(c, 4);
  apply_override(c, "parallel.zero=true");
  const auto zero = memory_estimate(c, 4);
  CHECK(zero[0].weights == dp4[0].weights);
  CHECK(zero[0].optimizer < dp4[0].optimizer);
  CHECK(zero[0].optimizer > dp4[0].optimizer / 4);
  CHECK(memory_estimate(c, 3).empty());  // invalid on 3 ranks (global batch 8)
  const auto lines = memory_lines(c, 4);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].rfind("memory per rank (estimate): ", 0) == 0);
  CHECK(human_bytes(512) == "512 B");
  CHECK(human_bytes(12800) == "12.5 KiB");
  CHECK(human_bytes(std::int64_t{412} << 20) == "412 MiB");
  CHECK(human_bytes(std::int64_t{3} << 30) == "3.00 GiB");
}

TEST_CASE("memory estimate: the combiner's partial sums are its deepest stack, not ceil(log2 m)") {
  // Streamed microbatches (launch/train/grad_sync.hpp): the model's one gradient buffer is the
  // stack's first level, plus one parameter group's scratch when microbatches merge.
  Config c = tiny();
  apply_override(c, "run.threads=1");
  apply_override(c, "parallel.microbatch=1");
  auto grads = [&](int global_batch, int ranks) {
    apply_override(c, "data.global_batch=" + std::to_string(global_batch));
    return memory_estimate(c, ranks).at(0).gradients;
  };
  const std::int64_t level = grads(1, 1), group = grads(2, 1) - level;  // one pass: no copy
  const StageFootprint f = stage_footprint(c.model, 1, PipelineStage::of(c.model, 1, 0), 1,
                                           KernelCtx::best(1, 16), GemmImpl::canonical);
  REQUIRE(level == 4 * f.grad_floats);
  CHECK(group == 4 * f.grad_group_floats);
  CHECK(group > 0);
  CHECK(group < level / 2);  // tiny: the LM head's group, embed.weight's "head" term
  CHECK(grads(4, 1) == 2 * level + group);
  CHECK(grads(8, 1) == 3 * level + group);
  CHECK(grads(12, 1) == 3 * level + group);  // halving over 12 passes: 3 levels, not 4
  CHECK(grads(12, 2) == 2 * level + group);  // 6 passes per rank: 2 levels
  CHECK(grads(16, 1) == 4 * level + group);
  apply_override(c, "numerics.tree=pow2");  // the binary counter: 8 + 4, its deepest stack 3
  CHECK(grads(12, 1) == 3 * level + group);
  apply_override(c, "parallel.zero=true");  // ZeRO copies: the terms, a flat copy, the levels
  CHECK(grads(4, 2) == level + (level + level / 2) + level);
}

TEST_CASE("memory estimate: the DP group's tree-collective scratch, in invariant mode only") {
  Config c = tiny();
  apply_override(c, "run.threads=1");
  apply_override(c, "parallel.microbatch=1");  // one sequence a pass at DP 1 and 2 alike
  const std::int64_t G = stage_footprint(c.model, 1, PipelineStage::of(c.model, 1, 0), 1,
                                         KernelCtx::best(1, 16), GemmImpl::canonical)
                             .grad_floats;
  auto scratch = [&](int ranks) { return memory_estimate(c, ranks).at(0).scratch; };
  const auto g = static_cast<std::size_t>(G);
  CHECK(scratch(2) - scratch(1) == 4 * static_cast<std::int64_t>(tree_allreduce_scratch(2, g)));
  CHECK(scratch(4) - scratch(1) == 4 * static_cast<std::int64_t>(tree_allreduce_scratch(4, g)));
  CHECK(tree_allreduce_scratch(2, g) > 0);
  apply_override(c, "parallel.zero=true");  // the reduce-scatter's work copy and its pieces
  CHECK(scratch(2) - scratch(1) ==
        4 * static_cast<std::int64_t>(tree_reduce_scatter_scratch(2, g)));
  CHECK(tree_reduce_scatter_scratch(2, g) > g);
  apply_override(c, "run.determinism=deterministic");  // MPI's reductions: Open MPI's buffers
  CHECK(scratch(2) == scratch(1));
  apply_override(c, "parallel.zero=false");
  CHECK(scratch(2) == scratch(1));
}

TEST_CASE("parallel.pp_layers: TOML array or comma list, checked against pp and layers") {
  Config c = tiny();
  load_toml_text(c, "[parallel]\npp = 2\npp_layers = [1, 3]\n[model]\nlayers = 4\n", "t");
  CHECK(c.parallel.pp_layers.counts == std::vector<std::int64_t>{1, 3});
  CHECK(c.parallel.pp_layers.text() == "1,3");
  CHECK(config_problems(c, 2).empty());
  const auto est = memory_estimate(c, 2);
  REQUIRE(est.size() == 2);
  CHECK(est[0].weights < est[1].weights);  // 1 layer (+ embeddings) against 3
  apply_override(c, "parallel.pp_layers=2,3");
  CHECK(config_problems(c, 2).size() == 1);  // 5 layers, not 4
  apply_override(c, "parallel.pp_layers=[4]");
  CHECK(config_problems(c, 2).size() == 1);  // one count for two stages
  CHECK_THROWS_AS(apply_override(c, "parallel.pp_layers=0,4"), Error);
  CHECK_THROWS_AS(apply_override(c, "parallel.pp_layers=two,2"), Error);
  CHECK_THROWS_AS(load_toml_text(c, "[parallel]\npp_layers = [true]\n", "t"), Error);
  apply_override(c, "parallel.pp_layers=");
  CHECK(c.parallel.pp_layers.counts.empty());
  CHECK(config_problems(c, 2).empty());  // equal stages again
}
