// `lockstep layout-check --layouts 1x1,1x2,2x1,2x2 [--microbatches 1,2] [--steps N] [CONFIG]
// [--set k=v ...] [--out DIR]`: trains the same job on every layout (TPxDP) and microbatch
// size, prints the per-step digests of trace.jsonl (abbreviated) as a table, and PASS when
// every run's trace is byte-identical to the first run's, FAIL (exit 1) otherwise. For a
// layout where config::guarantees says G3 does not hold, it prints why (a difference there
// is what the contract predicts, and still a FAIL: the runs are not interchangeable).
// Determinism contract: compares bytes only; what it tests is G3 (docs/design.md section 1).
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "launch/experiments/job_options.hpp"
#include "launch/experiments/layout_check.hpp"
#include "launch/experiments/subprocess.hpp"
#include "launch/train/config.hpp"
#include "launch/train/validate.hpp"
#include "runtime/error.hpp"

namespace lockstep::experiments {
namespace {

struct Variant {
  proc::Layout layout;
  std::int64_t microbatch;
  std::string name;
};

}  // namespace

int layout_check(const LayoutCheckOptions& o) {
  config::Config base;
  if (!o.config.empty()) config::load_toml_file(base, o.config);
  for (const auto& s : o.sets) config::apply_override(base, s);
  if (o.steps > 0) base.run.steps = o.steps;
  std::vector<std::int64_t> mbs;
  for (const auto& m : proc::split_list(o.microbatches))
    mbs.push_back(proc::parse_int(m, "--microbatches"));
  if (mbs.empty()) mbs.push_back(base.parallel.microbatch);

  // Preflight every variant before the first job starts.
  std::vector<Variant> variants;
  for (const auto& ls : proc::split_list(o.layouts)) {
    const proc::Layout l = proc::parse_layout(ls);
    for (const auto mb : mbs) {
      config::Config c = base;
      c.parallel.tp = l.tp;
      c.parallel.pp = l.pp;
      c.parallel.microbatch = mb;
      try {
        config::validate_or_throw(c, l.ranks());
      } catch (const std::exception& e) {
        fail("layout " + l.name() + " with microbatch " + std::to_string(mb) +
                 " is not valid for this config: " + e.what(),
             "drop it from --layouts/--microbatches");
      }
      variants.push_back({l, mb, l.name() + (mbs.size() > 1 ? " mb" + std::to_string(mb) : "")});
    }
  }
  check(variants.size() >= 2, "layout-check needs at least two runs to compare",
        "pass two or more layouts (--layouts 1x1,1x2) or microbatch sizes");
  std::filesystem::create_directories(o.out);
  std::printf("layout-check: %zu runs of %lld steps (%s), out %s\n", variants.size(),
              static_cast<long long>(base.run.steps), determinism_name(base.run.determinism),
              o.out.c_str());
  std::vector<std::string> no_g3;
  for (const auto& v : variants) {
    config::Config c = base;
    c.parallel.tp = v.layout.tp;
    c.parallel.pp = v.layout.pp;
    c.parallel.microbatch = v.microbatch;
    for (const auto& g : config::guarantees(c, v.layout.ranks()).levels)
      if (g.level == "G3" && !g.holds) no_g3.push_back(v.name + ": " + g.why);
  }

  std::vector<std::map<std::int64_t, std::string>> traces;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const auto& v = variants[i];
    const std::string pp = v.layout.pp > 1 ? " x PP " + std::to_string(v.layout.pp) : "";
    std::printf("[%zu/%zu] %s (TP %d x DP %d%s, microbatch %lld) ...\n", i + 1, variants.size(),
                v.name.c_str(), v.layout.tp, v.layout.dp, pp.c_str(),
                static_cast<long long>(v.microbatch));
    std::fflush(stdout);
    proc::Job job;
    job.layout = v.layout;
    job.config = o.config;
    job.sets = o.sets;
    job.sets.push_back("run.steps=" + std::to_string(base.run.steps));
    job.sets.push_back("parallel.microbatch=" + std::to_string(v.microbatch));
    job.sets.push_back("ckpt.save=false");
    for (const auto& a : o.mpi_args) job.run_args.push_back("--mpi-arg=" + a);
    if (!o.hostfile.empty()) job.run_args.insert(job.run_args.end(), {"--hostfile", o.hostfile});
    job.out = o.out + "/" + v.layout.name() + "-mb" + std::to_string(v.microbatch);
    std::filesystem::remove_all(job.out);
    std::filesystem::remove(job.out + ".log");
    proc::run_job_or_throw(job, "run " + v.name);
    traces.push_back(proc::read_trace(job.out));
  }

  // The table: one row per step, one column per run; '*' marks a digest that differs from
  // the first run's.
  std::printf("\n%6s", "step");
  for (const auto& v : variants) std::printf("  %-11s", v.name.c_str());
  std::printf("\n");
  const auto& ref = traces[0];
  std::int64_t first_bad = 0;
  std::string first_bad_run;
  int bad_runs = 0;
  for (std::size_t i = 1; i < traces.size(); ++i) {
    std::int64_t bad_step =
        traces[i].size() != ref.size() ? static_cast<std::int64_t>(ref.size()) + 1 : 0;
    for (const auto& [step, line] : ref) {
      const auto it = traces[i].find(step);
      if (it == traces[i].end() || it->second != line) {
        bad_step = step;
        break;
      }
    }
    if (bad_step == 0) continue;
    ++bad_runs;
    if (first_bad == 0 || bad_step < first_bad)
      first_bad = bad_step, first_bad_run = variants[i].name;
  }
  for (const auto& [step, line] : ref) {
    std::printf("%6lld", static_cast<long long>(step));
    for (const auto& t : traces) {
      const auto it = t.find(step);
      const std::string d = it == t.end() ? "-" : proc::trace_digest(it->second).substr(0, 10);
      const bool same = it != t.end() && it->second == line;
      std::printf("  %-10s%s", d.c_str(), same ? " " : "*");
    }
    std::printf("\n");
  }
  std::printf(
      "(digest: the first 10 hex digits of each trace line's digest; * = the line differs "
      "from %s's)\n",
      variants[0].name.c_str());
  for (const auto& n : no_g3) std::printf("note: G3 does not hold for %s\n", n.c_str());
  if (bad_runs == 0) {
    std::printf("layout-check: PASS: %zu runs x %zu steps, every trace line byte-identical\n",
                variants.size(), ref.size());
    return 0;
  }
  std::printf(
      "layout-check: FAIL: %d of %zu runs differ from %s; first divergence at step %lld "
      "(%s)\n",
      bad_runs, variants.size() - 1, variants[0].name.c_str(), static_cast<long long>(first_bad),
      first_bad_run.c_str());
  return 1;
}

}  // namespace lockstep::experiments
