// `lockstep tax [--modes fast,deterministic,invariant,invariant+verify] [--interleaved]
// [--trials T] [--steps N] [--skip S] [--np N] [--tp T] [--json FILE] [CONFIG] [--set k=v ...]`:
// the determinism tax, measured one of two ways.
//  * separate runs (default): one warm-up run, then T trials; each trial runs every mode once
//    as its own job, in an order rotated by one per trial (so drift on a noisy machine hits
//    every mode alike). A run's figure is the median of its steady-state step times
//    (metrics.jsonl "ms", the first S steps skipped); per mode: the median over trials, min
//    and max, and the tax against fast, both from the medians and paired (per trial: this
//    mode's run over fast's run of the same trial).
//  * --interleaved: T jobs, each training every mode side by side in one process
//    (debug.interleave, launch/train/train_job.hpp), one step of each in turn, so the modes' steps
//    of one step number ran within a second of each other; the first S steps of each job are
//    skipped. Per mode: the median of all its step times, and the paired tax: per (trial,
//    step), this mode's step over fast's step; median, quartiles and a distribution-free 95%
//    interval of the median. The machine's drift cancels step by step.
// Modes: launch/train/modes.hpp (the replica check off in fast, deterministic, invariant).
// Determinism contract: none (a timing tool); it reports the machine's load with the numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "launch/experiments/job_options.hpp"
#include "launch/experiments/subprocess.hpp"
#include "launch/experiments/tax.hpp"
#include "launch/train/config.hpp"
#include "launch/train/modes.hpp"
#include "launch/train/validate.hpp"
#include "runtime/error.hpp"
#include "runtime/median.hpp"

