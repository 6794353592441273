// Checkpoint save/load benchmark (issue 4): a ~100M-parameter GPT-like state (params +
// AdamW m and v, float32) saved and loaded at this run's world size, next to the disk
// bandwidth measured in the same run (dd conv=fdatasync for writes, dd iflag=direct for
// reads). Page cache: before every timed load each rank drops the checkpoint's pages with
// posix_fadvise(DONTNEED) after they were fsynced (and tries /proc/sys/vm/drop_caches), so
// loads read from the disk, not from memory; the JSON says which method worked.
// Layouts: save with ZeRO over all ranks (tp 1); load into the same layout, and (resharding)
// into tp = world size without ZeRO (np 2) or from --reshard-from DIR (a checkpoint saved by
// another run, e.g. np 2 with ZeRO, loaded at np 1). Async: a simulated training step (a
// compute loop of fixed length) timed alone (8 steps before and 8 after) and on every step
// that overlaps an AsyncSaver's write (steps run until its writer thread is done).
// CPU clocks next to the wall clocks (the machine may be shared): save_cpu_s is this
// process's CPU time during save() (rank 0; kernel time of its syscalls included, the
// kernel's writeback threads not), async.writer_cpu_s the CPU the process used during the
// overlapped steps beyond the training thread's own.
// --buffered writes through the page cache instead of O_DIRECT (A/B switch).
// Prints one JSON object (rank 0). Usage:
//   mpirun -np 2 build/bin/bench_ckpt --dir /tmp/ck [--layers 10] [--reshard-from DIR]
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "checkpoint/checkpoint.hpp"
#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "tests/support/synthetic_state.hpp"
#include "verify/fingerprint.hpp"

using namespace lockstep;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

using TensorSpec = testing::SyntheticSpec;

// GPT-like: vocab 32768, d 768, `layers` blocks (qkv, proj, fc1, fc2 + biases + 2 layer norms).
std::vector<TensorSpec> gpt_specs(int layers) {
  const std::int64_t d = 768, v = 32768, ff = 3072;
  std::vector<TensorSpec> p = {
      {"wte", {v, d}, 0}, {"wpe", {1024, d}, -1}, {"lnf.g", {d}, -1}, {"lnf.b", {d}, -1}};
  for (int l = 0; l < layers; ++l) {
    const std::string b = "h" + std::to_string(l) + ".";
    for (const TensorSpec& t : std::vector<TensorSpec>{{b + "ln1.g", {d}, -1},
                                                       {b + "ln1.b", {d}, -1},
                                                       {b + "qkv.w", {d, 3 * d}, 1},
                                                       {b + "qkv.b", {3 * d}, 0},
                                                       {b + "proj.w", {d, d}, 0},
                                                       {b + "proj.b", {d}, -1},
                                                       {b + "ln2.g", {d}, -1},
                                                       {b + "ln2.b", {d}, -1},
                                                       {b + "fc1.w", {d, ff}, 1},
                                                       {b + "fc1.b", {ff}, 0},
                                                       {b + "fc2.w", {ff, d}, 0},
                                                       {b + "fc2.b", {d}, -1}})
      p.push_back(t);
  }
  std::vector<TensorSpec> all;
  for (const char* kind : {"param/", "adam_m/", "adam_v/"})
    for (const TensorSpec& t : p) all.push_back({kind + t.name, t.shape, t.tp_dim});
  return all;
}

using State = testing::SyntheticState;

State make_state(const Communicator& world, const std::vector<TensorSpec>& specs, int tp,
                 bool zero) {
  return testing::make_synthetic_state(world.rank(), world.size(), specs, tp, zero, 0.0f);
}

void fill(State& st) {
  for (StatePiece& p : st.pieces)
    for_each_run(p, [&](std::int64_t logical, std::int64_t local, std::int64_t len) {
      for (std::int64_t k = 0; k < len; ++k)
        p.data[local + k] = static_cast<float>((logical + k) % 1000) * 1e-3f - 0.5f;
    });
}

std::map<std::string, std::uint64_t> fingerprints(const Communicator& world, const State& st) {
  std::vector<std::uint64_t> v;
  std::vector<std::string> names;
  for (const StatePiece& p : st.pieces) {
    names.push_back(p.name);
    v.push_back(p.owner ? fingerprint(p) : 0);
  }
  allreduce_u64(world, v, IntOp::sum);
  std::map<std::string, std::uint64_t> m;
  for (std::size_t i = 0; i < names.size(); ++i) m[names[i]] = v[i];
  return m;
}

std::string run_cmd(const std::string& cmd) {
  std::string out;
  FILE* f = popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return out;
  char buf[512];
  while (fgets(buf, sizeof buf, f)) out += buf;
  pclose(f);
  return out;
}

