// `lockstep verify compare|bisect|ops` (issue 5, verify/compare.hpp):
//   compare RUN_A RUN_B [--json] [--html FILE]: first divergent step, state tensors and (with
//     op traces) the origin op; exit 0 identical, 1 different, 2 error.
//   bisect RUN_A RUN_B [--json] [--html FILE]: compare; then replay each run from its newest
//     checkpoint before the first divergent step s with the op trace on for step s only
//     (`lockstep run ... --set run.resume=CKPT --set run.stop_at=s --set verify.ops=s-s
//     --set run.out=RUN/bisect/replay --set ckpt.save=false`, printed before it runs), and
//     compare the replays' op traces: the origin op and rank. Exit codes as compare.
//   ops [CONFIG] [--set k=v ...]: every op name of the model (for verify.ops and
//     debug.perturb), marking the perturbable ones.
// Determinism contract: none of its own; it reads what runs wrote and reports bit equality.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <toml++/toml.h>

#include "checkpoint/meta.hpp"
#include "launch/cli/commands.hpp"
#include "launch/experiments/subprocess.hpp"
#include "launch/train/config.hpp"
#include "model/gpt.hpp"
#include "runtime/error.hpp"
#include "verify/compare.hpp"

namespace lockstep::cli {
namespace {
namespace fs = std::filesystem;

struct VerifyOptions {
  std::string run_a, run_b, html, config;
  std::vector<std::string> sets;
  bool json = false;
};

void write_html(const verify::CompareReport& r, const std::string& path) {
  if (path.empty()) return;
  std::ofstream out(path);
  out << r.to_html();
  check(out.good(), "cannot write '" + path + "'", "choose a writable --html path");
  std::fprintf(stderr, "lockstep verify: wrote %s\n", path.c_str());
}

int report(const verify::CompareReport& r, const VerifyOptions& o) {
  if (o.json)
    std::printf("%s\n", r.to_json().dump(2).c_str());
  else
    std::printf("%s", r.to_text().c_str());
  write_html(r, o.html);
  return r.identical() ? 0 : 1;
}

// The fingerprint scheme RUN's trace.jsonl was written with, read from RUN/config.toml (the
// resolved config `lockstep train` writes, every key present): "torch-xor", or "lockstep v1"
// / "lockstep v2" by verify.fingerprint_version; a config.toml without that key was written
// before it existed, when fingerprints were v1. "" when the run has no config.toml.
std::string fingerprint_scheme(const std::string& run) {
  const std::string path = run + "/config.toml";
  if (!fs::exists(path)) return "";
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    fail("'" + path + "' is not valid TOML: " + std::string(e.description()),
         "it is written by `lockstep train`; restore it or compare runs that have one");
  }
  if (t["verify"]["hash"].value_or(std::string("lockstep")) == "torch-xor") return "torch-xor";
  const std::int64_t v = t["verify"]["fingerprint_version"].value_or(std::int64_t{1});
  return "lockstep v" + std::to_string(v);
}

// The contract constants of RUN (docs/design.md section 2) from its config.toml: run.determinism,
// numerics.reduce_block, numerics.tree ("pow2" when the file predates the key); empty when the
// run has no config.toml.
std::vector<std::pair<std::string, std::string>> contract_of(const std::string& run) {
  const std::string path = run + "/config.toml";
  if (!fs::exists(path)) return {};
  const toml::table t = toml::parse_file(path);
  return {{"run.determinism", t["run"]["determinism"].value_or(std::string("?"))},
          {"numerics.reduce_block",
           std::to_string(t["numerics"]["reduce_block"].value_or(std::int64_t{64}))},
          {"numerics.tree", t["numerics"]["tree"].value_or(std::string("pow2"))}};
}

verify::CompareReport compare_runs(const VerifyOptions& o) {
  verify::CompareReport r = verify::compare_runs(o.run_a, o.run_b, fingerprint_scheme(o.run_a),
                                                 fingerprint_scheme(o.run_b));
  const auto a = contract_of(o.run_a), b = contract_of(o.run_b);
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    if (a[i].second != b[i].second)
      r.contract_differences.push_back(a[i].first + " = " + a[i].second + " in A, " +
                                       b[i].second + " in B");
  return r;
}

int compare(const VerifyOptions& o) {
  return report(compare_runs(o), o);
}

// The newest complete checkpoint of `run` with step < s ("" if none) and the layout of the
// run: run.layout {world, tp, pp} of its newest checkpoint (a run may have resumed from a
// checkpoint saved on another layout; its own saves carry its layout).
struct ReplayPlan {
  std::string checkpoint;  // "" : replay from step 1
  std::int64_t ckpt_step = 0;
  int world = 0, tp = 0, pp = 1;
};

ReplayPlan plan_replay(const std::string& run, std::int64_t s) {
  ReplayPlan p;
  const fs::path root = fs::path(run) / "checkpoints";
  std::int64_t any_step = -1;
  if (fs::is_directory(root)) {
    for (const auto& e : fs::directory_iterator(root)) {
      if (!e.is_directory() || !fs::exists(e.path() / "meta.json")) continue;
      const ckpt::Meta meta = ckpt::read_meta(e.path().string());
      const auto& lay = meta.run.at("layout");
      if (meta.step < s && meta.step >= p.ckpt_step && meta.step > 0) {
        p.checkpoint = fs::absolute(e.path()).string();
        p.ckpt_step = meta.step;
      }
      if (meta.step > any_step) {
        any_step = meta.step;
        p.world = lay.at("world").get<int>();
        p.tp = lay.at("tp").get<int>();
        p.pp = lay.value("pp", 1);
      }
    }
  }
  check(any_step >= 0,
        "'" + run +
            "' has no checkpoint: verify bisect reads the run's layout from one and "
            "replays from the newest before the divergence",
        "train both runs with checkpoints (e.g. --set ckpt.interval=5)");
  return p;
}

int bisect(const VerifyOptions& o) {
  verify::CompareReport r = compare_runs(o);
  if (!r.first_step) {
    std::printf(
        "lockstep verify bisect: the traces agree on all %lld common steps; nothing to "
        "bisect\n",
        static_cast<long long>(r.common));
    return report(r, o);
  }
  const std::int64_t s = *r.first_step;
  std::printf("lockstep verify bisect: first divergent step %lld; replaying it with op tracing\n",
              static_cast<long long>(s));
  std::vector<std::string> replay_dirs;
  for (const std::string& run : {o.run_a, o.run_b}) {
    const std::string config = run + "/config.toml";
    check(fs::exists(config), "'" + config + "' is missing",
          "bisect needs the resolved config that `lockstep train` writes into run.out");
    const ReplayPlan p = plan_replay(run, s);
    const std::string out = (fs::path(run) / "bisect" / "replay").string();
    fs::remove_all(out);
    fs::create_directories(fs::path(out).parent_path());
    std::vector<std::string> argv = {proc::self_exe(),
                                     "run",
                                     "--np",
                                     std::to_string(p.world),
                                     "--tp",
                                     std::to_string(p.tp),
                                     "--pp",
                                     std::to_string(p.pp),
                                     config,
                                     "--set",
                                     "run.resume=" + (p.checkpoint.empty() ? "none" : p.checkpoint),
                                     "--set",
                                     "run.stop_at=" + std::to_string(s),
                                     "--set",
                                     "verify.ops=" + std::to_string(s) + "-" + std::to_string(s),
                                     "--set",
                                     "run.out=" + out,
                                     "--set",
                                     "ckpt.save=false"};
    // A run made before verify.fingerprint_version existed wrote v1 fingerprints: replay so.
    if (fingerprint_scheme(run) == "lockstep v1")
      argv.insert(argv.end(), {"--set", "verify.fingerprint_version=1"});
    std::printf("  %s: %s\n  run: %s\n", run.c_str(),
                p.checkpoint.empty()
                    ? "no checkpoint before the divergence: replaying from step 1"
                    : ("replaying from checkpoint step " + std::to_string(p.ckpt_step)).c_str(),
                proc::join_command(argv).c_str());
    std::fflush(stdout);
    const int rc = proc::run(argv, out + ".log");
    check(rc == 0,
          "the replay of '" + run + "' exited " + std::to_string(rc) + ": " +
              proc::last_error_line(out + ".log"),
          "full log: " + out + ".log");
    // The replay must reproduce the original step s bit for bit, or its op trace is not the
    // original's.
    const auto orig = proc::read_trace(run), rep = proc::read_trace(out);
    const bool same = orig.count(s) && rep.count(s) && orig.at(s) == rep.at(s);
    std::printf("  replay of step %lld %s the original trace line\n", static_cast<long long>(s),
                same ? "reproduces" : "DOES NOT reproduce");
    replay_dirs.push_back(out);
  }
  r.ops = verify::compare_op_traces(replay_dirs[0] + "/ops", replay_dirs[1] + "/ops", s);
  std::printf("\n");
  const int rc = report(r, o);
  if (!r.ops.origin_op.empty()) {
    std::string ranks;
    for (int k : r.ops.origin_ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(k);
    std::printf("verify bisect: origin op %s on rank(s) %s at step %lld\n", r.ops.origin_op.c_str(),
                ranks.c_str(), static_cast<long long>(s));
  }
  return rc;
}

int list_ops(const VerifyOptions& o) {
  config::Config cfg;
  if (!o.config.empty()) config::load_toml_file(cfg, o.config);
  for (const auto& s : o.sets) config::apply_override(cfg, s);
  for (const OpName& op : op_names(cfg.model))
    std::printf("%s%s\n", op.name.c_str(), op.perturbable ? "  (perturbable)" : "");
  std::printf("<param>.adam.update  (one per parameter, recorded by the optimizer)\n");
  return 0;
}

template <class F>
Runner guarded(std::shared_ptr<VerifyOptions> o, F f) {
  return [o, f](int, char**) {
    try {
      return f(*o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lockstep verify: error: %s\n", e.what());
      return 2;
    }
  };
}

}  // namespace

Runner add_verify(CLI::App& app) {
  auto o = std::make_shared<VerifyOptions>();
  auto* sub = app.add_subcommand("verify",
                                 "compare two runs bit for bit; find the first "
                                 "divergent step, tensor and op");
  sub->require_subcommand(1);
  auto add_pair = [&](CLI::App* c) {
    c->add_option("run_a", o->run_a, "run directory A (its run.out)")->required();
    c->add_option("run_b", o->run_b, "run directory B")->required();
    c->add_flag("--json", o->json, "machine-readable JSON instead of the table");
    c->add_option("--html", o->html, "also write a self-contained HTML page (inline SVG)");
  };
  auto* cmp = sub->add_subcommand(
      "compare",
      "first divergent step, state tensors and (with op traces) the origin op; exit "
      "0 identical, 1 different, 2 error");
  add_pair(cmp);
  auto* bis = sub->add_subcommand(
      "bisect",
      "compare, then replay both runs from their last checkpoint before the divergence "
      "with op tracing, and name the origin op and rank");
  add_pair(bis);
  auto* ops = sub->add_subcommand("ops",
                                  "list the op names of a model config (verify.ops, "
                                  "debug.perturb)");
  ops->add_option("config", o->config, "TOML config (e.g. launch/configs/tiny.toml)")
      ->check(CLI::ExistingFile);
  ops->add_option("--set", o->sets, "override: section.key=value (repeatable)");
  const Runner run_cmp = guarded(o, compare), run_bis = guarded(o, bisect),
               run_ops = guarded(o, list_ops);
  return [sub, cmp, bis, run_cmp, run_bis, run_ops](int argc, char** argv) {
    if (cmp->parsed()) return run_cmp(argc, argv);
    if (bis->parsed()) return run_bis(argc, argv);
    (void)sub;
    return run_ops(argc, argv);
  };
}

}  // namespace lockstep::cli
