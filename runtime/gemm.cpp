// GEMM front door: argument checks, dispatch by implementation and ISA path, the literal
// scalar reference, the portable scalar path of the canonical/chain driver, and the vendor
// wrappers (Eigen, OpenBLAS) used by fast mode.
#include "runtime/gemm.hpp"

#include <cblas.h>

#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm_kernel.hpp"

namespace lockstep {

namespace gemm_detail {
namespace {

GemmTuning g_tuning;

inline float a_at(const GemmArgs& g, std::int64_t i, std::int64_t k) {
  return g.ta == Trans::N ? g.A[i * g.lda + k] : g.A[k * g.lda + i];
}
inline float b_at(const GemmArgs& g, std::int64_t k, std::int64_t j) {
  return g.tb == Trans::N ? g.B[k * g.ldb + j] : g.B[j * g.ldb + k];
}

// The contract, literally: per C element, one FMA chain from -0.0 per leaf of K's axis, the
// leaf results combined by T (runtime/reduce_tree.hpp, fold_leaves).
void gemm_reference(const GemmArgs& g) {
  const AxisLeaves axis(SumRule{static_cast<int>(g.block), g.tree, g.segment}, g.K);
  std::vector<float> leaves;
  for (std::int64_t i = 0; i < g.M; ++i) {
    for (std::int64_t j = 0; j < g.N; ++j) {
      leaves.clear();
      for (std::int64_t l = 0; l < axis.count(); ++l) {
        float acc = -0.0f;
        for (std::int64_t k = axis.start(l); k < axis.start(l) + axis.len(l); ++k)
          acc = std::fma(a_at(g, i, k), b_at(g, k, j), acc);
        leaves.push_back(acc);
      }
      g.C[i * g.ldc + j] = fold_leaves(axis, leaves);
    }
  }
}

// The canonical panels: the largest nodes of K's tree with at most kc_target / B leaves, or
// 1.5 * kc_target / B on the AVX-512 path (at least one), left to right, with each leaf's
// length and in-panel merges and each panel's panel-level merges (the post order of the tree
// above the panels). Why 1.5 there: a halving tree over 3 * 2^j blocks has nodes of 3 * 2^i
// blocks only, and at B = 64 a cap of 4 leaves gave panels of 192 against chain's 256; nodes
// of 384 measured 4-7% faster on GPT-2's K = 768 and 1-2% on K = 3072 with the 12 x 32 tile
// (bench_gemm canonical vs canonical@kc384, AMD EPYC Zen 5, 1 thread), but 0-3% slower with
// the AVX2 path's 6 x 16 tile (2 threads). Power-of-two trees keep their kc_target-long
// panels either way (no power of two lies in (1, 1.5) times another, when kc_target / B is
// one). Panels change speed only, never bits.
KPlan plan_canonical(const GemmArgs& g, const GemmTuning& t, Isa isa) {
  KPlan kp;
  const AxisLeaves axis(SumRule{static_cast<int>(g.block), g.tree, g.segment}, g.K);
  const std::int64_t target = isa == Isa::avx512 ? t.kc_target * 3 / 2 : t.kc_target;
  const std::int64_t cap = std::max<std::int64_t>(1, target / g.block);
  const std::int64_t n = axis.count();
  int depth = 0;
  for (std::int64_t lo = 0; lo < n;) {
    const std::int64_t hi = axis.node_end(lo, cap);
    KPanel pan{axis.start(lo), 0, static_cast<int>(kp.leaf_len.size()),
               static_cast<int>(hi - lo), axis.merges_after_node(lo, hi), depth};
    int top = 0;
    for (std::int64_t l = lo; l < hi; ++l) {
      kp.leaf_len.push_back(static_cast<std::int32_t>(axis.len(l)));
      pan.kl += axis.len(l);
      const int m = l + 1 < hi ? axis.merges_after(l) : 0;
      kp.leaf_merges.push_back(static_cast<std::uint8_t>(m));
      top = top - m + 1;
      kp.stack = std::max(kp.stack, top);
    }
    depth = depth - pan.adds + 1;
    if (hi < n) kp.levels = std::max(kp.levels, depth);
    kp.kmax = std::max(kp.kmax, pan.kl);
    kp.panels.push_back(pan);
    lo = hi;
  }
  return kp;
}

KPlan plan_chain(const GemmArgs& g, const GemmTuning& t) {
  KPlan kp;
  const std::int64_t kc = std::max<std::int64_t>(1, t.kc_target);
  for (std::int64_t pc = 0; pc < g.K; pc += kc)
    kp.panels.push_back({pc, std::min(kc, g.K - pc), 0, 0, 0, 0});
  kp.kmax = std::min(kc, g.K);
  return kp;
}

// The K plan of a call, from a small per-thread cache (a training step calls the same few
// shapes over and over); the plan depends on K, the rule, the tuning and the ISA path only.
const KPlan& cached_plan(const GemmArgs& g, const GemmTuning& t, bool canonical, Isa isa) {
  struct Entry {
    std::int64_t K, block, segment, kc_target;
    TreeShape tree;
    bool canonical;
    Isa isa;
    KPlan plan;
  };
  static thread_local std::vector<Entry> cache;
  for (const Entry& e : cache)
    if (e.K == g.K && e.block == g.block && e.segment == g.segment && e.kc_target == t.kc_target &&
        e.tree == g.tree && e.canonical == canonical && e.isa == isa)
      return e.plan;
  if (cache.size() >= 32) cache.erase(cache.begin());
  cache.push_back({g.K, g.block, g.segment, t.kc_target, g.tree, canonical, isa,
                   canonical ? plan_canonical(g, t, isa) : plan_chain(g, t)});
  return cache.back().plan;
}

void gemm_openblas(const GemmArgs& g) {
  if (g.M == 0 || g.N == 0) return;
  // OpenBLAS keeps its own pthread pool; size it for this call (cheap when unchanged).
  if (openblas_get_num_threads() != g.threads) openblas_set_num_threads(g.threads);
  cblas_sgemm(CblasRowMajor, g.ta == Trans::N ? CblasNoTrans : CblasTrans,
              g.tb == Trans::N ? CblasNoTrans : CblasTrans, static_cast<blasint>(g.M),
              static_cast<blasint>(g.N), static_cast<blasint>(g.K), 1.0f, g.A,
              static_cast<blasint>(g.lda), g.B, static_cast<blasint>(g.ldb), 0.0f, g.C,
              static_cast<blasint>(g.ldc));
}

}  // namespace

// The portable path (no ISA flags): a 4 x 4 tile of scalars, std::fma per element.
LOCKSTEP_GEMM_DEFINE(scalar, simd::Scalar, 4, 4)

}  // namespace gemm_detail

const char* gemm_impl_name(GemmImpl impl) {
  return enum_name(impl).data();
}

GemmImpl parse_gemm_impl(std::string_view name) {
  return parse_enum<GemmImpl>(name, "GEMM implementation");
}

// Fast mode's GEMM, measured with bench_gemm on bench-small's shapes (M = 2048 rows at np 2,
// 4096 at np 1: NT forward, NN input gradient, TN weight gradient), `--clock cpu`:
//  * AVX-512 (Sapphire Rapids, OpenBLAS 0.3.21 SkylakeX kernels): at 1 thread chain and
//    OpenBLAS are within +-5% of each other per shape (chain 105-145 GFLOP/s, OpenBLAS
//    101-139); at 2 threads chain is 8-40% faster (e.g. 1024x256x256 NN 267 vs 177), and
//    OpenBLAS's own pthread pool competes with the OpenMP threads of the rest of the step.
//    Between chain and canonical, in the training step itself (2026-12-01, bench-small, fast
//    mode, 4 alternated pairs of 14-step runs): canonical 225-229 vs chain 228-232 ms/step at
//    np 2 x 1, 244-246 vs 252-253 at np 1 x 2. chain continues each C tile from C at every K
//    panel (12 rows ldc apart, loaded and stored per panel), which costs more in the step than
//    canonical's contiguous slot tiles, although bench_gemm (warm caches, one GEMM at a time)
//    has chain 1-3% ahead. So canonical: the fastest recipe we have in the step.
//  * AVX2 only: OpenBLAS's Haswell kernels are ~1.5x our AVX2 chain (72 vs 41 GFLOP/s at
//    2048x768x256 NT, 1 thread), so OpenBLAS.
GemmImpl fastest_gemm_impl(Isa isa) {
  return isa == Isa::avx512 ? GemmImpl::canonical : GemmImpl::openblas;
}

GemmImpl gemm_impl_for(Determinism mode, Isa isa) {
  return mode == Determinism::invariant       ? GemmImpl::canonical
         : mode == Determinism::deterministic ? GemmImpl::chain
                                              : fastest_gemm_impl(isa);
}

std::string gemm_vendor_info() {
  std::string eigen = "Eigen: not built for this CPU (needs AVX-512)";
  if (isa_supported(Isa::avx512)) {
    const gemm_detail::EigenInfo e = gemm_detail::eigen_info_avx512();
    eigen = "Eigen " + std::to_string(e.world) + "." + std::to_string(e.major) + "." +
            std::to_string(e.minor) + " (" + e.simd + ")";
  }
  return std::string(openblas_get_config()) + "; core " + openblas_get_corename() + "; " + eigen;
}

GemmTuning gemm_tuning() {
  return gemm_detail::g_tuning;
}

std::int64_t gemm_row_stride(std::int64_t cols) {
  check(cols >= 1, "gemm_row_stride: cols " + std::to_string(cols) + " must be positive",
        "pass the matrix's column count");
  const std::int64_t kl = std::min(cols, gemm_detail::g_tuning.kc_target);
  const std::int64_t ld0 = (cols + 15) / 16 * 16;
  // Either AVX-512 tile may read the rows (avx512_tile_rows): 12 or 8 of them at a time.
  const auto spread = [&](std::int64_t ld, int mr) {
    return gemm_detail::rows_spread_l1(0, ld, mr, 64 * mr, kl);
  };
  for (std::int64_t ld = ld0; ld <= ld0 + 1024; ld += 16)
    if (spread(ld, 12) && spread(ld, 8)) return ld;
  return cols;
}
void set_gemm_tuning(const GemmTuning& t) {
  check(t.kc_target >= 1 && t.nc >= 1 && t.mc >= 1,
        "GEMM tuning kc_target=" + std::to_string(t.kc_target) + " nc=" + std::to_string(t.nc) +
            " mc=" + std::to_string(t.mc) + " must be positive",
        "pass positive panel sizes (defaults: kc_target 256, nc 512, mc 264)");
  check(t.c_prefetch >= 0, "GEMM tuning c_prefetch=" + std::to_string(t.c_prefetch) + " is negative",
        "pass 0 (off) or how many kernel calls ahead to prefetch C (default 2)");
  check(t.b_resident_floats >= 0 && t.slot_spill_floats >= 0,
        "GEMM tuning b_resident_floats=" + std::to_string(t.b_resident_floats) +
            " slot_spill_floats=" + std::to_string(t.slot_spill_floats) + " must not be negative",
        "pass 0 (off) or a number of floats (defaults 2^18 and 2^23)");
  check(t.shared_b >= 0 && t.shared_b <= 2,
        "GEMM tuning shared_b=" + std::to_string(t.shared_b) + " is not 0, 1 or 2",
        "pass 0 (each thread packs its own op(B)), 1 (shared where row blocks are dealt) or 2 "
        "(always shared)");
  check(t.avx512_rows == 0 || t.avx512_rows == 8 || t.avx512_rows == 12,
        "GEMM tuning avx512_rows=" + std::to_string(t.avx512_rows) + " is not 0, 8 or 12",
        "pass 12 (the 12 x 32 tile), 8 (8 x 48) or 0 (by CPU and shape: avx512_tile_rows)");
  gemm_detail::g_tuning = t;
}

int avx512_tile_rows(const GemmTuning& t, std::int64_t N) {
  if (t.avx512_rows != 0) return t.avx512_rows;
  if (cpu_vendor() != CpuVendor::intel) return 12;
  using gemm_detail::ceil_div;
  return 10 * ceil_div(N, 48) * 48 <= 11 * ceil_div(N, 32) * 32 ? 8 : 12;
}

namespace {
// A call's arguments for the drivers (its K plan set apart: gemm_detail::cached_plan).
gemm_detail::GemmArgs gemm_args(const KernelCtx& ctx, Trans ta, Trans tb, std::int64_t M,
                                std::int64_t N, std::int64_t K, const float* A, std::int64_t lda,
                                const float* B, std::int64_t ldb, float* C, std::int64_t ldc) {
  return {ta, tb, M, N, K, A, lda, B, ldb, C, ldc, ctx.threads, ctx.reduce_block, ctx.tree,
          ctx.sequence, nullptr};
}
}  // namespace

void gemm(const KernelCtx& ctx, GemmImpl impl, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
          std::int64_t K, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          float* C, std::int64_t ldc) {
  validate(ctx);
  const std::int64_t min_lda = std::max<std::int64_t>(1, ta == Trans::N ? K : M);
  const std::int64_t min_ldb = std::max<std::int64_t>(1, tb == Trans::N ? N : K);
  const std::int64_t min_ldc = std::max<std::int64_t>(1, N);
  const bool empty = M == 0 || N == 0;
  // Messages are built only on failure: gemm() is called thousands of times per step.
  if (M < 0 || N < 0 || K < 0 || lda < min_lda || ldb < min_ldb || ldc < min_ldc ||
      (!empty && (C == nullptr || (K != 0 && (A == nullptr || B == nullptr))))) {
    const std::string dims =
        "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
    check(M >= 0 && N >= 0 && K >= 0, "gemm: negative size (" + dims + ")",
          "pass non-negative M, N, K");
    check(lda >= min_lda,
          "gemm: lda=" + std::to_string(lda) + " < " + std::to_string(min_lda) + " (" + dims +
              ", A " + (ta == Trans::N ? "not " : "") + "transposed)",
          "A is row-major: lda is its row stride, at least K for Trans::N and M for Trans::T");
    check(ldb >= min_ldb,
          "gemm: ldb=" + std::to_string(ldb) + " < " + std::to_string(min_ldb) + " (" + dims +
              ", B " + (tb == Trans::N ? "not " : "") + "transposed)",
          "B is row-major: ldb is its row stride, at least N for Trans::N and K for Trans::T");
    check(ldc >= min_ldc, "gemm: ldc=" + std::to_string(ldc) + " < N (" + dims + ")",
          "C is row-major M x N: ldc is its row stride, at least N");
    check(C != nullptr, "gemm: C is null (" + dims + ")", "pass the output buffer");
    fail("gemm: A or B is null (" + dims + ")", "pass both input buffers");
  }
  if (empty) return;

  gemm_detail::GemmArgs g = gemm_args(ctx, ta, tb, M, N, K, A, lda, B, ldb, C, ldc);
  const GemmTuning& t = gemm_detail::g_tuning;
  using namespace gemm_detail;
  if (impl == GemmImpl::canonical || impl == GemmImpl::chain)
    g.kplan = &cached_plan(g, t, impl == GemmImpl::canonical, ctx.isa);
  switch (impl) {
    case GemmImpl::reference:
      return gemm_reference(g);
    case GemmImpl::eigen:
      check(isa_supported(Isa::avx512),
            "gemm: the eigen implementation is built for AVX-512 only and this CPU lacks it",
            "use openblas or canonical");
      return eigen_avx512(g);
    case GemmImpl::openblas:
      return gemm_openblas(g);
    case GemmImpl::canonical:
    case GemmImpl::chain: {
      const bool canon = impl == GemmImpl::canonical;
      switch (ctx.isa) {
        case Isa::avx512:
          return canon ? canonical_avx512(g, t) : chain_avx512(g, t);
        case Isa::avx2:
          return canon ? canonical_avx2(g, t) : chain_avx2(g, t);
        case Isa::scalar:
          return canon ? canonical_scalar(g, t) : chain_scalar(g, t);
      }
    }
  }
  fail("gemm: unknown implementation", "use a GemmImpl value");
}

std::vector<GemmScratch> gemm_scratch(const KernelCtx& ctx, GemmImpl impl, Trans ta, Trans tb,
                                      std::int64_t M, std::int64_t N, std::int64_t K) {
  validate(ctx);
  const bool canon = impl == GemmImpl::canonical;
  if ((!canon && impl != GemmImpl::chain) || M <= 0 || N <= 0 || K <= 0) return {};
  const std::int64_t lda = ta == Trans::N ? K : M, ldb = tb == Trans::N ? N : K;
  gemm_detail::GemmArgs g = gemm_args(ctx, ta, tb, M, N, K, nullptr, lda, nullptr, ldb, nullptr, N);
  const GemmTuning& t = gemm_detail::g_tuning;
  g.kplan = &gemm_detail::cached_plan(g, t, canon, ctx.isa);
  switch (ctx.isa) {
    case Isa::avx512:
      return gemm_detail::scratch_avx512(g, t, canon);
    case Isa::avx2:
      return gemm_detail::scratch_avx2(g, t, canon);
    case Isa::scalar:
      break;
  }
  return gemm_detail::scratch_scalar(g, t, canon);
}

std::int64_t gemm_scratch_held_bytes() {
  return gemm_detail::g_scratch_bytes.load(std::memory_order_relaxed);
}

namespace {
struct MatView {
  std::int64_t rows, cols, ld;
};
MatView mat_view(const Tensor& t, const char* role) {
  check(t.rank() == 2, std::string("matmul: ") + role + " " + t.describe() + " must be rank 2",
        "reshape to [rows, cols] first");
  check(t.dtype() == DType::f32,
        std::string("matmul: ") + role + " " + t.describe() + " must be f32",
        "GEMM runs in float32");
  const std::int64_t rows = t.dim(0), cols = t.dim(1);
  check(cols <= 1 || t.strides()[1] == 1,
        std::string("matmul: ") + role + " " + t.describe() + " needs unit column stride",
        "pass a contiguous tensor or a row slice (use clone() for other views)");
  const std::int64_t ld = rows <= 1 ? std::max<std::int64_t>(1, cols) : t.strides()[0];
  return {rows, cols, ld};
}
}  // namespace

void matmul(const KernelCtx& ctx, GemmImpl impl, const Tensor& A, Trans ta, const Tensor& B,
            Trans tb, Tensor& C) {
  const MatView a = mat_view(A, "A"), b = mat_view(B, "B"), c = mat_view(C, "C");
  const std::int64_t M = ta == Trans::N ? a.rows : a.cols;
  const std::int64_t K = ta == Trans::N ? a.cols : a.rows;
  const std::int64_t Kb = tb == Trans::N ? b.rows : b.cols;
  const std::int64_t N = tb == Trans::N ? b.cols : b.rows;
  const auto op = [](const Tensor& t, Trans tr) {
    return t.describe() + (tr == Trans::T ? "^T" : "");
  };
  check(K == Kb,
        "matmul: inner dimensions differ: op(A) = " + op(A, ta) + " has K=" + std::to_string(K) +
            " but op(B) = " + op(B, tb) + " has K=" + std::to_string(Kb),
        "op(A) must be [M, K] and op(B) [K, N]; check the transpose flags");
  check(c.rows == M && c.cols == N,
        "matmul: output " + C.describe() + " must be [" + std::to_string(M) + ", " +
            std::to_string(N) + "] for op(A) = " + op(A, ta) + " and op(B) = " + op(B, tb),
        "allocate C as [M, N]");
  gemm(ctx, impl, ta, tb, M, N, K, A.data<float>(), a.ld, B.data<float>(), b.ld, C.data<float>(),
       c.ld);
}

}  // namespace lockstep
