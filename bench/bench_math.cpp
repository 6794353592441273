// bench_math: speed of the array transcendentals the training step calls most
// (runtime/transcendental.hpp: gelu_tanh_and_grad in the MLP forward, exp in the softmax), on
// every ISA path this CPU supports, one thread. Prints one JSON object per line:
//   {"bench":"math","fn","isa","n","ns_per_elem_min","ns_per_elem_median","trials","calls"}
// Each trial times `calls` calls over the same n floats (in L1 for the default n = 4096, so
// the figure is the kernel's, not memory's); min and median over `trials` trials. On a VM
// whose speed drifts, the minimum is the steadiest figure; compare builds by alternating runs.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "runtime/isa.hpp"
#include "runtime/random.hpp"
#include "runtime/transcendental.hpp"

using namespace lockstep;

int main(int argc, char** argv) {
  CLI::App app{"Array transcendentals (GELU value + derivative, exp): ns per element"};
  std::int64_t n = 4096;
  int trials = 200, calls = 20;
  app.add_option("--n", n, "floats per call")->check(CLI::PositiveNumber);
  app.add_option("--trials", trials, "timed trials (min and median reported)")
      ->check(CLI::PositiveNumber);
  app.add_option("--calls", calls, "calls per trial")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<float> x(static_cast<std::size_t>(n)), y(x.size()), g(x.size());
  fill_normal(1, 7, 0, x.data(), n, 0.0f, 1.0f);  // GELU inputs: pre-activations ~ N(0, 1)
  std::vector<float> e(x.size());
  for (std::size_t i = 0; i < e.size(); ++i) e[i] = -4.0f * std::abs(x[i]);  // softmax: <= 0

  struct Fn {
    const char* name;
    void (*run)(const KernelCtx&, const float*, float*, float*, const float*, std::int64_t);
  };
  const Fn fns[] = {
      {"gelu_tanh_and_grad",
       [](const KernelCtx& c, const float* xs, float* ys, float* gs, const float*, std::int64_t m) {
         math::gelu_tanh_and_grad(c, xs, ys, gs, m);
       }},
      {"exp", [](const KernelCtx& c, const float*, float* ys, float*, const float* es,
                 std::int64_t m) { math::exp(c, es, ys, m); }},
  };
  for (const Fn& f : fns) {
    for (Isa isa : supported_isas()) {
      const KernelCtx ctx{isa, 1, 64};
      f.run(ctx, x.data(), y.data(), g.data(), e.data(), n);  // warm-up
      const bench::Spread t = bench::time_trials(
          trials, calls, [&] { f.run(ctx, x.data(), y.data(), g.data(), e.data(), n); });
      const double per_elem = 1e9 / static_cast<double>(n);
      std::printf(
          "{\"bench\":\"math\",\"fn\":\"%s\",\"isa\":\"%s\",\"n\":%lld,\"ns_per_elem_min\":%.4f,"
          "\"ns_per_elem_median\":%.4f,\"trials\":%d,\"calls\":%d}\n",
          f.name, isa_name(isa), static_cast<long long>(n), t.min * per_elem, t.median * per_elem,
          trials, calls);
      std::fflush(stdout);
    }
  }
  return 0;
}
