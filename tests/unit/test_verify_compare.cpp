// `lockstep verify compare` on synthetic run directories (verify/compare.hpp): identical
// runs; a divergence at step k in one gradient tensor that reaches the optimizer state and
// the parameters at k but the loss only at k + 1 (a hidden divergence: reported with step,
// phase and tensor); a loss divergence (not hidden); the lead's object form of scalars and
// extra keys; op traces (origin set apart from receivers, per rank); missing files.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "verify/compare.hpp"
#include "verify/trace.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {

std::string fresh(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("lockstep_test_compare_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// A run of `steps` steps; at steps >= diverge_at (0: never) the listed items change.
struct Fault {
  std::int64_t step = 0;
  std::vector<std::string> tensors;  // fingerprints changed from `step` on
  std::int64_t loss_step = 0;        // loss bits changed from this step on (0: never)
};

void write_run(const std::string& dir, std::int64_t steps, const Fault& f = {}) {
  std::ofstream trace(dir + "/trace.jsonl"), metrics(dir + "/metrics.jsonl");
  const std::vector<std::string> names = {"grad/embed.weight",
                                          "grad/layers.0.mlp.fc1.weight",
                                          "adam_m/embed.weight",
                                          "adam_m/layers.0.mlp.fc1.weight",
                                          "adam_v/layers.0.mlp.fc1.weight",
                                          "param/embed.weight",
                                          "param/layers.0.mlp.fc1.weight"};
  for (std::int64_t s = 1; s <= steps; ++s) {
    TraceLine l;
    l.step = s;
    l.loss = 5.5f - 0.01f * static_cast<float>(s);
    if (f.loss_step && s >= f.loss_step) l.loss = std::nextafter(l.loss, 100.0f);
    l.grad_norm = 1.25f;
    l.lr = 1e-3f;
    l.tokens = s * 512;
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::uint64_t v = 1000 * static_cast<std::uint64_t>(s) + i;
      for (const auto& t : f.tensors)
        if (f.step && s >= f.step && t == names[i]) v ^= 0xdead0000ull;
      l.fp.emplace_back(names[i], v);
    }
    trace << l.to_json() << "\n";
    metrics << nlohmann::json{{"step", s}, {"loss", l.loss}}.dump() << "\n";
  }
}

void write_ops(const std::string& dir, int rank, const std::vector<nlohmann::json>& recs) {
  fs::create_directories(dir + "/ops");
  char name[64];
  std::snprintf(name, sizeof name, "/ops/rank_%05d.jsonl", rank);
  std::ofstream out(dir + name);
  for (const auto& r : recs) out << r.dump() << "\n";
}

nlohmann::json rec(std::int64_t step, const std::string& op, std::vector<std::string> in,
                   const std::string& out) {
  return {{"step", step}, {"op", op}, {"occ", 0}, {"in", in}, {"out", out}, {"n", 4}};
}

}  // namespace

TEST_CASE("compare: identical runs") {
  const std::string a = fresh("ident_a"), b = fresh("ident_b");
  write_run(a, 6);
  write_run(b, 6);
  const auto r = verify::compare_runs(a, b);
  CHECK(r.identical());
  CHECK_FALSE(r.first_step);
  CHECK(r.common == 6);
  CHECK(r.to_json()["identical"] == true);
  CHECK(r.to_text().find("identical") != std::string::npos);
  // A shorter run is not identical, even if its steps agree.
  const std::string c = fresh("ident_c");
  write_run(c, 4);
  CHECK_FALSE(verify::compare_runs(a, c).identical());
}