namespace lockstep::experiments {
namespace {

// Per mode: the step-time samples the figures are made of, and the paired ratios to fast.
struct ModeTimes {
  std::vector<double> samples_ms;     // runs: trial medians; interleaved: every kept step
  std::vector<double> trial_medians;  // per trial
  std::vector<double> paired_pct;     // runs: per trial; interleaved: per (trial, step)
};

// The q-quantile of v (linear between order statistics).
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

// A distribution-free 95% confidence interval of the median of v: the order statistics of
// ranks n/2 -+ 0.98 sqrt(n) (normal approximation of the binomial; [min, max] when n < 6).
std::pair<double, double> median_ci95(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  if (v.size() < 6) return {v.front(), v.back()};
  const double h = 0.98 * std::sqrt(n);
  const auto lo = static_cast<std::size_t>(std::max(0.0, std::floor(n / 2 - h)));
  const auto hi = static_cast<std::size_t>(std::min(n - 1, std::ceil(n / 2 + h)));
  return {v[lo], v[hi]};
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int tax(const TaxOptions& o) {
  const auto modes = proc::split_list(o.modes);
  check(!modes.empty(), "--modes names no mode", "e.g. --modes fast,invariant");
  check(!o.interleaved || modes.size() >= 2, "--interleaved needs two or more --modes",
        "e.g. --modes fast,invariant");
  check(o.steps > o.skip,
        "--steps " + std::to_string(o.steps) + " leaves no step after --skip " +
            std::to_string(o.skip),
        "use more steps than skipped ones");
  check(o.np % (o.tp * o.pp) == 0,
        "--np " + std::to_string(o.np) +
            " is not a multiple of --tp x --pp = " + std::to_string(o.tp * o.pp),
        "np = tp x dp x pp");
  const proc::Layout layout{o.tp, o.np / (o.tp * o.pp), o.pp};
  config::Config base;
  if (!o.config.empty()) config::load_toml_file(base, o.config);
  for (const auto& s : o.sets) config::apply_override(base, s);
  base.parallel.tp = o.tp;
  base.parallel.pp = o.pp;
  base.run.steps = o.steps;
  for (const auto& m : modes) config::validate_or_throw(config::with_run_mode(base, m), o.np);
  if (o.interleaved) {  // preflight the interleaved job itself
    config::Config c = base;
    c.debug.interleave = config::Interleave::parse(proc::join_list(modes), "--modes");
    config::validate_or_throw(c, o.np);
  }
  std::filesystem::create_directories(o.out);
  const std::string load_start = loadavg();
  const int runs = o.interleaved ? o.trials : 1 + o.trials * static_cast<int>(modes.size());
  std::printf(
      "tax: %zu modes x %d trials on %s (%d rank(s)), %d steps per %s, first %d skipped; "
      "load average %s\n",
      modes.size(), o.trials, layout.name().c_str(), o.np, o.steps,
      o.interleaved ? "job, the modes' steps interleaved in one process" : "run", o.skip,
      load_start.c_str());
  auto job = [&](const std::vector<std::string>& sets, const std::string& out, int steps) {
    proc::Job j;
    j.layout = layout;
    j.config = o.config;
    j.sets = o.sets;
    for (const auto& s : sets) j.sets.push_back(s);
    j.sets.push_back("run.steps=" + std::to_string(steps));
    j.sets.push_back("ckpt.save=false");
    for (const auto& a : o.mpi_args) j.run_args.push_back("--mpi-arg=" + a);
    j.out = out;
    std::filesystem::remove_all(out);
    std::filesystem::remove(out + ".log");
    return j;
  };

  std::map<std::string, ModeTimes> per_mode;
  int n = 0;
  if (o.interleaved) {
    // Trial t's job lists the modes rotated by t: each mode is in turn the one whose trace and
    // metrics the job writes (a little extra I/O per step).
    std::vector<std::string> rotated = modes;
    for (int t = 0; t < o.trials; ++t) {
      const std::string out = o.out + "/t" + std::to_string(t + 1) + "-interleaved";
      std::printf("[%d/%d] trial %d/%d: %s interleaved ...\n", ++n, runs, t + 1, o.trials,
                  proc::join_list(rotated).c_str());
      std::fflush(stdout);
      proc::run_job_or_throw(job({"debug.interleave=" + proc::join_list(rotated)}, out, o.steps),
                             "tax interleaved job");
      std::map<std::string, std::vector<double>> trial;
      for (const auto& [step, ms] : proc::read_mode_step_ms(out + "/tax_steps.jsonl")) {
        if (step <= o.skip) continue;
        for (const auto& m : modes) {
          check(ms.count(m) > 0,
                out + "/tax_steps.jsonl lacks mode " + m + " at step " + std::to_string(step));
          trial[m].push_back(ms.at(m));
          if (ms.count("fast"))
            per_mode[m].paired_pct.push_back(100.0 * (ms.at(m) / ms.at("fast") - 1.0));
        }
      }
      for (const auto& m : modes) {
        check(!trial[m].empty(), out + "/tax_steps.jsonl has no step after the skipped ones");
        auto& pm = per_mode[m];
        pm.samples_ms.insert(pm.samples_ms.end(), trial[m].begin(), trial[m].end());
        pm.trial_medians.push_back(median(trial[m]));
        std::printf("      %-20s %.1f ms/step (median of %zu steps)\n", m.c_str(),
                    pm.trial_medians.back(), trial[m].size());
      }
      std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
    }
  } else {
    std::printf("[%d/%d] warm-up (%s) ...\n", ++n, runs, modes[0].c_str());
    std::fflush(stdout);
    proc::run_job_or_throw(
        job(config::run_mode_sets(modes[0], o.skip + 1), o.out + "/warmup", o.skip + 1), "warm-up");
    for (int t = 0; t < o.trials; ++t) {
      for (std::size_t i = 0; i < modes.size(); ++i) {
        const std::string& mode = modes[(i + static_cast<std::size_t>(t)) % modes.size()];
        const std::string out = o.out + "/t" + std::to_string(t + 1) + "-" + mode;
        std::printf("[%d/%d] trial %d/%d: %s ...", ++n, runs, t + 1, o.trials, mode.c_str());
        std::fflush(stdout);
        proc::run_job_or_throw(job(config::run_mode_sets(mode, o.steps), out, o.steps),
                               "tax run " + mode);
        std::vector<double> ms;
        for (const auto& [step, v] : proc::read_step_ms(out))
          if (step > o.skip) ms.push_back(v);
        check(!ms.empty(), out + "/metrics.jsonl has no step after the skipped ones");
        per_mode[mode].trial_medians.push_back(median(ms));
        per_mode[mode].samples_ms.push_back(per_mode[mode].trial_medians.back());
        std::printf(" %.1f ms/step\n", per_mode[mode].trial_medians.back());
      }
    }
    if (per_mode.count("fast"))  // trial t of every mode is trial_medians[t]
      for (const auto& m : modes)
        for (int t = 0; t < o.trials; ++t)
          per_mode[m].paired_pct.push_back(
              100.0 * (per_mode[m].trial_medians[t] / per_mode["fast"].trial_medians[t] - 1.0));
  }
  const std::string load_end = loadavg();

  nlohmann::ordered_json j;
  j["config"] = o.config.empty() ? "(defaults)" : o.config;
  j["sets"] = o.sets;
  j["method"] = o.interleaved ? "interleaved" : "runs";
  j["np"] = o.np;
  j["tp"] = o.tp;
  j["pp"] = o.pp;
  j["steps"] = o.steps;
  j["skip"] = o.skip;
  j["trials"] = o.trials;
  j["conditions"] = {{"cores", std::thread::hardware_concurrency()},
                     {"loadavg_start", load_start},
                     {"loadavg_end", load_end}};
  const bool has_fast = per_mode.count("fast") > 0;
  const double fast = has_fast ? median(per_mode["fast"].samples_ms) : 0;
  std::printf("\n%-20s %12s %12s %12s %12s %34s\n", "mode", "median ms", "min ms", "max ms",
              "tax vs fast", "paired: median [95% CI] (range)");
  j["modes"] = nlohmann::ordered_json::array();
  for (const auto& m : modes) {
    const ModeTimes& v = per_mode[m];
    const double med = median(v.samples_ms);
    const auto [lo, hi] = std::minmax_element(v.samples_ms.begin(), v.samples_ms.end());
    nlohmann::ordered_json e;
    e["mode"] = m;
    e["median_ms"] = med;
    e["min_ms"] = *lo;
    e["max_ms"] = *hi;
    e["trial_medians_ms"] = v.trial_medians;
    if (o.interleaved) e["steps_ms"] = v.samples_ms;
    char taxs[32] = "-", paired[96] = "-";
    if (has_fast) {
      const double pct = 100.0 * (med / fast - 1.0);
      e["tax_pct"] = pct;
      std::snprintf(taxs, sizeof taxs, "%+.1f%%", pct);
      const auto& pp = v.paired_pct;
      const double pmed = median(pp);
      const auto [plo, phi] = std::minmax_element(pp.begin(), pp.end());
      const auto [clo, chi] = median_ci95(pp);
      e["paired_tax_pct"] = {{"median", pmed},
                             {"min", *plo},
                             {"max", *phi},
                             {"p25", quantile(pp, 0.25)},
                             {"p75", quantile(pp, 0.75)},
                             {"ci95", {clo, chi}},
                             {"n", pp.size()},
                             {o.interleaved ? "per_step" : "per_trial", pp}};
      std::snprintf(paired, sizeof paired, "%+.1f%% [%+.1f, %+.1f] (%+.1f..%+.1f)", pmed, clo, chi,
                    *plo, *phi);
    } else {
      e["tax_pct"] = nullptr;
      e["paired_tax_pct"] = nullptr;
    }
    j["modes"].push_back(e);
    std::printf("%-20s %12.1f %12.1f %12.1f %12s %34s\n", m.c_str(), med, *lo, *hi, taxs, paired);
  }
  if (o.interleaved)
    std::printf(
        "(interleaved: every kept step of %d jobs, steps %d..%d; paired: each mode's step over "
        "fast's step of the same job and step number; load average %s at the start, %s at the "
        "end)\n",
        o.trials, o.skip + 1, o.steps, load_start.c_str(), load_end.c_str());
  else
    std::printf(
        "(median over %d trials of each run's median step time, steps %d..%d; paired: the same "
        "trial's runs compared; load average %s at the start, %s at the end)\n",
        o.trials, o.skip + 1, o.steps, load_start.c_str(), load_end.c_str());
  const std::string json_path = o.json.empty() ? o.out + "/tax.json" : o.json;
  std::ofstream f(json_path);
  f << j.dump(2) << "\n";
  check(f.good(), "cannot write '" + json_path + "'", "check the --json path");
  std::printf("tax: JSON in %s\n", json_path.c_str());
  return 0;
}

}  // namespace lockstep::experiments
