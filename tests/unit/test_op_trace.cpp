// The op trace (verify/op_trace.hpp) and the model's op hooks (model/gpt.hpp set_observer):
// the file format (fields, occurrence indices, byte hashes, step range); a recorded
// microbatch names exactly op_names() in order; recording never changes a result (bits of
// loss and every gradient with and without a recording observer); debug.perturb of a forward
// GEMM, a weight-gradient GEMM, the head's input-gradient GEMM and the attention scores
// changes that op's output and nothing upstream (it is the only op whose inputs match and
// whose output differs), and check_perturb_op refuses unknown and non-perturbable names.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/gpt.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "tests/support/test_batch.hpp"
#include "tests/support/test_model_config.hpp"
#include "verify/op_trace.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string temp_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("lockstep_test_op_trace_" + name);
  fs::remove_all(p);
  return p.string();
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// This file's batches: seed 11, sequence ids from 3.
constexpr lockstep::testing::BatchSpec kBatch{.seed = 11, .first_seq_id = 3};

struct Run {
  std::vector<nlohmann::json> records;
  float loss = 0;
  std::vector<std::vector<float>> grads;
};

// One forward_backward of the tiny model (dropout 0.1, biases) at step 1, traced with
// debug.perturb = `perturb` ("" none); observe = false: no observer at all.
Run run_model(const std::string& perturb, bool observe = true) {
  const ModelConfig cfg = lockstep::testing::tiny_model_config(0.1f, true);
  Gpt model(cfg, nullptr, Determinism::invariant, KernelCtx::best(1, 16));
  model.init(5);
  const std::string dir = temp_dir("model_" + perturb + (observe ? "" : "_off"));
  OpTrace trace(OpTraceConfig::from(dir, 0, StepRange::parse("1-1"), perturb));
  if (observe) model.set_observer(&trace);
  trace.begin_step(1);
  const lockstep::testing::Batch b = lockstep::testing::make_batch(cfg, 2, kBatch);
  Run r;
  r.loss = model.forward_backward(b.tokens.data(), b.labels.data(), b.seq_ids.data(), 2, 1,
                                  1.0f / 128.0f);
  trace.end_step();
  for (const auto& terms : model.grads())
    for (const auto& t : terms) r.grads.emplace_back(t.data<float>(), t.data<float>() + t.numel());
  if (observe) r.records = read_lines(dir + "/" + op_trace_file_name(0));
  return r;
}

}  // namespace

TEST_CASE("op trace: file format, occurrences, byte hashes, step range") {
  const std::string dir = temp_dir("format");
  OpTrace t(OpTraceConfig::from(dir, 3, StepRange::parse("2-3"), ""));
  CHECK(t.config().steps.first == 2);
  CHECK(t.config().steps.last == 3);
  const std::vector<float> x{1.0f, -0.0f, 2.5f}, y{4.0f};
  const std::span<const float> in[] = {x, y};
  t.begin_step(1);
  CHECK_FALSE(t.recording());
  t.record("a.fwd", in, y);  // ignored: step 1 is outside 2-3
  t.end_step();
  CHECK_FALSE(fs::exists(dir));  // nothing is created before the first traced step
  for (std::int64_t step : {2, 3, 4}) {
    t.begin_step(step);
    CHECK(t.recording() == (step <= 3));
    t.record("a.fwd", in, y);
    t.record("b.bwd", std::span<const std::span<const float>>(), x);
    t.record("a.fwd", in, x);
    t.end_step();
    CHECK_FALSE(t.recording());
  }
  const auto lines = read_lines(dir + "/rank_00003.jsonl");
  REQUIRE(lines.size() == 6);
  CHECK(t.records() == 6);
  {
    std::ifstream in(dir + "/rank_00003.jsonl");
    std::string first;
    std::getline(in, first);
    CHECK(first == "{\"step\":2,\"op\":\"a.fwd\",\"occ\":0,\"in\":[\"" +
                       hex64(xxh3_64(x.data(), 12)) + "\",\"" + hex64(xxh3_64(y.data(), 4)) +
                       "\"],\"out\":\"" + hex64(xxh3_64(y.data(), 4)) + "\",\"n\":1}");
  }
  CHECK(lines[1]["op"] == "b.bwd");
  CHECK(lines[1]["in"].empty());
  CHECK(lines[1]["n"] == 3);
  CHECK(lines[2]["occ"] == 1);  // second a.fwd in the step
  CHECK(lines[3]["step"] == 3);
  CHECK(lines[3]["occ"] == 0);  // counters reset per step
  // The same bytes hash the same wherever they appear (output of one op, input of another).
  CHECK(lines[0]["out"] == lines[0]["in"][1]);

  OpTrace never(OpTraceConfig::from(temp_dir("never"), 0, StepRange{}, ""));
  never.begin_step(1);
  CHECK_FALSE(never.recording());
  CHECK_THROWS_AS(StepRange::parse("3-2"), Error);
  CHECK_THROWS_AS(StepRange::parse("5"), Error);
  CHECK(StepRange::parse("2-4").text() == "2-4");
  CHECK(StepRange::parse("").empty());
  CHECK(OpTrace(OpTraceConfig::from(dir, 0, StepRange{}, "x.fwd")).perturb("x.fwd"));
  CHECK_FALSE(OpTrace(OpTraceConfig::from(dir, 0, StepRange{}, "x.fwd")).perturb("x.fwd2"));
}