// dd's summary "N bytes (...) copied, S s, ..." -> N / S in bytes per second.
double dd_rate(const std::string& out) {
  const auto c = out.rfind(" copied, ");
  const auto b = out.rfind('\n', out.rfind(" bytes", c));
  if (c == std::string::npos) return 0;
  const double bytes = std::atof(out.c_str() + (b == std::string::npos ? 0 : b + 1));
  const double secs = std::atof(out.c_str() + c + 9);
  return secs > 0 ? bytes / secs : 0;
}

// Drops the page cache of every file under `dir` (they are fsynced, so pages are clean).
std::string drop_cache(const std::string& dir) {
  std::string how = "posix_fadvise";
  {
    std::ofstream f("/proc/sys/vm/drop_caches");
    if (f && (f << "3\n") && f.flush()) how = "drop_caches";
  }
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
  return how;
}

// A simulated training step: a fixed amount of arithmetic.
double step_work(int iters) {
  double x = 1.0;
  for (int i = 0; i < iters; ++i) x = std::sqrt(x + 1.0) * 0.999;
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint save/load benchmark (issue 4)"};
  std::string dir, reshard_from;
  int layers = 10, step_iters = 4000000;
  app.add_option("--dir", dir, "scratch directory (on the disk to measure)")->required();
  app.add_option("--layers", layers, "transformer blocks (10: ~96M parameters)");
  app.add_option("--reshard-from", reshard_from, "a checkpoint saved by another layout to load");
  app.add_option("--step-iters", step_iters, "length of the simulated training step");
  bool buffered = false;
  app.add_flag("--buffered", buffered, "write through the page cache (no O_DIRECT)");
  int load_reps = 1;
  app.add_option("--load-reps", load_reps,
                 "same-layout loads (each after dropping the pages); medians are reported");
  bool skip_async = false;
  app.add_flag("--skip-async", skip_async, "skip the async-save measurement");
  CLI11_PARSE(app, argc, argv);
  return run_ranks(argc, argv, [&](Context& ctx) {
    const Communicator& world = ctx.world();
    const int np = world.size();
    const auto specs = gpt_specs(layers);
    std::int64_t params = 0;
    for (const TensorSpec& s : specs)
      if (s.name.rfind("param/", 0) == 0) params += shape_numel(s.shape);
    json out = {{"bench", "ckpt"}, {"np", np}, {"params", params}, {"state_bytes", params * 12}};
    const std::string root = dir + "/np" + std::to_string(np);
    if (world.rank() == 0) {
      fs::create_directories(root);
      const std::string w =
          run_cmd("dd if=/dev/zero of=" + root + "/dd.tmp bs=1M count=1024 conv=fdatasync");
      const std::string r = run_cmd("dd if=" + root + "/dd.tmp of=/dev/null bs=1M iflag=direct");
      out["dd_write_Bps"] = dd_rate(w);
      out["dd_read_direct_Bps"] = dd_rate(r);
      fs::remove(root + "/dd.tmp");
    }
    auto timed = [&](auto&& f) {
      world.barrier();
      const double t0 = bench::wall_s();
      f();
      world.barrier();
      return bench::wall_s() - t0;
    };
    // Save with ZeRO over all ranks (tp 1), the trainer's layout for DP runs.
    State src = make_state(world, specs, 1, np > 1);
    fill(src);
    const auto fps = fingerprints(world, src);
    std::string ck;
    ckpt::SaveOptions save_opt{root, 1, 1, -1, !buffered};
    double save_cpu = 0;
    const double t_save = timed([&] {
      const double c0 = bench::cpu_s(CLOCK_PROCESS_CPUTIME_ID);
      ck = ckpt::save(world, save_opt, src.pieces, fps, {});
      save_cpu = bench::cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    });
    out["direct_io"] = !buffered;
    out["save_s"] = t_save;
    out["save_cpu_s"] = save_cpu;
    out["save_Bps"] = static_cast<double>(params * 12) / t_save;
    std::string cache_method = drop_cache(ck);
    const ckpt::Meta meta = ckpt::read_meta(ck);
    State same = make_state(world, specs, 1, np > 1);
    // Rank 0's process CPU time of a load (all its threads: the reader, the OpenMP team).
    auto timed_cpu = [&](auto&& f, double* cpu) {
      return timed([&] {
        const double c0 = bench::cpu_s(CLOCK_PROCESS_CPUTIME_ID);
        f();
        *cpu = bench::cpu_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
      });
    };
    std::vector<double> load_s, load_cpu;
    for (int rep = 0; rep < std::max(1, load_reps); ++rep) {
      if (rep > 0) drop_cache(ck);
      double cpu = 0;
      load_s.push_back(timed_cpu([&] { ckpt::load(world, ck, meta, same.pieces); }, &cpu));
      load_cpu.push_back(cpu);
    }
    out["load_same_s"] = bench::median(load_s);
    out["load_same_cpu_s"] = bench::median(load_cpu);
    out["load_same_s_all"] = load_s;
    out["load_same_cpu_s_all"] = load_cpu;
    out["load_same_layout"] = np > 1 ? "tp1 dp" + std::to_string(np) + " zero" : "tp1";
    if (np > 1) {
      drop_cache(ck);
      State other = make_state(world, specs, np, false);
      double cpu = 0;
      out["load_reshard_s"] = timed_cpu([&] { ckpt::load(world, ck, meta, other.pieces); }, &cpu);
      out["load_reshard_cpu_s"] = cpu;
      out["load_reshard_layout"] = "tp" + std::to_string(np) + " no zero (saved tp1 zero)";
    }
    if (!reshard_from.empty()) {
      drop_cache(reshard_from);
      const ckpt::Meta m2 = ckpt::read_meta(reshard_from);
      State other = make_state(world, specs, 1, np > 1);
      double cpu = 0;
      out["load_reshard_s"] =
          timed_cpu([&] { ckpt::load(world, reshard_from, m2, other.pieces); }, &cpu);
      out["load_reshard_cpu_s"] = cpu;
      out["load_reshard_layout"] = "tp1 at np " + std::to_string(np) + " from " + reshard_from;
    }
    out["page_cache"] = cache_method;
    if (!skip_async) {
      // Async save, `rounds` times: steps alone, then every step that overlaps an
      // AsyncSaver's write (until its writer thread is done); steps alone once more at the
      // end. Alone and overlapped steps alternate in time, so load from elsewhere on the
      // machine hits both alike. Round 1's start() allocates the image (page faults); later
      // rounds reuse it, as every later save of a run does.
      const int steps = 8, rounds = 3;
      std::vector<double> alone, overlapped, starts, writes, finishes, writer_cpu;
      volatile double sink = 0;
      auto step = [&](std::vector<double>& into) {
        const double t0 = bench::wall_s();
        sink = sink + step_work(step_iters);
        into.push_back(bench::wall_s() - t0);
      };
      ckpt::AsyncSaver saver;
      for (int r = 0; r < rounds; ++r) {
        for (int s = 0; s < steps; ++s) step(alone);
        const double t0 = bench::wall_s();
        ckpt::SaveOptions async_opt{root, 2 + r, 1, -1, !buffered};
        saver.start(world, async_opt, src.pieces, fps, {});
        starts.push_back(bench::wall_s() - t0);
        const double p0 = bench::cpu_s(CLOCK_PROCESS_CPUTIME_ID);
        const double m0 = bench::cpu_s(CLOCK_THREAD_CPUTIME_ID);
        while (!saver.written() && overlapped.size() < 2000) step(overlapped);
        writes.push_back(bench::wall_s() - t0);
        writer_cpu.push_back((bench::cpu_s(CLOCK_PROCESS_CPUTIME_ID) - p0) -
                             (bench::cpu_s(CLOCK_THREAD_CPUTIME_ID) - m0));
        const double t1 = bench::wall_s();
        saver.finish(world);
        finishes.push_back(bench::wall_s() - t1);
      }
      for (int s = 0; s < steps; ++s) step(alone);
      auto mean = [](const std::vector<double>& v) {
        double s = 0;
        for (double x : v) s += x;
        return v.empty() ? 0.0 : s / static_cast<double>(v.size());
      };
      using bench::median;
      double wcpu = 0;
      for (double x : writer_cpu) wcpu += x;
      out["async"] = {
          {"step_alone_s", mean(alone)},
          {"step_overlapped_s", mean(overlapped)},
          {"overhead_on_overlapped_steps",
           overlapped.empty() ? 0.0 : mean(overlapped) / mean(alone) - 1},
          {"step_alone_median_s", median(alone)},
          {"step_overlapped_median_s", median(overlapped)},
          {"overhead_median", overlapped.empty() ? 0.0 : median(overlapped) / median(alone) - 1},
          {"rounds", rounds},
          {"start_snapshot_s", starts.front()},
          {"start_snapshot_reused_s",
           median(std::vector<double>(starts.begin() + 1, starts.end()))},
          {"start_s_per_round", starts},
          {"write_s_per_round", writes},
          {"writer_cpu_s", wcpu},
          {"writer_cpu_s_per_round", writer_cpu},
          {"finish_wait_s", mean(finishes)},
          {"steps_alone", alone.size()},
          {"steps_overlapped", overlapped.size()}};
    }
    if (world.rank() == 0) {
      const double dw = out["dd_write_Bps"], dr = out["dd_read_direct_Bps"];
      const double bytes = static_cast<double>(params * 12);
      out["save_vs_dd_write"] = dw > 0 ? bytes / t_save / dw : 0;
      out["load_same_vs_dd_read"] = dr > 0 ? bytes / out["load_same_s"].get<double>() / dr : 0;
      if (out.contains("load_reshard_s"))
        out["reshard_over_same"] =
            out["load_reshard_s"].get<double>() / out["load_same_s"].get<double>();
      std::printf("%s\n", out.dump().c_str());
    }
    return 0;
  });
}
