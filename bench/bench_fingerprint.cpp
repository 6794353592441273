// bench_fingerprint: one core's speed of the state-hashing kernels of the verify module:
// the float32 fingerprint sum (verify/fingerprint_kernel.hpp, both versions, the dispatching
// path and the scalar definition) and XXH3-64 (runtime/hash.hpp: the dispatching path and
// libxxhash). Prints one JSON object per line:
//   {"bench":"fingerprint","impl","buffer_bytes","ns_per_float","gbytes_per_s","reps"}
// Each trial hashes the whole buffer in 32K-element chunks (the state trace's work unit,
// launch/train/state_trace.hpp); ns_per_float is the median over --reps trials, trials of the
// implementations interleaved. A buffer larger than the last-level cache (the default, 50 MB,
// about a rank's share of bench-small's state) measures hashing from memory, as a training
// step does; --mb 2 measures it in cache.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "runtime/hash.hpp"
#include "runtime/isa.hpp"
#include "verify/fingerprint.hpp"
#include "verify/fingerprint_kernel.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"bench_fingerprint: state-hashing kernel speed on one core"};
  double mb = 50;
  int reps = 15;
  app.add_option("--mb", mb, "buffer size in MB")->capture_default_str();
  app.add_option("--reps", reps, "trials per implementation")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  constexpr std::size_t kChunk = std::size_t{1} << 15;
  const std::size_t n = std::max<std::size_t>(kChunk, static_cast<std::size_t>(mb * 1e6 / 4));
  std::vector<float> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 9973) * 0.37f - 11.0f;

  struct Impl {
    std::string name;
    std::function<std::uint64_t(const float*, std::size_t, std::uint64_t)> run;
  };
  const std::uint64_t key = fingerprint_key("param/bench");
  std::vector<Impl> impls;
  for (FpVersion v : {FpVersion::v1, FpVersion::v2}) {
    const std::string tag = "fingerprint_v" + std::to_string(static_cast<int>(v));
    impls.push_back({tag, [v, key](const float* p, std::size_t len, std::uint64_t first) {
                       return detail::fingerprint_f32(v, key, p, len, first);
                     }});
    impls.push_back(
        {tag + "_scalar", [v, key](const float* p, std::size_t len, std::uint64_t first) {
           return detail::fingerprint_f32_scalar(v, key, p, len, first);
         }});
  }
  impls.push_back({"xxh3", [](const float* p, std::size_t len, std::uint64_t) {
                     return xxh3_64(p, len * sizeof(float));
                   }});
  impls.push_back({"xxh3_libxxhash", [](const float* p, std::size_t len, std::uint64_t) {
                     return detail::xxh3_libxxhash().hash(p, len * sizeof(float));
                   }});

  std::vector<std::vector<double>> ns(impls.size());
  std::uint64_t sink = 0;
  for (int r = 0; r < reps; ++r)
    for (std::size_t k = 0; k < impls.size(); ++k) {
      const double t0 = bench::wall_s();
      for (std::size_t c = 0; c < n; c += kChunk)
        sink += impls[k].run(data.data() + c, std::min(kChunk, n - c), c);
      const double s = bench::wall_s() - t0;
      ns[k].push_back(s / static_cast<double>(n) * 1e9);
    }
  for (std::size_t k = 0; k < impls.size(); ++k) {
    const bench::Spread t = bench::spread(ns[k]);
    const double med = t.median;
    std::printf(
        "{\"bench\":\"fingerprint\",\"impl\":\"%s\",\"isa\":\"%s\",\"buffer_bytes\":%zu,"
        "\"ns_per_float\":%.4f,\"ns_per_float_min\":%.4f,\"gbytes_per_s\":%.3f,\"reps\":%d}\n",
        impls[k].name.c_str(), isa_name(best_isa()), n * sizeof(float), med, t.min, 4.0 / med,
        reps);
  }
  std::fprintf(stderr, "checksum %016llx\n", static_cast<unsigned long long>(sink));
  return 0;
}
