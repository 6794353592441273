// Bandwidth of the canonical tree collectives against the vendor MPI_Allreduce.
// Run: mpirun --allow-run-as-root -np 2 build/bin/bench_collectives [--help]
// Prints one JSON object per line: {"impl","bytes","np","gbps","seconds","reps"}, where
// seconds is the median over repetitions of the slowest rank's time for one call
// (barrier-synchronized) and gbps = bytes / seconds / 1e9 (algorithm bandwidth). The
// implementations are interleaved within each repetition so drift hits them alike, and the
// input is restored (untimed) before every call.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"

using namespace lockstep;

namespace {

struct Impl {
  std::string name;
  std::function<void(std::span<float>)> run;
};

double slowest(const Communicator& comm, double seconds) {
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm.handle()),
            "MPI_Allreduce", comm.handle());
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tree vs vendor allreduce bandwidth; one JSON object per line"};
  std::size_t min_bytes = 4 << 10, max_bytes = 64 << 20;
  int factor = 4, min_reps = 5, max_reps = 200, warmup = 2;
  double budget_s = 0.4;
  std::vector<std::string> impls{"tree", "vendor", "tree_rs_ag"};
  TreeOptions opt;
  app.add_option("--min-bytes", min_bytes, "smallest message")->capture_default_str();
  app.add_option("--max-bytes", max_bytes, "largest message")->capture_default_str();
  app.add_option("--factor", factor, "size step (2 or 4)")->capture_default_str();
  app.add_option("--min-reps", min_reps, "fewest timed repetitions")->capture_default_str();
  app.add_option("--max-reps", max_reps, "most timed repetitions")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed calls per size")->capture_default_str();
  app.add_option("--budget", budget_s, "target seconds per size")->capture_default_str();
  app.add_option("--impl", impls,
                 "tree, tree_doubling, tree_halving, tree_rs_ag, vendor, vendor_rs_ag")
      ->capture_default_str();
  app.add_option("--halving-min-bytes", opt.halving_min_bytes, "tree: halving from here")
      ->capture_default_str();
  app.add_option("--piece-bytes", opt.piece_bytes, "tree: exchange piece")->capture_default_str();
  app.add_option("--max-pieces", opt.max_pieces, "tree: pieces per exchange at most")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (factor < 2) return report_startup_error("--factor must be at least 2");

  return run_ranks(argc, argv, [&](Context& ctx) {
    const Communicator& world = ctx.world();
    const int P = world.size();
    std::vector<float> seg_buf;
    auto rs_ag = [&](std::span<float> buf, bool tree) {
      const std::size_t m = buf.size() / static_cast<std::size_t>(P);
      seg_buf.resize(m);
      if (tree) {
        tree_reduce_scatter(world, buf, seg_buf, opt);
      } else {
        vendor_reduce_scatter(world, buf, seg_buf);
      }
      allgather(world, seg_buf, buf);
    };
    std::vector<Impl> all{
        {"tree",
         [&](std::span<float> b) { tree_allreduce(world, b, TreeAlgorithm::automatic, opt); }},
        {"tree_doubling",
         [&](std::span<float> b) { tree_allreduce(world, b, TreeAlgorithm::doubling, opt); }},
        {"tree_halving",
         [&](std::span<float> b) { tree_allreduce(world, b, TreeAlgorithm::halving, opt); }},
        {"tree_rs_ag", [&](std::span<float> b) { rs_ag(b, true); }},
        {"vendor", [&](std::span<float> b) { vendor_allreduce(world, b); }},
        {"vendor_rs_ag", [&](std::span<float> b) { rs_ag(b, false); }},
    };
    std::vector<Impl> chosen;
    for (const auto& name : impls) {
      auto it = std::find_if(all.begin(), all.end(), [&](const Impl& i) { return i.name == name; });
      check(it != all.end(), "unknown --impl '" + name + "'",
            "choose among tree, tree_doubling, tree_halving, tree_rs_ag, vendor, vendor_rs_ag");
      chosen.push_back(*it);
    }
    for (std::size_t bytes = min_bytes; bytes <= max_bytes;
         bytes *= static_cast<std::size_t>(factor)) {
      std::size_t n = bytes / sizeof(float);
      n -= n % static_cast<std::size_t>(P);  // reduce-scatter needs equal segments
      std::vector<float> src(n), buf(n);
      for (std::size_t i = 0; i < n; ++i) {
        src[i] =
            static_cast<float>((i * 2654435761u + static_cast<std::size_t>(ctx.rank())) % 1000) *
            0.001f;
      }
      std::vector<std::vector<double>> times(chosen.size());
      auto one = [&](const Impl& impl) {
        std::copy(src.begin(), src.end(), buf.begin());
        world.barrier();
        const double t0 = MPI_Wtime();
        impl.run(buf);
        return slowest(world, MPI_Wtime() - t0);
      };
      double est = 0;
      for (const auto& impl : chosen) {
        for (int w = 0; w < warmup; ++w) est = std::max(est, one(impl));
      }
      // Every rank derives reps from the same (max-reduced) estimate, so all agree.
      const int reps =
          std::clamp(static_cast<int>(budget_s / (est * static_cast<double>(chosen.size()) + 1e-9)),
                     min_reps, max_reps);
      for (int rep = 0; rep < reps; ++rep) {
        for (std::size_t k = 0; k < chosen.size(); ++k) times[k].push_back(one(chosen[k]));
      }
      if (ctx.rank() != 0) continue;
      for (std::size_t k = 0; k < chosen.size(); ++k) {
        const double med = bench::median(times[k]);
        const double nbytes = static_cast<double>(n * sizeof(float));
        std::printf(
            "{\"impl\":\"%s\",\"bytes\":%zu,\"np\":%d,\"gbps\":%.3f,\"seconds\":%.6e,"
            "\"reps\":%d}\n",
            chosen[k].name.c_str(), n * sizeof(float), P, nbytes / med / 1e9, med, reps);
      }
      std::fflush(stdout);
    }
    return 0;
  });
}