TEST_CASE("compare: hidden divergence in one gradient tensor at step k") {
  const std::string a = fresh("hidden_a"), b = fresh("hidden_b");
  write_run(a, 8);
  Fault f;
  f.step = 4;
  f.tensors = {"param/layers.0.mlp.fc1.weight", "adam_v/layers.0.mlp.fc1.weight",
               "grad/layers.0.mlp.fc1.weight", "adam_m/layers.0.mlp.fc1.weight"};
  f.loss_step = 5;
  write_run(b, 8, f);
  const auto r = verify::compare_runs(a, b);
  CHECK_FALSE(r.identical());
  REQUIRE(r.first_step);
  CHECK(*r.first_step == 4);
  CHECK(r.loss_bits_equal_at_first);
  CHECK(r.hidden());
  REQUIRE(r.first_loss_bits_step);
  CHECK(*r.first_loss_bits_step == 5);
  // Phase order: gradients first, then optimizer state, then parameters (digest: other).
  REQUIRE(r.first.items.size() == 5);
  CHECK(r.first.items[0].name == "grad/layers.0.mlp.fc1.weight");
  CHECK(std::string(verify::phase_name(r.first.items[0].phase)) == "gradients");
  CHECK(r.first.items[1].name == "adam_m/layers.0.mlp.fc1.weight");
  CHECK(r.first.items[2].name == "adam_v/layers.0.mlp.fc1.weight");
  CHECK(r.first.items[3].name == "param/layers.0.mlp.fc1.weight");
  CHECK(r.first.items[4].name == "digest");
  const auto j = r.to_json();
  CHECK(j["first_divergent_step"] == 4);
  CHECK(j["first_phase"] == "gradients");
  CHECK(j["first_tensor"] == "grad/layers.0.mlp.fc1.weight");
  CHECK(j["loss"]["hidden_divergence"] == true);
  CHECK(j["per_step"].size() == 8);
  CHECK(j["per_step"][3]["loss_ulps"] == 0);
  CHECK(j["per_step"][4]["loss_ulps"] == 1);
  CHECK(j["ops"]["available"] == false);
  const std::string text = r.to_text();
  CHECK(text.find("first divergent step: 4") != std::string::npos);
  CHECK(text.find("HIDDEN DIVERGENCE") != std::string::npos);
  CHECK(text.find("verify bisect") != std::string::npos);
  const std::string html = r.to_html();
  CHECK(html.find("<svg") != std::string::npos);
  CHECK(html.find("grad/layers.0.mlp.fc1.weight") != std::string::npos);
}

TEST_CASE("compare: fingerprints of different schemes are not compared, scalars are") {
  const std::string a = fresh("scheme_a"), b = fresh("scheme_b");
  write_run(a, 5);
  Fault f;
  f.step = 1;
  f.tensors = {"grad/embed.weight", "param/embed.weight"};
  write_run(b, 5, f);
  CHECK(verify::compare_runs(a, b).first_step == 1);  // schemes unknown: compared
  CHECK(verify::compare_runs(a, b, "lockstep v2", "lockstep v2").first_step == 1);
  const auto r = verify::compare_runs(a, b, "lockstep v2", "lockstep v1");
  CHECK_FALSE(r.fingerprints_comparable());
  CHECK(r.identical());
  CHECK_THAT(r.to_text(), Catch::Contains("A's fingerprints are lockstep v2, B's lockstep v1: "
                                          "not comparable"));
  CHECK(r.to_json()["fingerprints_compared"] == false);
  CHECK_THAT(r.to_html(), Catch::Contains("not comparable"));
  // A scalar difference is still found.
  const std::string c = fresh("scheme_c");
  f.loss_step = 3;
  write_run(c, 5, f);
  CHECK(verify::compare_runs(a, c, "lockstep v2", "torch-xor").first_step == 3);
}

TEST_CASE("compare: a loss divergence is not hidden; object scalars and extra keys") {
  const std::string a = fresh("loss_a"), b = fresh("loss_b");
  // The lead's widened form: {"hex", "dec"} objects and extra top-level keys.
  auto line = [](std::int64_t s, const std::string& hex, const std::string& rng) {
    nlohmann::ordered_json j;
    j["step"] = s;
    j["loss"] = {{"hex", hex}, {"dec", "5.5"}};
    j["rng"] = rng;
    j["fp"] = {{"param/w", "00000000000000aa"}};
    j["digest"] = hex + rng;
    return j.dump();
  };
  {
    std::ofstream ta(a + "/trace.jsonl"), tb(b + "/trace.jsonl");
    ta << line(1, "0x1.6p+2", "r1") << "\n" << line(2, "0x1.6p+2", "r2") << "\n";
    tb << line(1, "0x1.6p+2", "r1") << "\n" << line(2, "0x1.600002p+2", "r2") << "\n";
  }
  const auto r = verify::compare_runs(a, b);
  REQUIRE(r.first_step);
  CHECK(*r.first_step == 2);
  CHECK_FALSE(r.loss_bits_equal_at_first);
  CHECK(r.loss_logged_equal_at_first);  // same decimal "5.5" as logged: hidden
  CHECK(r.first.items[0].name == "loss");
  CHECK(std::string(verify::phase_name(r.first.items[0].phase)) == "forward/loss");
  // With metrics.jsonl the logged loss is the metrics value.
  {
    std::ofstream ma(a + "/metrics.jsonl"), mb(b + "/metrics.jsonl");
    ma << "{\"step\":2,\"loss\":5.5}\n";
    mb << "{\"step\":2,\"loss\":5.5000005}\n";
  }
  const auto r2 = verify::compare_runs(a, b);
  CHECK_FALSE(r2.loss_logged_equal_at_first);
  CHECK_FALSE(r2.hidden());
  REQUIRE(r2.first_loss_logged_step);
  CHECK(*r2.first_loss_logged_step == 2);
  CHECK_FALSE(r2.first_loss_rounded_step);  // 5.5000 both
  // An extra key that differs (rng) is phase data/schedule, ahead of the loss.
  {
    std::ofstream tb(b + "/trace.jsonl");
    tb << line(1, "0x1.6p+2", "r1") << "\n" << line(2, "0x1.600002p+2", "rX") << "\n";
  }
  const auto r3 = verify::compare_runs(a, b);
  CHECK(r3.first.items[0].name == "rng");
}

