// bench_gemm: GFLOP/s of the canonical, chain, eigen and openblas GEMMs on the model shapes.
// "canonical" runs the halving tree (contract v2), "canonical-pow2" the pow2 tree (v1); the
// two trees are one tree on power-of-two block counts, so compare them where K is 12, 48 or
// 192 blocks (the gpt2 shapes). Token-axis shapes (weight gradients over whole sequences)
// carry "seq" (the sequence length the halving tree restarts its leaves at).
// Prints one JSON object per line:
//   {"bench":"gemm","impl","tree","seq","m","n","k","ta","tb","threads","isa","avx512_rows",
//    "block","reps","gflops","gflops_min","gflops_max","seconds","seconds_min","seconds_max",
//    "operand_sets","openblas_core","clock"}
// (avx512_rows: the AVX-512 register tile's rows the impl ran with where the ISA is avx512;
// operand_sets: how many copies of A, B, C the calls took in turn, --operand-sets)
// gflops is the median over --reps trials (gflops_min/max its spread); each trial times
// back-to-back calls for at least --min-time seconds. Impls are interleaved per trial, so
// all impls of one shape see the same machine noise; compare ratios within one run.
// OpenBLAS's idle pool threads spin after each call and would steal a core from the next
// impl, so the bench re-executes itself once with OPENBLAS_THREAD_TIMEOUT=4 (shortest spin)
// and OPENBLAS_NUM_THREADS = the largest --threads value unless they are already set.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timing.hpp"
#include "runtime/aligned_vector.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/isa.hpp"
#include "runtime/openblas_env.hpp"

using namespace lockstep;

