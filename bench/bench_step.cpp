// bench_step: the training step outside Gpt::forward_backward, piece by piece, on the
// bench-small model (launch/configs/bench-small.toml: 3.2M parameters) at this job's
// layout: pack the microbatch gradient, DP reduction (+ combine of tied terms), hash of the
// reduced gradients, exact global grad norm, clip + AdamW, fingerprints of param/m/v + the
// replica guard (StateTrace::finish). The gradients are fixed pseudo-random values (no
// forward/backward), so one rep takes tens of milliseconds and many reps give stable
// medians. Every rank times its own pieces (steady clock); rank 0 prints one JSON object per
// piece {"bench":"step","piece":..,"median_ms":..,"min_ms":..,"median_cpu_ms":..} and a
// summary with the sums of the medians; cpu_ms is rank 0's process CPU time (all its threads)
// over the piece, which a loaded machine inflates far less than the steady clock.
// "update_separate" is the per-tensor clip pass then per-tensor AdamW (the path
// the trainer keeps while the op trace records), "update" the fused one it uses otherwise.
//   build-step/bin/bench_step --threads 2 --reps 40
//   mpirun -np 2 --oversubscribe build-step/bin/bench_step --threads 1 --reps 40
//   (add --zero for ZeRO-1, --determinism deterministic for vendor collectives)
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "launch/train/config.hpp"
#include "launch/train/grad_sync.hpp"
#include "launch/train/state_trace.hpp"
#include "model/gpt.hpp"
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "runtime/comm.hpp"
#include "runtime/grid.hpp"
#include "runtime/isa.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"bench_step: the training step's pieces outside forward/backward, as JSON"};
  std::string config_path = "launch/configs/bench-small.toml", det = "invariant";
  int threads = 1, reps = 30, tp = 1;
  bool zero = false;
  app.add_option("--config", config_path, "model config (TOML)");
  app.add_option("--threads", threads, "threads per rank");
  app.add_option("--reps", reps, "reps (the first is not counted)");
  app.add_option("--tp", tp, "tensor-parallel size");
  app.add_option("--determinism", det, "invariant | deterministic | fast");
  app.add_flag("--zero", zero, "ZeRO-1 (reduce-scatter, sharded AdamW, allgather)");
  CLI11_PARSE(app, argc, argv);

  return run_ranks(argc, argv, [&](Context& mpi) {
    config::Config cfg;
    config::load_toml_file(cfg, config_path);
    const Communicator& world = mpi.world();
    const Determinism mode = parse_determinism(det);
    const KernelCtx kctx = KernelCtx::best(threads);
    Grid grid = Grid::create(world, tp);
    Gpt model(cfg.model, grid, mode, kctx);
    model.init(1234);
    // Fixed gradients, different on every rank and term (magnitudes spread like real ones).
    std::uint64_t s = 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(world.rank() + 1);
    for (auto& terms : model.grads())
      for (auto& t : terms) {
        float* g = t.data<float>();
        for (std::int64_t i = 0; i < t.numel(); ++i) {
          s = s * 6364136223846793005ull + 1442695040888963407ull;
          g[i] = static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) * 0x1p-32f;
        }
      }
    GradSync sync(model, grid, mode, zero, kctx.threads, kctx.tree, 1);  // one microbatch
    StateTrace state(sync, world, grid, HashKind::lockstep, FpVersion::v2, 1, 1, kctx.threads);
    AdamWConfig acfg;
    std::vector<AdamWTensor> tensors;
    for (const UpdateSlice& sl : sync.slices())
      tensors.push_back({sl.param, sl.grad, sl.m, sl.v, sl.n, sl.decay});

    std::map<std::string, std::vector<double>> ms, cpu_ms;
    std::vector<std::string> order;
    auto timed = [&](const std::string& name, bool count, const std::function<void()>& f) {
      const double c0 = process_cpu_seconds();
      const double t0 = bench::wall_s();
      f();
      const double dt = (bench::wall_s() - t0) * 1e3;
      const double dc = (process_cpu_seconds() - c0) * 1e3;
      if (!count) return;
      if (!ms.count(name)) order.push_back(name);
      ms[name].push_back(dt);
      cpu_ms[name].push_back(dc);
    };
    for (int r = 0; r <= reps; ++r) {
      const bool count = r > 0;
      const std::int64_t step = r + 1;
      float norm = 0;
      ClipResult clip;
      // Both update paths every rep, in alternating order; each starts from a fresh
      // reduction (clipping scales the gradients in place).
      for (int pass = 0; pass < 2; ++pass) {
        const bool fused = (pass == 0) == (r % 2 == 0);
        if (pass == 0) world.barrier();
        timed("pack", count && pass == 0, [&] {
          sync.begin_step();
          sync.push_microbatch(1);
        });
        timed("dp_reduce", count && pass == 0, [&] { sync.reduce(); });
        if (pass == 0) {
          timed("hash_grad", count, [&] { state.after_reduce(step); });
          timed("grad_norm", count, [&] { norm = sync.grad_norm(); });
          clip = clip_coefficient(norm, 1.0f);
        }
        if (fused) {
          timed("update", count,
                [&] { clip_and_adamw_step(kctx, acfg, 3e-4, step, clip, tensors); });
        } else {
          timed("update_separate", count, [&] {
            for (auto& sl : sync.slices()) apply_clip(clip, std::span<float>(sl.grad, sl.n));
            for (auto& sl : sync.slices())
              adamw_step(kctx, AdamWHyper::at(acfg, 3e-4, step, sl.decay),
                         std::span<float>(sl.param, sl.n), std::span<const float>(sl.grad, sl.n),
                         std::span<float>(sl.m, sl.n), std::span<float>(sl.v, sl.n));
          });
        }
      }
      timed("publish", count, [&] { sync.publish_params(); });
      timed("finish", count, [&] { state.finish(step, 1, 2); });
    }
    if (world.rank() == 0) {
      double total = 0, total_cpu = 0;
      nlohmann::ordered_json summary, summary_cpu;
      for (const auto& name : order) {
        const bench::Spread t = bench::spread(ms[name]);
        const double med = t.median, med_cpu = bench::median(cpu_ms[name]);
        if (name != "update_separate") total += med, total_cpu += med_cpu;
        nlohmann::ordered_json j;
        j["bench"] = "step";
        j["piece"] = name;
        j["median_ms"] = med;
        j["min_ms"] = t.min;
        j["median_cpu_ms"] = med_cpu;
        j["reps"] = ms[name].size();
        std::printf("%s\n", j.dump().c_str());
        summary[name] = med;
        summary_cpu[name] = med_cpu;
      }
      nlohmann::ordered_json j;
      j["bench"] = "step";
      j["summary"] = summary;
      j["total_median_ms"] = total;
      j["summary_cpu"] = summary_cpu;
      j["total_median_cpu_ms"] = total_cpu;
      j["np"] = world.size();
      j["tp"] = tp;
      j["threads"] = threads;
      j["zero"] = zero;
      j["determinism"] = det;
      j["isa"] = isa_name(kctx.isa);
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  });
}