TEST_CASE("compare: op traces name the origin and the receivers, per rank") {
  const std::string a = fresh("ops_a"), b = fresh("ops_b");
  Fault f;
  f.step = 3;
  f.tensors = {"grad/layers.0.mlp.fc1.weight"};
  write_run(a, 4);
  write_run(b, 4, f);
  for (int rank : {0, 1}) {
    write_ops(a, rank,
              {rec(2, "x.fwd", {"1"}, "2"), rec(3, "embed.lookup.fwd", {"1"}, "2"),
               rec(3, "layers.0.mlp.fc1.fwd", {"2", "w"}, "3"),
               rec(3, "layers.0.mlp.gelu.fwd", {"3"}, "4"),
               rec(3, "layers.0.mlp.fc1.wgrad", {"9", "2"}, "5")});
    write_ops(b, rank,
              {rec(2, "x.fwd", {"1"}, "2"), rec(3, "embed.lookup.fwd", {"1"}, "2"),
               rec(3, "layers.0.mlp.fc1.fwd", {"2", "w"}, rank == 1 ? "3" : "3x"),
               rec(3, "layers.0.mlp.gelu.fwd", {rank == 1 ? "3" : "3x"}, rank == 1 ? "4" : "4x"),
               rec(3, "layers.0.mlp.fc1.wgrad", {"9", "2"}, "5x")});
  }
  const auto r = verify::compare_runs(a, b);
  REQUIRE(r.first_step);
  CHECK(*r.first_step == 3);
  REQUIRE(r.ops.available);
  REQUIRE(r.ops.ranks.size() == 2);
  const auto& r0 = r.ops.ranks[0];
  CHECK(r0.compared == 4);
  REQUIRE(r0.origin);
  CHECK(*r0.origin == "layers.0.mlp.fc1.fwd#0");
  CHECK(r0.receivers == std::vector<std::string>{"layers.0.mlp.gelu.fwd#0"});
  CHECK(r0.other_origins == std::vector<std::string>{"layers.0.mlp.fc1.wgrad#0"});
  const auto& r1 = r.ops.ranks[1];
  REQUIRE(r1.origin);
  CHECK(*r1.origin == "layers.0.mlp.fc1.wgrad#0");
  CHECK(r1.receivers.empty());
  // Each origin is found on one rank: the lowest rank's wins the tie.
  CHECK(r.ops.origin_op == "layers.0.mlp.fc1.fwd");
  CHECK(r.ops.origin_ranks == std::vector<int>{0});
  CHECK(r.to_text().find("origin: layers.0.mlp.fc1.fwd on rank(s) 0") != std::string::npos);
  // The standalone op comparison of another step: step 2 is identical.
  const auto d2 = verify::compare_op_traces(a + "/ops", b + "/ops", 2);
  REQUIRE(d2.available);
  CHECK(d2.origin_op.empty());
  CHECK(d2.ranks[0].differing == 0);
}

TEST_CASE("compare: missing or damaged files are errors") {
  const std::string a = fresh("err_a"), b = fresh("err_b");
  write_run(a, 2);
  CHECK_THROWS_AS(verify::compare_runs(a, b), Error);  // b has no trace.jsonl
  CHECK_THROWS_AS(verify::compare_runs(a, a + "/nope"), Error);
  {
    std::ofstream tb(b + "/trace.jsonl");
    tb << "{\"step\":1,\"loss\":\n";
  }
  CHECK_THROWS_AS(verify::compare_runs(a, b), Error);
}