namespace {

struct GemmShape {
  std::string name;
  std::int64_t m, n, k;
  Trans ta, tb;
  std::int64_t seq = 0;  // > 0: K is tokens, sequences of this many
};

// A GEMM implementation and the tree its canonical form runs.
// Suffixes run the impl with its own tuning, interleaved with the other impls (tuning
// experiments, e.g. canonical@kc384,chain): "@kcN" the K panel target N, "@ncN" the B panel
// width, "@mcN" the A block height, "@resN" the B-resident limit N floats (0: Goto order
// only), "@cpN" the C prefetch distance in kernel calls (0: off), "@spillN" the slot floats
// past which canonical takes the B-resident order for larger blocks (0: never), "@sbN" how
// threads splitting M get op(B) (GemmTuning::shared_b), "@mrN" the AVX-512 register tile's
// rows (8: 8 x 48, 12: 12 x 32; GemmTuning::avx512_rows); suffixes chain (canonical@nc256@mc96).
// Tuning overrides, from the command line or an impl's suffixes: 0 (kc, nc, mc) or -1
// (resident, c_prefetch, spill, shared_b, mr) = keep the run's value.
struct TuningOverrides {
  std::int64_t kc = 0, nc = 0, mc = 0, resident = -1, c_prefetch = -1, spill = -1;
  int shared_b = -1, mr = -1;
  GemmTuning apply(GemmTuning t) const {
    if (kc > 0) t.kc_target = kc;
    if (nc > 0) t.nc = nc;
    if (mc > 0) t.mc = mc;
    if (resident >= 0) t.b_resident_floats = resident;
    if (c_prefetch >= 0) t.c_prefetch = c_prefetch;
    if (spill >= 0) t.slot_spill_floats = spill;
    if (shared_b >= 0) t.shared_b = shared_b;
    if (mr >= 0) t.avx512_rows = mr;
    return t;
  }
};
struct BenchImpl {
  std::string name;
  GemmImpl impl;
  TreeShape tree;
  TuningOverrides tuning;
};
BenchImpl parse_bench_impl(const std::string& name) {
  const std::size_t at = name.rfind('@');
  if (at != std::string::npos) {
    BenchImpl bi = parse_bench_impl(name.substr(0, at));
    bi.name = name;
    const std::string opt = name.substr(at + 1);
    const auto value = [&](std::size_t skip) {
      const std::string v = opt.substr(skip);
      check(!v.empty() && v.find_first_not_of("0123456789") == std::string::npos,
            "bench_gemm: bad tuning suffix in '" + name + "'", "use e.g. canonical@kc384");
      return std::stoll(v);
    };
    if (opt.rfind("kc", 0) == 0)
      bi.tuning.kc = value(2);
    else if (opt.rfind("nc", 0) == 0)
      bi.tuning.nc = value(2);
    else if (opt.rfind("mc", 0) == 0)
      bi.tuning.mc = value(2);
    else if (opt.rfind("res", 0) == 0)
      bi.tuning.resident = value(3);
    else if (opt.rfind("cp", 0) == 0)
      bi.tuning.c_prefetch = value(2);
    else if (opt.rfind("spill", 0) == 0)
      bi.tuning.spill = value(5);
    else if (opt.rfind("sb", 0) == 0)
      bi.tuning.shared_b = static_cast<int>(value(2));
    else if (opt.rfind("mr", 0) == 0)
      bi.tuning.mr = static_cast<int>(value(2));
    else
      fail("bench_gemm: unknown tuning suffix '@" + opt + "' in '" + name + "'",
           "use @kcN (K panel target), @ncN (B panel width), @mcN (A block height), @resN "
           "(B-resident limit in floats), @cpN (C prefetch distance), @spillN (slot floats "
           "past which canonical takes the B-resident order for larger blocks), @sbN (0, 1, "
           "2: how threads splitting M get op(B)) or @mrN (8 or 12: the AVX-512 tile's rows)");
    return bi;
  }
  if (name == "canonical-pow2") return {name, GemmImpl::canonical, TreeShape::pow2, {}};
  return {name, parse_gemm_impl(name), TreeShape::halving, {}};
}

// The model's GEMMs: forward Y = X W^T (NT), input grad dX = dY W (NN), weight grad
// dW = dY^T X (TN, K = tokens), plus plain squares (NN).
std::vector<GemmShape> all_shapes() {
  return {
      {"4096x256x256", 4096, 256, 256, Trans::N, Trans::T},
      {"4096x1024x256", 4096, 1024, 256, Trans::N, Trans::T},
      {"4096x256x1024", 4096, 256, 1024, Trans::N, Trans::N},
      {"256x256x4096", 256, 256, 4096, Trans::T, Trans::N},
      {"256x1024x4096", 256, 1024, 4096, Trans::T, Trans::N},
      {"512", 512, 512, 512, Trans::N, Trans::N},
      {"1024", 1024, 1024, 1024, Trans::N, Trans::N},
      {"2048", 2048, 2048, 2048, Trans::N, Trans::N},
      // bench-small (d_model 256, FFN 1024, 1024 tokens per microbatch): forward (NT),
      // input grads (NN) and weight grads (TN, K = tokens) of q/k/v/proj, fc1 and fc2.
      {"s-fwd-256", 1024, 256, 256, Trans::N, Trans::T},
      {"s-fwd-fc1", 1024, 1024, 256, Trans::N, Trans::T},
      {"s-fwd-fc2", 1024, 256, 1024, Trans::N, Trans::T},
      {"s-dgrad-256", 1024, 256, 256, Trans::N, Trans::N},
      {"s-dgrad-fc1", 1024, 256, 1024, Trans::N, Trans::N},
      {"s-dgrad-fc2", 1024, 1024, 256, Trans::N, Trans::N},
      {"s-wgrad-256", 256, 256, 1024, Trans::T, Trans::N},
      {"s-wgrad-fc1", 1024, 256, 1024, Trans::T, Trans::N},
      {"s-wgrad-fc2", 256, 1024, 1024, Trans::T, Trans::N},
      // gpt2-small (d_model 768, FFN 3072; 1024 tokens per sequence): forward K = 768 (12
      // blocks) and 3072 (48 blocks), input grad K = 3072, weight grads over one sequence
      // (K = 1024, 16 blocks) and over the global batch of 12 (K = 12,288: 12 sequences).
      {"g-fwd-768", 1024, 768, 768, Trans::N, Trans::T},
      {"g-fwd-fc2", 1024, 768, 3072, Trans::N, Trans::T},
      {"g-dgrad-fc1", 1024, 768, 3072, Trans::N, Trans::N},
      {"g-wgrad-1seq", 768, 768, 1024, Trans::T, Trans::N, 1024},
      {"g-wgrad-12seq", 768, 768, 12288, Trans::T, Trans::N, 1024},
      // gpt2-small's LM head (vocabulary 50304, tied to the embedding), a quarter of the
      // model's FLOPs, per sequence: forward K = 768, input grad K = 50304 (786 blocks),
      // weight grad K = 1024 tokens. 79 GFLOP per call: slow to run, so a set of its own.
      {"g-head-fwd", 1024, 50304, 768, Trans::N, Trans::T},
      {"g-head-dgrad", 1024, 768, 50304, Trans::N, Trans::N},
      {"g-head-wgrad", 50304, 768, 1024, Trans::T, Trans::N, 1024},
  };
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double now(bool cpu) {
  return cpu ? bench::cpu_s() : bench::wall_s();
}

void maybe_reexec(char** argv, int max_threads) {
  if (std::getenv("LOCKSTEP_BENCH_GEMM_CHILD")) return;
  setenv("LOCKSTEP_BENCH_GEMM_CHILD", "1", 1);
  // Pin OpenBLAS's AVX-512 kernels where it misdetects this CPU (runtime/openblas_env.hpp).
  if (!std::getenv("OPENBLAS_CORETYPE") && isa_supported(Isa::avx512)) {
    const std::string core = openblas_core_name();
    if (core != "skylakex" && core != "cooperlake" && core != "sapphirerapids")
      setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  }
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT")) setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1);
  if (!std::getenv("OPENBLAS_NUM_THREADS"))
    setenv("OPENBLAS_NUM_THREADS", std::to_string(max_threads).c_str(), 1);
  execv("/proc/self/exe", argv);
  // exec failed: run in this process with whatever settings we have.
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GEMM throughput: canonical vs chain vs vendor libraries"};
  std::string impls_s = "canonical,chain,eigen,openblas";
  std::string threads_s = "1,2";
  std::string shapes_s = "model";
  std::string isa_s = "auto";
  int reps = 7, block = 64;
  double min_time = 0.2;
  std::string clock_s = "wall";
  TuningOverrides cli_tuning;
  app.add_option("--impls", impls_s,
                 "comma list of canonical (halving tree), canonical-pow2, chain, eigen, openblas, "
                 "reference");
  app.add_option("--threads", threads_s, "comma list of thread counts");
  app.add_option("--shapes", shapes_s,
                 "comma list of shape names (e.g. 4096x256x256,512), 'model', 'squares', "
                 "'small' (bench-small's GEMMs), 'gpt2' (gpt2-small's blocks), 'gpt2-head' "
                 "(its LM head) or 'all'; custom MxNxK[:TATB] also accepted, e.g. "
                 "300x200x100:NT");
  app.add_option("--reps", reps, "trials per impl and shape (median reported)");
  app.add_option("--min-time", min_time, "seconds per trial (calls repeat until reached)");
  app.add_option("--clock", clock_s,
                 "wall: elapsed time (the real figure); cpu: process CPU time / threads (a "
                 "tuning aid on a loaded machine: ignores time spent descheduled)")
      ->check(CLI::IsMember({"wall", "cpu"}));
  app.add_option("--isa", isa_s, "ISA path for canonical/chain: auto, scalar, avx2, avx512");
  app.add_option("--block", block, "reduce_block B of the canonical sum");
  app.add_option("--kc", cli_tuning.kc, "override the K panel target (tuning experiment)");
  app.add_option("--nc", cli_tuning.nc, "override the B panel width (tuning experiment)");
  app.add_option("--mc", cli_tuning.mc, "override the A block height (tuning experiment)");
  app.add_option("--b-resident", cli_tuning.resident,
                 "override the B-resident loop order limit in floats (0 = off)");
  app.add_option("--c-prefetch", cli_tuning.c_prefetch,
                 "override how many kernel calls ahead the C tile is prefetched (0 = off)");
  app.add_option("--slot-spill", cli_tuning.spill,
                 "override the slot floats past which canonical takes the B-resident order for "
                 "larger blocks (0 = never)");
  app.add_option("--shared-b", cli_tuning.shared_b,
                 "override how threads splitting M get op(B): 0 each packs its own, 1 shared "
                 "where row blocks are dealt, 2 always shared")
      ->check(CLI::Range(0, 2));
  app.add_option("--mr", cli_tuning.mr,
                 "override the AVX-512 register tile's rows: 8 (8 x 48) or 12 (12 x 32); "
                 "default by CPU and shape (runtime/gemm.hpp, avx512_tile_rows)")
      ->check(CLI::IsMember({8, 12}));
  int in_place = -1;
  app.add_option("--a-in-place", in_place,
                 "1: read A rows in place where they spread over L1 (default); 0: always copy")
      ->check(CLI::Range(0, 1));
  std::int64_t lda_pad = 0;
  app.add_option("--lda-pad", lda_pad,
                 "floats of padding per row of A (lda = its columns + this; layout experiment)")
      ->check(CLI::NonNegativeNumber);
  std::int64_t ldc_pad = 0;
  app.add_option("--ldc-pad", ldc_pad,
                 "floats of padding per row of C (ldc = N + this; the model pads rows of 1024 to "
                 "1088, runtime/gemm.hpp's gemm_row_stride)")
      ->check(CLI::NonNegativeNumber);
  int operand_sets = 1;
  app.add_option("--operand-sets", operand_sets,
                 "copies of A, B and C that successive calls take in turn (1: every call reads "
                 "the same, cache-warm operands; enough copies to pass the L3, e.g. 4, make "
                 "each call read them from memory, as a training step does)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<int> threads;
    for (const auto& t : split(threads_s)) threads.push_back(std::stoi(t));
    maybe_reexec(argv, *std::max_element(threads.begin(), threads.end()));
    std::vector<BenchImpl> impls;
    for (const auto& s : split(impls_s)) impls.push_back(parse_bench_impl(s));
    const Isa isa = parse_isa(isa_s);
    const std::string core = openblas_core_name();
    const bool cpu = clock_s == "cpu";
    GemmTuning tun = cli_tuning.apply(gemm_tuning());
    if (in_place >= 0) tun.a_in_place = in_place == 1;
    set_gemm_tuning(tun);

    std::vector<GemmShape> shapes;
    const auto known = all_shapes();
    for (const auto& name : split(shapes_s)) {
      if (name == "all") {
        shapes.insert(shapes.end(), known.begin(), known.end());
      } else if (name == "model") {
        shapes.insert(shapes.end(), known.begin(), known.begin() + 5);
      } else if (name == "squares") {
        shapes.insert(shapes.end(), known.begin() + 5, known.begin() + 8);
      } else if (name == "small") {
        shapes.insert(shapes.end(), known.begin() + 8, known.begin() + 17);
      } else if (name == "gpt2") {
        shapes.insert(shapes.end(), known.begin() + 17, known.begin() + 22);
      } else if (name == "gpt2-head") {
        shapes.insert(shapes.end(), known.begin() + 22, known.end());
      } else {
        auto it = std::find_if(known.begin(), known.end(),
                               [&](const GemmShape& s) { return s.name == name; });
        if (it != known.end()) {
          shapes.push_back(*it);
          continue;
        }
        long long m, n, k;
        char ta = 'N', tb = 'N';
        const int got = std::sscanf(name.c_str(), "%lldx%lldx%lld:%c%c", &m, &n, &k, &ta, &tb);
        check(got == 3 || got == 5, "bench_gemm: unknown shape '" + name + "'",
              "use a shape name, 'model', 'squares', 'all' or MxNxK[:TATB]");
        shapes.push_back(
            {name, m, n, k, ta == 'T' ? Trans::T : Trans::N, tb == 'T' ? Trans::T : Trans::N});
      }
    }

    std::fprintf(stderr, "bench_gemm: %s\n", gemm_vendor_info().c_str());
    for (const GemmShape& sh : shapes) {
      const std::int64_t arows = sh.ta == Trans::N ? sh.m : sh.k,
                         acols = sh.ta == Trans::N ? sh.k : sh.m;
      const std::int64_t brows = sh.tb == Trans::N ? sh.k : sh.n,
                         bcols = sh.tb == Trans::N ? sh.n : sh.k;
      // 64-byte aligned, as the model's activations (model/gpt_impl.hpp's buffers).
      const std::int64_t lda = acols + lda_pad;  // --lda-pad: rows of A further apart
      const std::int64_t ldc = sh.n + ldc_pad;   // --ldc-pad: rows of C further apart
      struct Operands {
        AlignedVector<float> A, B, C;
      };
      std::vector<Operands> sets;
      std::uint64_t s = 1;
      for (int i = 0; i < operand_sets; ++i) {
        Operands& o = sets.emplace_back(Operands{
            AlignedVector<float>(static_cast<std::size_t>(arows * lda)),
            AlignedVector<float>(static_cast<std::size_t>(brows * bcols)),
            AlignedVector<float>(static_cast<std::size_t>(sh.m * ldc))});
        for (auto* v : {&o.A, &o.B})
          for (auto& x : *v) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x = static_cast<float>(static_cast<std::int64_t>(s >> 40) - (1 << 23)) / (1 << 23);
          }
      }
      std::size_t next_set = 0;
      const double flop = 2.0 * static_cast<double>(sh.m) * sh.n * sh.k;
      for (int t : threads) {
        // The impl's tuning, set before its calls (outside the timed loop).
        auto tune = [&](const BenchImpl& bi) { set_gemm_tuning(bi.tuning.apply(tun)); };
        auto call = [&](const BenchImpl& bi) {
          KernelCtx ctx{isa, t, block, bi.tree};
          ctx = ctx.over_sequences(sh.seq);
          Operands& o = sets[next_set];
          next_set = (next_set + 1) % sets.size();
          gemm(ctx, bi.impl, sh.ta, sh.tb, sh.m, sh.n, sh.k, o.A.data(), lda, o.B.data(), bcols,
               o.C.data(), ldc);
        };
        // Calibrate calls per trial so one trial lasts about min_time.
        std::vector<int> calls(impls.size());
        for (std::size_t i = 0; i < impls.size(); ++i) {
          tune(impls[i]);
          call(impls[i]);  // warm up (packing buffers, thread pools)
          const double t0 = now(cpu);
          call(impls[i]);
          const double dt = (now(cpu) - t0) / (cpu ? t : 1);
          calls[i] = std::max(1, static_cast<int>(min_time / std::max(dt, 1e-7)));
        }
        std::vector<std::vector<double>> secs(impls.size());
        for (int r = 0; r < reps; ++r) {
          for (std::size_t i = 0; i < impls.size(); ++i) {
            tune(impls[i]);
            const double t0 = now(cpu);
            for (int c = 0; c < calls[i]; ++c) call(impls[i]);
            const double dt = (now(cpu) - t0) / (cpu ? t : 1);
            secs[i].push_back(dt / calls[i]);
          }
        }
        for (std::size_t i = 0; i < impls.size(); ++i) {
          const auto [lo, med, hi] = bench::spread(secs[i]);
          std::printf(
              "{\"bench\":\"gemm\",\"impl\":\"%s\",\"tree\":\"%s\",\"seq\":%lld,"
              "\"shape\":\"%s\",\"m\":%lld,\"n\":%lld,"
              "\"k\":%lld,\"ta\":\"%s\",\"tb\":\"%s\",\"lda\":%lld,\"ldc\":%lld,"
              "\"threads\":%d,\"isa\":\"%s\",\"avx512_rows\":%d,"
              "\"block\":%d,\"reps\":%d,\"gflops\":%.2f,\"gflops_min\":%.2f,"
              "\"gflops_max\":%.2f,\"seconds\":%.6g,\"seconds_min\":%.6g,\"seconds_max\":%.6g,"
              "\"operand_sets\":%d,\"openblas_core\":\"%s\",\"clock\":\"%s\"}\n",
              impls[i].name.c_str(), std::string(enum_name(impls[i].tree)).c_str(),
              static_cast<long long>(sh.seq), sh.name.c_str(), static_cast<long long>(sh.m),
              static_cast<long long>(sh.n), static_cast<long long>(sh.k),
              sh.ta == Trans::N ? "N" : "T", sh.tb == Trans::N ? "N" : "T",
              static_cast<long long>(lda), static_cast<long long>(ldc), t, isa_name(isa),
              avx512_tile_rows(impls[i].tuning.apply(tun), sh.n), block, reps,
              flop / med * 1e-9, flop / hi * 1e-9, flop / lo * 1e-9, med, lo, hi, operand_sets,
              core.c_str(),
              clock_s.c_str());
          std::fflush(stdout);
        }
      }
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