TEST_CASE("op trace of the GPT: names in order, and observing changes nothing") {
  const Run off = run_model("", false);
  const Run on = run_model("");
  CHECK(std::memcmp(&off.loss, &on.loss, 4) == 0);
  REQUIRE(off.grads.size() == on.grads.size());
  for (std::size_t i = 0; i < on.grads.size(); ++i) CHECK(off.grads[i] == on.grads[i]);

  const auto names = op_names(lockstep::testing::tiny_model_config(0.1f, true));
  REQUIRE(names.back().name == "dp.reduce");  // recorded by GradReducer, not the model
  REQUIRE(on.records.size() == names.size() - 1);
  for (std::size_t i = 0; i + 1 < names.size(); ++i) {
    CHECK(on.records[i]["op"] == names[i].name);
    CHECK(on.records[i]["occ"] == 0);
    CHECK(on.records[i]["step"] == 1);
  }
  CHECK(on.records.front()["op"] == "embed.lookup.fwd");
  CHECK(on.records.back()["op"] == "embed.lookup.wgrad");
  // No bias / no dropout: those ops are not listed.
  const auto plain = op_names(lockstep::testing::tiny_model_config(0.0f, false));
  for (const auto& n : plain) {
    CHECK(n.name.find(".attn.dropout.") == std::string::npos);
    CHECK(n.name.find("fc1.bgrad") == std::string::npos);
  }
  CHECK(plain.size() < names.size());
}

TEST_CASE("debug.perturb: exactly the named op is the origin of the divergence") {
  const Run base = run_model("");
  for (const std::string op : {"layers.0.mlp.fc1.fwd", "layers.1.attn.proj.wgrad", "head.dgrad",
                               "layers.1.attn.scores.fwd", "layers.0.attn.q.dgrad"}) {
    INFO("perturbed op " << op);
    const Run p = run_model(op);
    REQUIRE(p.records.size() == base.records.size());
    std::vector<std::string> origins;
    bool seen = false;
    std::size_t downstream = 0;
    for (std::size_t i = 0; i < p.records.size(); ++i) {
      const auto &a = base.records[i], &b = p.records[i];
      REQUIRE(a["op"] == b["op"]);
      if (a["op"] == op) seen = true;
      if (!seen) CHECK(a == b);  // everything before the perturbed op is identical
      if (a["in"] == b["in"] && a["out"] != b["out"]) origins.push_back(a["op"]);
      if (a["in"] != b["in"] && a["out"] != b["out"]) ++downstream;
    }
    CHECK(seen);
    CHECK(origins == std::vector<std::string>{op});
    // A forward or input-gradient perturbation reaches later ops; a weight gradient is a leaf.
    // (The microbatch loss itself may keep its bits: ulp-level changes can round away.)
    if (op.find("wgrad") == std::string::npos) CHECK(downstream > 0);
    // Backward-only perturbations cannot change the loss.
    if (op.find(".fwd") == std::string::npos) CHECK(std::memcmp(&base.loss, &p.loss, 4) == 0);
    // The perturbed op changed the bits of the gradients.
    CHECK(base.grads != p.grads);
  }
}

TEST_CASE("check_perturb_op: unknown and non-perturbable names are errors") {
  const ModelConfig cfg = lockstep::testing::tiny_model_config(0.1f, false);
  CHECK_NOTHROW(check_perturb_op(cfg, "layers.0.mlp.fc1.fwd"));
  CHECK_NOTHROW(check_perturb_op(cfg, "layers.1.attn.proj.wgrad"));
  CHECK_NOTHROW(check_perturb_op(cfg, "dp.reduce"));
  try {
    check_perturb_op(cfg, "layers.0.mlp.fc1.fw");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("layers.0.mlp.fc1.fwd") != std::string::npos);
  }
  CHECK_THROWS_AS(check_perturb_op(cfg, "layers.5.mlp.fc1.fwd"), Error);   // 2 layers
  CHECK_THROWS_AS(check_perturb_op(cfg, "layers.0.mlp.gelu.fwd"), Error);  // no reduction
}
