// `lockstep resume-check --steps N --save-at K[,K2...] [--layout TPxDP] [--resume-layout TPxDP]
// [CONFIG] [--set k=v ...] [--out DIR]`: the G2 experiment. Run A trains N steps without
// interruption; run B trains to K (run.stop_at=K: checkpoint and exit as if preempted), then
// resumes (run.resume=auto) on --resume-layout to the next K, ..., and finally to N. Every
// trace.jsonl line of B must be byte-identical to A's; PASS (exit 0) or the first divergent
// step and field (exit 1), plus `lockstep verify compare` when this build has it.
// Determinism contract: compares bytes only; resuming on another layout is covered by G3
// (the verdict of config::guarantees is printed for both layouts).
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "launch/experiments/job_options.hpp"
#include "launch/experiments/resume_check.hpp"
#include "launch/experiments/subprocess.hpp"
#include "launch/train/config.hpp"
#include "launch/train/validate.hpp"
#include "runtime/error.hpp"

namespace lockstep::experiments {
namespace {

// "field" or "fp.<tensor>" of the first difference between two trace lines.
std::string differing_field(const std::string& a, const std::string& b) {
  const auto ja = nlohmann::ordered_json::parse(a, nullptr, false);
  const auto jb = nlohmann::ordered_json::parse(b, nullptr, false);
  if (ja.is_discarded() || jb.is_discarded()) return "(unparsable line)";
  for (const auto& [key, value] : ja.items()) {
    if (!jb.contains(key)) return key + " (missing)";
    if (jb[key] == value) continue;
    if (value.is_object())
      for (const auto& [name, v] : value.items())
        if (!jb[key].contains(name) || jb[key][name] != v) return key + "." + name;
    if (key != "digest") return key;
  }
  return "digest";
}

std::string ckpt_dir(const std::string& run, std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return run + "/checkpoints/" + name;
}

}  // namespace

int resume_check(const ResumeCheckOptions& o, bool with_verify) {
  const proc::Layout la = proc::parse_layout(o.layout);
  const proc::Layout lb = proc::parse_layout(o.resume_layout.empty() ? o.layout : o.resume_layout);
  std::vector<std::int64_t> ks;
  for (const auto& k : proc::split_list(o.save_at)) ks.push_back(proc::parse_int(k, "--save-at"));
  check(!ks.empty(), "--save-at names no step", "e.g. --save-at 5 or --save-at 3,7");
  for (std::size_t i = 0; i < ks.size(); ++i)
    check(ks[i] >= 1 && ks[i] < o.steps && (i == 0 || ks[i] > ks[i - 1]),
          "--save-at " + o.save_at + " must be increasing steps in [1, " +
              std::to_string(o.steps - 1) + "]",
          "each save step lies strictly inside the run of --steps " + std::to_string(o.steps));

  config::Config base;
  if (!o.config.empty()) config::load_toml_file(base, o.config);
  for (const auto& s : o.sets) config::apply_override(base, s);
  base.run.steps = o.steps;
  for (const proc::Layout& l : {la, lb}) {
    config::Config c = base;
    c.parallel.tp = l.tp;
    c.parallel.pp = l.pp;
    config::validate_or_throw(c, l.ranks());
    std::printf("resume-check: layout %s: %s\n", l.name().c_str(),
                config::guarantees(c, l.ranks()).summary().c_str());
  }
  std::filesystem::remove_all(o.out);
  std::filesystem::create_directories(o.out);
  const std::string run_a = o.out + "/uninterrupted", run_b = o.out + "/resumed";
  const std::size_t total = ks.size() + 2;
  auto job = [&](const proc::Layout& l, const std::string& out) {
    proc::Job j;
    j.layout = l;
    j.config = o.config;
    j.sets = o.sets;
    j.sets.push_back("run.steps=" + std::to_string(o.steps));
    for (const auto& a : o.mpi_args) j.run_args.push_back("--mpi-arg=" + a);
    if (!o.hostfile.empty()) j.run_args.insert(j.run_args.end(), {"--hostfile", o.hostfile});
    j.out = out;
    return j;
  };

  std::printf("[1/%zu] run A: %d steps uninterrupted on %s ...\n", total, o.steps,
              la.name().c_str());
  std::fflush(stdout);
  proc::Job a = job(la, run_a);
  a.sets.push_back("ckpt.save=false");
  proc::run_job_or_throw(a, "run A");

  std::int64_t from = 0;
  for (std::size_t i = 0; i <= ks.size(); ++i) {
    const bool last = i == ks.size();
    const proc::Layout& l = i == 0 ? la : lb;
    const std::int64_t to = last ? o.steps : ks[i];
    std::printf("[%zu/%zu] run B: %s step %lld on %s%s ...\n", i + 2, total,
                i == 0 ? "train to" : ("resume at " + std::to_string(from) + ", train to").c_str(),
                static_cast<long long>(to), l.name().c_str(),
                last ? "" : " (stop_at: checkpoint, exit as if preempted)");
    std::fflush(stdout);
    proc::Job b = job(l, run_b);
    b.sets.push_back("ckpt.save=true");
    if (i > 0) b.sets.push_back("run.resume=auto");
    b.sets.push_back("run.stop_at=" + std::to_string(last ? 0 : to));
    proc::run_job_or_throw(b, "run B to step " + std::to_string(to));
    if (!last)
      check(
          std::filesystem::is_directory(ckpt_dir(run_b, to)),
          "run B stopped at step " + std::to_string(to) + " but left no checkpoint " +
              ckpt_dir(run_b, to),
          "does this build's trainer implement run.stop_at and checkpoints? see " + run_b + ".log");
    from = to;
  }

  const auto ta = proc::read_trace(run_a), tb = proc::read_trace(run_b);
  std::int64_t bad = 0;
  std::string field;
  for (std::int64_t s = 1; s <= o.steps && bad == 0; ++s) {
    const auto ia = ta.find(s), ib = tb.find(s);
    if (ia == ta.end() || ib == tb.end())
      bad = s, field = ia == ta.end() ? "line missing in run A" : "line missing in run B";
    else if (ia->second != ib->second)
      bad = s, field = differing_field(ia->second, ib->second);
  }
  std::string saves;
  for (auto k : ks) saves += (saves.empty() ? "" : ",") + std::to_string(k);
  if (bad == 0) {
    std::printf(
        "resume-check: PASS: %d trace lines byte-identical; resumed at %s on %s (saved "
        "on %s); runs in %s\n",
        o.steps, saves.c_str(), lb.name().c_str(), la.name().c_str(), o.out.c_str());
    return 0;
  }
  std::printf("resume-check: FAIL: first divergence at step %lld (%s)%s\n",
              static_cast<long long>(bad), field.c_str(),
              bad <= ks[0] ? " before the first save: the runs were already not reproducible" : "");
  bool has_verify = false;
  try {
    has_verify = with_verify;
  } catch (const std::exception&) {
  }
  if (has_verify) {
    std::printf("resume-check: lockstep verify compare %s %s:\n", run_a.c_str(), run_b.c_str());
    std::fflush(stdout);
    proc::run({proc::self_exe(), "verify", "compare", run_a, run_b}, o.out + "/compare.log",
              [](const std::string& l) { std::printf("  %s\n", l.c_str()); });
  }
  return 1;
}

}  // namespace lockstep::experiments
