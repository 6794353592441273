// Private to the GEMM: the blocked driver (packing, K panels, binary-counter tree, OpenMP over
// C tiles) and the register-tile micro-kernel, written once over a vector trait V of
// runtime/simd.hpp and instantiated per ISA path by LOCKSTEP_GEMM_DEFINE (gemm.cpp: Scalar;
// gemm_kernel_avx2.cpp: Avx2; gemm_kernel_avx512.cpp: Avx512).
//
// Determinism contract: every path evaluates, for each C element, exactly the canonical sum of
// docs/design.md section 2 (or, for `chain`, one FMA chain over all of K):
//  * a leaf is an FMA chain over one block of B k's, in increasing k, from -0.0, held in a
//    register lane (vectors span M/N, never K);
//  * K panels are nodes of the tree of K (runtime/reduce_tree.hpp: the largest nodes of at most
//    kc_target / B leaves, 1.5 times that on AVX-512, gemm.cpp); a panel's leaves merge on a
//    register-tile stack in L1 scratch as the tree's post-order schedule says (for pow2 the
//    binary counter), so a panel yields the complete subtree over its leaves;
//  * panel results merge on a second stack in memory (one slot array per depth), by the same
//    schedule one level up, whose last merge is T over all leaves;
//  * every merge is `older + newer` (left + right subtree).
// Nothing here depends on the thread count, the tile position, M, N or the ISA: threads only
// pick which C tiles they compute, and each C element's arithmetic is fixed by k alone.
//
// This header is included by several translation units compiled with different ISA flags, so
// everything in it lives in an anonymous namespace (one private copy per TU, no ODR clash).
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/gemm.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/reduce_tree.hpp"
#include "runtime/simd.hpp"

namespace lockstep::gemm_detail {

// One K panel: k range [pc, pc + kl); canonical: its leaves [leaf0, leaf0 + nleaves) in the
// plan's tables, the panel-level slots it folds in (adds: depth - 1 down to depth - adds)
// and the slot depth it finds occupied.
struct KPanel {
  std::int64_t pc, kl;
  int leaf0, nleaves, adds, depth;
};
// How K is cut into panels, made once per shape by gemm.cpp (cached_plan; no ISA-specific code).
struct KPlan {
  std::vector<KPanel> panels;
  std::vector<std::int32_t> leaf_len;     // canonical: every leaf's length, panel by panel
  std::vector<std::uint8_t> leaf_merges;  // and the merges that follow it inside its panel
  std::int64_t kmax = 0;                  // longest panel
  int stack = 0, levels = 0;              // intra-panel stack depth, panel-level slot count
};

struct GemmArgs {
  Trans ta, tb;
  std::int64_t M, N, K;
  const float* A;
  std::int64_t lda;
  const float* B;
  std::int64_t ldb;
  float* C;
  std::int64_t ldc;
  int threads;
  std::int64_t block;   // reduce_block
  TreeShape tree;       // the canonical tree of K
  std::int64_t segment; // > 0: K is tokens, sequences of this many (KernelCtx::sequence)
  const KPlan* kplan;   // canonical / chain: the panels of K (set by gemm())
};


// Per ISA entry points (LOCKSTEP_GEMM_DEFINE in gemm.cpp and the *_avx2.cpp / *_avx512.cpp
// files).
void canonical_scalar(const GemmArgs& g, const GemmTuning& t);
void chain_scalar(const GemmArgs& g, const GemmTuning& t);
void canonical_avx512(const GemmArgs& g, const GemmTuning& t);
void chain_avx512(const GemmArgs& g, const GemmTuning& t);
void canonical_avx2(const GemmArgs& g, const GemmTuning& t);
void chain_avx2(const GemmArgs& g, const GemmTuning& t);
// The floats of each thread's GEMM scratch a canonical or chain call needs (Driver::scratch).
std::vector<GemmScratch> scratch_scalar(const GemmArgs& g, const GemmTuning& t, bool canonical);
std::vector<GemmScratch> scratch_avx512(const GemmArgs& g, const GemmTuning& t, bool canonical);
std::vector<GemmScratch> scratch_avx2(const GemmArgs& g, const GemmTuning& t, bool canonical);
// Eigen's GEMM, instantiated only in the AVX-512 TU: Eigen templates compiled with different
// ISA flags in several TUs would collide at link time (one arbitrary copy wins).
void eigen_avx512(const GemmArgs& g);
struct EigenInfo {
  int world, major, minor;
  const char* simd;
};
EigenInfo eigen_info_avx512();

// The bytes every Scratch of the process holds (gemm_scratch_held_bytes).
inline std::atomic<std::int64_t> g_scratch_bytes{0};

namespace {

// Grow-only 64-byte-aligned scratch buffer (2 MiB and more on huge pages), one per owner
// (thread_local where per thread), so repeated calls do not pay page faults again.
struct Scratch {
  float* p = nullptr;
  std::size_t cap = 0;
  float* get(std::size_t n) {
    if (n > cap) {
      release();
      p = static_cast<float*>(host_alloc(n * sizeof(float), false));
      cap = n;
      g_scratch_bytes.fetch_add(static_cast<std::int64_t>(n * sizeof(float)),
                                std::memory_order_relaxed);
    }
    return p;
  }
  void release() {
    host_free(p, cap * sizeof(float));
    g_scratch_bytes.fetch_sub(static_cast<std::int64_t>(cap * sizeof(float)),
                              std::memory_order_relaxed);
    p = nullptr;
    cap = 0;
  }
  ~Scratch() { release(); }
};

// A thread's GEMM buffers, one set for every Driver of the translation unit (the AVX-512
// path's two register tiles share it), so that what a thread holds is the largest need of
// any call it ran, whichever tile ran it (model/memory_footprint.cpp counts it that way).
struct ThreadScratch {
  Scratch abuf, bbuf, kbuf, sbuf, team_b;
};
inline ThreadScratch& thread_scratch() {
  static thread_local ThreadScratch s;
  return s;
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}

// The micro-kernel over an MR x (NV*V::W) register tile. The A micro-panel is read through an
// accessor (APacked: element (row r, step k) at ap[r*ARS + k*AKS]; AInPlace: rows of op(A)
// read where they are, a run-time stride apart); B micro-panel element (k, column c) is at
// bp[k*NR + c].
template <class V, int MR_, int NV_>
struct Kernel {
  using R = typename V::reg;
  using Vec = V;
  static constexpr int MR = MR_;
  static constexpr int NV = NV_;
  static constexpr int NR = NV * V::W;
  static constexpr int TILE = MR * NR;

  // at(r): row r's element at the current step; step(n): n steps along k. Built inside the
  // kernels from (pointer, stride) passed in registers (a struct argument would go through
  // memory and stall the call on store forwarding).
  template <int ARS, int AKS>
  struct APacked {
    const float* p;
    APacked(const float* a, std::int64_t) : p(a) {}
    const float* at(int r) const { return p + r * ARS; }
    void step(std::int64_t n) { p += n * AKS; }
  };
  // Rows `lda` floats apart, k contiguous. Four (for MR 12) pointers three rows apart move
  // along k together, so that every row is one base + stride * {0, 1, 2} address and the loop
  // needs a few registers instead of one per row.
  struct AInPlace {
    static constexpr int NP = (MR + 2) / 3;
    const char* p[NP];
    std::int64_t lb;  // row stride in bytes
    AInPlace(const float* a, std::int64_t lda)
        : lb(lda * static_cast<std::int64_t>(sizeof(float))) {
      for (int i = 0; i < NP; ++i) p[i] = reinterpret_cast<const char*>(a) + i * 3 * lb;
    }
    const float* at(int r) const { return reinterpret_cast<const float*>(p[r / 3] + (r % 3) * lb); }
    void step(std::int64_t n) {
      for (int i = 0; i < NP; ++i) p[i] += n * static_cast<std::int64_t>(sizeof(float));
    }
  };

  struct Tile {
    R c[MR][NV];
  };

  static inline void set_identity(Tile& t) {
    const R z = V::neg_zero();
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) t.c[r][v] = z;
  }

  template <class A>
  static inline void fma_steps(Tile& t, A& ap, const float* bp, std::int64_t n) {
#pragma GCC unroll 2
    for (std::int64_t k = 0; k < n; ++k) {
      R b[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) b[v] = V::load(bp + k * NR + v * V::W);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const R a = V::bcast(ap.at(r));
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) t.c[r][v] = V::fma(a, b[v], t.c[r][v]);
      }
      ap.step(1);
    }
  }

  // The L1 scratch stack of a panel's subtrees: push() is the tile to store the newest
  // subtree to, pop() the newest stored one. Two spellings of the same stack, because GCC
  // schedules them differently (host F, 2026-12-07): counted by an index, the AVX-512 kernels
  // that read A in place (four row pointers live) keep every row address of the stack tiles in
  // its own register or spill slot across the leaves, which cost the single-panel GEMMs 3-4%
  // (4096x256x256 and 4096x1024x256 NT at 0.95-0.96 of `chain`); moved as a pointer, the
  // kernels on packed A lose 1-2.5% instead, and the AVX2 in-place kernel (two row pointers)
  // gains nothing. Only the instructions differ: the same tiles, the same adds in the same order.
  template <class A>
  struct PanelStack {
    static constexpr bool kPointer = std::is_same_v<A, AInPlace> && AInPlace::NP > 2;
    float* base;
    float* sp = base;
    int top = 0;
    float* push() {
      if constexpr (kPointer) return (sp += TILE) - TILE;
      return base + (top++) * TILE;
    }
    float* pop() {
      if constexpr (kPointer) return sp -= TILE;
      return base + (--top) * TILE;
    }
    bool empty() const {
      if constexpr (kPointer) return sp == base;
      return top <= 0;
    }
  };

  // t = s + t (s is the older, left subtree), s a full contiguous tile in scratch.
  static inline void add_left(Tile& t, const float* s) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) t.c[r][v] = V::add(V::load(s + r * NR + v * V::W), t.c[r][v]);
  }
  static inline void store_full(const Tile& t, float* s) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) V::store(s + r * NR + v * V::W, t.c[r][v]);
  }
  static inline void store_c(const Tile& t, float* C, std::int64_t ldc, int rows, int cols) {
    if (cols == NR) {
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
        if (r < rows)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) V::storeu(C + r * ldc + v * V::W, t.c[r][v]);
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const int n = std::clamp(cols - v * V::W, 0, V::W);
          if (r < rows && n > 0) V::store_partial(C + r * ldc + v * V::W, t.c[r][v], n);
        }
    }
  }
  static inline void load_c(Tile& t, const float* C, std::int64_t ldc, int rows, int cols) {
    set_identity(t);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        const int n = std::clamp(cols - v * V::W, 0, V::W);
        if (r >= rows || n == 0) continue;
        if (n == V::W)
          t.c[r][v] = V::loadu(C + r * ldc + v * V::W);
        else
          t.c[r][v] = V::load_partial(C + r * ldc + v * V::W, n);
      }
  }

  // One leaf: an FMA chain over n >= 1 steps from -0.0. The first step is a plain product:
  // fma(a, b, -0.0) == round(a*b) for every a, b (including zeros, Inf, NaN, underflow), so
  // this is bit-identical to chaining from -0.0 and saves the identity moves.
  // ap is left at the step after the leaf.
  template <class A>
  [[gnu::always_inline]] static inline void leaf(Tile& t, A& ap, const float* bp, std::int64_t n) {
    R b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = V::load(bp + v * V::W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const R a = V::bcast(ap.at(r));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) t.c[r][v] = V::mul(a, b[v]);
    }
    ap.step(1);
    fma_steps(t, ap, bp + NR, n - 1);
  }

  // Steps from k of a leaf (as fma_steps, at most up to n), with `ntiles` tiles that a later
  // step of the GEMM reads (Write: writes) prefetched into L1 along the way, four lines every
  // four steps; returns the next step. Tile i's MR rows of NR floats start at tiles[i], rows
  // `ld` floats apart (NR for a slot tile in scratch, ldc for a tile of C). All at once they
  // would hold up the leaf's loads. The FMAs run in the same order; a prefetch is a hint and
  // never changes a value.
  template <bool Write, class A>
  [[gnu::always_inline]] static inline std::int64_t prefetch_along(Tile& t, A& ap,
                                                                    const float* bp,
                                                                    std::int64_t k, std::int64_t n,
                                                                    const float* const* tiles,
                                                                    int ntiles, std::int64_t ld) {
    constexpr int kRowLines = (NR + 15) / 16, kLines = MR * kRowLines, kEvery = 4;
    for (int i = 0; i < ntiles; ++i)
      for (int line = 0; line < kLines; line += kEvery) {
        for (int j = line; j < std::min(line + kEvery, kLines); ++j)
          __builtin_prefetch(tiles[i] + (j / kRowLines) * ld + (j % kRowLines) * 16, Write, 3);
        const std::int64_t s = std::min<std::int64_t>(kEvery, n - k);
        fma_steps(t, ap, bp + k * NR, s);
        k += s;
      }
    return k;
  }

  // One K panel of the canonical sum for one C tile: nleaves leaves of lengths len[] (a node of
  // the tree), each but the last followed by merges[] merges on the L1 scratch stack stk; the
  // last folds the panel's whole stack. adds: panel-level slots to fold in, newest first
  // (older subtrees). The last leaf prefetches them, then the full C tile `cnext` (if not
  // null) that a later call stores to. The result goes to `slot` (a full tile) or, if
  // slot == nullptr, to C.
  template <class A>
  [[gnu::noinline]] static void canon_panel(int nleaves, const std::int32_t* len,
                                            const std::uint8_t* merges, const float* a,
                                            std::int64_t lda, const float* bp, float* stk,
                                            const float* const* adds, int nadds, float* slot,
                                            float* C, std::int64_t ldc, int rows, int cols,
                                            const float* cnext) {
    // A panel is a node of the tree: at least one leaf (tells the compiler that t is set).
    if (nleaves < 1) __builtin_unreachable();
    Tile t;
    A ap(a, lda);
    {  // the post-order stack over the leaves of this panel
      PanelStack<A> st{stk};
      std::int64_t k0 = 0;
      for (int l = 0; l < nleaves; k0 += len[l], ++l) {
        if (l + 1 == nleaves) {
          // The last leaf prefetches the slots it folds next, then the C tile.
          const float* b = bp + k0 * NR;
          leaf(t, ap, b, 1);
          std::int64_t k = prefetch_along<false>(t, ap, b, 1, len[l], adds, nadds, NR);
          k = prefetch_along<true>(t, ap, b, k, len[l], &cnext, cnext ? 1 : 0, ldc);
          fma_steps(t, ap, b + k * NR, len[l] - k);
          break;
        }
        leaf(t, ap, bp + k0 * NR, len[l]);
        for (int c = merges[l]; c > 0; --c) add_left(t, st.pop());
        store_full(t, st.push());
      }
      while (!st.empty()) add_left(t, st.pop());
    }
    for (int i = 0; i < nadds; ++i) add_left(t, adds[i]);
    if (slot)
      store_full(t, slot);
    else
      store_c(t, C, ldc, rows, cols);
  }

  // One K panel of the single chain: continue from C (or start from -0.0), store to C;
  // prefetches the full C tile `cnext` (if not null) that a later call reads and stores.
  template <class A>
  [[gnu::noinline]] static void chain_panel(std::int64_t kl, const float* a, std::int64_t lda,
                                            const float* bp, bool first, float* C, std::int64_t ldc,
                                            int rows, int cols, const float* cnext) {
    Tile t;
    A ap(a, lda);
    std::int64_t k = first ? 1 : 0;
    if (first)
      leaf(t, ap, bp, 1);
    else
      load_c(t, C, ldc, rows, cols);
    k = prefetch_along<true>(t, ap, bp, k, kl, &cnext, cnext ? 1 : 0, ldc);
    fma_steps(t, ap, bp + k * NR, kl - k);
    store_c(t, C, ldc, rows, cols);
  }
};

// Whether row tiles of `mr` rows, kl floats each, `lda` floats apart from `base`, put no more
// than 4 lines into any 64-byte line set of a 64-set L1 (48 KiB, 12-way here), for every row
// tile of an M-row matrix: then the kernels read A's micro-panels in place and the packed B
// micro-panel streams through the other ways. Tile t's rows start at (base + t * mr * lda * 4)
// mod 4 KiB, which repeats every 4 KiB / gcd(mr * lda * 4, 4 KiB) tiles (1 for lda 256 or 768),
// so that many tiles are checked, at most 64 (a sample for strides with a longer period);
// panels move the pattern by whole lines (kc floats). A 64-byte-aligned A with lda 256 or 768
// at kl 256 gives 3 per set; lda 1024 puts all 12 rows in the same sets (copied instead).
inline bool rows_spread_l1(std::uintptr_t base, std::int64_t lda, int mr, std::int64_t M,
                           std::int64_t kl) {
  constexpr std::uintptr_t kSets = 64, kLine = 64, kPage = kSets * kLine;
  constexpr int kMaxPerSet = 4;
  const std::uintptr_t tile_bytes = static_cast<std::uintptr_t>(mr * lda) * sizeof(float);
  const std::int64_t period = static_cast<std::int64_t>(kPage / std::gcd(tile_bytes, kPage));
  const std::int64_t tiles = std::min<std::int64_t>({M / mr, period, 64});
  for (std::int64_t t = 0; t < tiles; ++t) {
    int count[kSets] = {};
    for (int r = 0; r < mr; ++r) {
      const std::uintptr_t s0 =
          base + static_cast<std::uintptr_t>((t * mr + r) * lda) * sizeof(float);
      const std::uintptr_t first = s0 / kLine, last = (s0 + kl * sizeof(float) - 1) / kLine;
      for (std::uintptr_t l = first; l <= last && l < first + kSets; ++l)
        if (++count[l % kSets] > kMaxPerSet) return false;
    }
  }
  return true;
}

// A-panel layouts: RK (row r's kc values contiguous, row stride ARS_RK: a straight copy of
// A rows when ta == N) and KR (the MR values of step k contiguous: a straight copy of A rows
// when ta == T). Both feed the same FMAs in the same order.
template <class Kern>
struct Driver {
  static constexpr int MR = Kern::MR;
  static constexpr int NR = Kern::NR;
  static constexpr int TILE = Kern::TILE;
  static constexpr std::int64_t KCMAX_RK = 512;
  static constexpr int ARS_RK = KCMAX_RK + 16;  // pad rows apart to spread L1 sets
  // The A-once order's column span, in nc blocks: its slots take that many times the Goto
  // order's memory (8: at most 4.3 MB per slot level for 264 rows at nc 512), and its A
  // block is packed once per span and K panel instead of once per column block.
  static constexpr std::int64_t kAOnceBlocks = 8;
  // Kernels of 4 and 8 rows for a block's last row tile when it has that few rows (M = 256
  // leaves 4 of AVX-512's 12, 512 leaves 8): the full tile would spend 8 or 4 rows of FMAs on
  // zero padding, 3% of 256x1024x4096. They read the same packed A layout (MR values per
  // step) and B micro-panel and run each row's leaves, merges and stores exactly as the full
  // tile does, so only speed depends on which kernel a row tile gets.
  // (Kern itself where MR is not larger: never chosen there.)
  using Kern4 = std::conditional_t<(MR > 4), Kernel<typename Kern::Vec, 4, Kern::NV>, Kern>;
  using Kern8 = std::conditional_t<(MR > 8), Kernel<typename Kern::Vec, 8, Kern::NV>, Kern>;

  // Prefetches the lines of p[0, n) into L1 (a hint: never changes a value).
  static void prefetch_l1(const float* p, std::int64_t n) {
    const auto first = reinterpret_cast<std::uintptr_t>(p) / 64;
    const auto last = reinterpret_cast<std::uintptr_t>(p + n - 1) / 64;
    for (std::uintptr_t l = first; l <= last; ++l)
      __builtin_prefetch(reinterpret_cast<const void*>(l * 64), 0, 3);
  }

  // Packs rows [i0, i0+MR) x k [pc, pc+kl) of op(A); rows past M are zero.
  static void pack_a(const GemmArgs& g, bool rk, std::int64_t i0, std::int64_t pc, std::int64_t kl,
                     float* ap) {
    const int rows = static_cast<int>(std::min<std::int64_t>(MR, g.M - i0));
    if (rk) {  // ta == N: straight row copies
      for (int r = 0; r < rows; ++r) {
        // Two rows ahead into L1 (the block's rows are already on their way to L2: NextA).
        if (r + 2 < rows) prefetch_l1(g.A + (i0 + r + 2) * g.lda + pc, kl);
        std::memcpy(ap + r * ARS_RK, g.A + (i0 + r) * g.lda + pc, kl * sizeof(float));
      }
      for (int r = rows; r < MR; ++r) std::memset(ap + r * ARS_RK, 0, kl * sizeof(float));
    } else if (g.ta == Trans::T) {  // A stored K x M: row k gives MR consecutive values
      for (std::int64_t k = 0; k < kl; ++k) {
        const float* src = g.A + (pc + k) * g.lda + i0;
        float* dst = ap + k * MR;
        if (rows == MR) {
          std::memcpy(dst, src, MR * sizeof(float));
        } else {
          for (int r = 0; r < rows; ++r) dst[r] = src[r];
          for (int r = rows; r < MR; ++r) dst[r] = 0.0f;
        }
      }
    } else {  // ta == N with a panel longer than KCMAX_RK: transposing copy
      for (int r = 0; r < MR; ++r) {
        const float* src = g.A + (i0 + r) * g.lda + pc;
        for (std::int64_t k = 0; k < kl; ++k) ap[k * MR + r] = r < rows ? src[k] : 0.0f;
      }
    }
  }

  // Packs columns [j0, j0+NR) x k [pc, pc+kl) of op(B) as [k][NR]; columns past N are zero.
  static void pack_b(const GemmArgs& g, std::int64_t j0, std::int64_t pc, std::int64_t kl,
                     float* bp) {
    const int cols = static_cast<int>(std::min<std::int64_t>(NR, g.N - j0));
    if (g.tb == Trans::N) {  // B stored K x N
      for (std::int64_t k = 0; k < kl; ++k) {
        const float* src = g.B + (pc + k) * g.ldb + j0;
        float* dst = bp + k * NR;
        if (cols == NR) {
          std::memcpy(dst, src, NR * sizeof(float));
        } else {
          for (int c = 0; c < cols; ++c) dst[c] = src[c];
          for (int c = cols; c < NR; ++c) dst[c] = 0.0f;
        }
      }
    } else {  // B stored N x K: transpose in chunks of 8 k so reads stay sequential
      constexpr std::int64_t KB = 8;
      for (std::int64_t k0 = 0; k0 < kl; k0 += KB) {
        const std::int64_t kn = std::min(KB, kl - k0);
        for (int c = 0; c < NR; ++c) {
          if (c < cols) {
            const float* src = g.B + (j0 + c) * g.ldb + pc + k0;
            for (std::int64_t k = 0; k < kn; ++k) bp[(k0 + k) * NR + c] = src[k];
          } else {
            for (std::int64_t k = 0; k < kn; ++k) bp[(k0 + k) * NR + c] = 0.0f;
          }
        }
      }
    }
  }

  // Packs op(B) columns [jc, jc+ncur) x k [pc, pc+kl) as ceil(ncur/NR) micro-panels of
  // [kl][NR], reading the source row by row (sequential, prefetcher friendly).
  static void pack_b_panel(const GemmArgs& g, std::int64_t jc, std::int64_t ncur, std::int64_t pc,
                           std::int64_t kl, float* bpack) {
    const std::int64_t ntl = ceil_div(ncur, NR);
    if (g.tb == Trans::N) {
      const std::int64_t full = ncur / NR;
      for (std::int64_t k = 0; k < kl; ++k) {
        const float* src = g.B + (pc + k) * g.ldb + jc;
        for (std::int64_t jt = 0; jt < full; ++jt)
          std::memcpy(bpack + (jt * kl + k) * NR, src + jt * NR, NR * sizeof(float));
        if (full < ntl) {
          float* dst = bpack + (full * kl + k) * NR;
          const int cols = static_cast<int>(ncur - full * NR);
          for (int c = 0; c < cols; ++c) dst[c] = src[full * NR + c];
          for (int c = cols; c < NR; ++c) dst[c] = 0.0f;
        }
      }
    } else {  // B stored N x K: row j of the source is column j of op(B)
      for (std::int64_t jt = 0; jt < ntl; ++jt) {
        float* bp = bpack + jt * kl * NR;
        using V = typename Kern::Vec;
        if constexpr (V::W >= 8) {
          // Whole W x W blocks by register transposes (the trait's: 16 x 16 on AVX-512, 8 x 8
          // on AVX2), the k tail below element-wise. Pure moves: the packed values are the same.
          constexpr int W = V::W;
          const std::int64_t kw = kl / W * W;
          if (NR % W == 0 && (jt + 1) * NR <= ncur && kw > 0) {
            for (int c0 = 0; c0 < NR; c0 += W)
              for (std::int64_t k0 = 0; k0 < kw; k0 += W)
                V::transpose(g.B + (jc + jt * NR + c0) * g.ldb + pc + k0, g.ldb, bp + k0 * NR + c0,
                             NR);
            for (int c = 0; c < NR; ++c) {
              const float* src = g.B + (jc + jt * NR + c) * g.ldb + pc;
              for (std::int64_t k = kw; k < kl; ++k) bp[k * NR + c] = src[k];
            }
            continue;
          }
        }
        for (int c = 0; c < NR; ++c) {
          const std::int64_t j = jc + jt * NR + c;
          if (j < jc + ncur) {
            const float* src = g.B + j * g.ldb + pc;
            for (std::int64_t k = 0; k < kl; ++k) bp[k * NR + c] = src[k];
          } else {
            for (std::int64_t k = 0; k < kl; ++k) bp[k * NR + c] = 0.0f;
          }
        }
      }
    }
  }

  // Packs the A micro-panels of rows [i0, i1) x k [pc, pc+kl), `astride` floats apart; with
  // `inplace` only a last, partial one (the kernels read full ones where they are).
  static void pack_a_block(const GemmArgs& g, bool rk, bool inplace, std::int64_t i0,
                           std::int64_t i1, std::int64_t pc, std::int64_t kl, float* abuf,
                           std::int64_t astride) {
    const std::int64_t tiles = ceil_div(i1 - i0, MR);
    if (inplace) {
      if ((i1 - i0) % MR != 0)
        pack_a(g, rk, i0 + (tiles - 1) * MR, pc, kl, abuf + (tiles - 1) * astride);
      return;
    }
    if (!rk && g.ta == Trans::T) {  // A stored K x M: read each source row once, in order
      const std::int64_t full = (i1 - i0) / MR;
      // Each source row is a short run of lines lda floats (1-4 KiB in the weight gradients)
      // past the previous one, which the hardware prefetchers do not follow well across
      // pages: fetch each row into L1 kAhead rows before it is copied (the pack stalled on
      // these loads: -3 to -8% per weight-gradient GEMM without this).
      constexpr std::int64_t kAhead = 8;
      for (std::int64_t k = 0; k < kl; ++k) {
        const float* src = g.A + (pc + k) * g.lda + i0;
        if (k + kAhead < kl) prefetch_l1(src + kAhead * g.lda, i1 - i0);
        for (std::int64_t t = 0; t < full; ++t)
          std::memcpy(abuf + t * astride + k * MR, src + t * MR, MR * sizeof(float));
        if (full < tiles) {
          float* dst = abuf + full * astride + k * MR;
          const int rows = static_cast<int>(i1 - i0 - full * MR);
          for (int r = 0; r < rows; ++r) dst[r] = src[full * MR + r];
          for (int r = rows; r < MR; ++r) dst[r] = 0.0f;
        }
      }
      return;
    }
    for (std::int64_t t = 0; t < tiles; ++t) pack_a(g, rk, i0 + t * MR, pc, kl, abuf + t * astride);
  }

  static void fill_neg_zero(const GemmArgs& g) {
    for (std::int64_t i = 0; i < g.M; ++i)
      for (std::int64_t j = 0; j < g.N; ++j) g.C[i * g.ldc + j] = -0.0f;
  }

  // Prefetches part `part` of `parts` of rows [r0, r1) x columns [c0, c1) of a row-major
  // matrix (the source that a later pack will read), so packing reads hit the cache.
  static void prefetch_rect(const float* base, std::int64_t ld, std::int64_t r0, std::int64_t r1,
                            std::int64_t c0, std::int64_t c1, std::int64_t part,
                            std::int64_t parts) {
    if (r1 <= r0 || c1 <= c0) return;
    const std::int64_t first = c0 / 16, lines = (c1 + 15) / 16 - first;
    const std::int64_t total = (r1 - r0) * lines;
    for (std::int64_t q = total * part / parts; q < total * (part + 1) / parts; ++q)
      __builtin_prefetch(base + (r0 + q / lines) * ld + (first + q % lines) * 16, 0, 2);
  }
  // Source of op(A) rows [i0, i1) x k [pc, pc + kl).
  static void prefetch_a(const GemmArgs& g, std::int64_t i0, std::int64_t i1, std::int64_t pc,
                         std::int64_t kl, std::int64_t part, std::int64_t parts) {
    if (g.ta == Trans::N)
      prefetch_rect(g.A, g.lda, i0, i1, pc, pc + kl, part, parts);
    else
      prefetch_rect(g.A, g.lda, pc, pc + kl, i0, i1, part, parts);
  }
  // Source of op(B) k [pc, pc + kl) x columns [j0, j1).
  static void prefetch_b(const GemmArgs& g, std::int64_t pc, std::int64_t kl, std::int64_t j0,
                         std::int64_t j1, std::int64_t part, std::int64_t parts) {
    if (g.tb == Trans::N)
      prefetch_rect(g.B, g.ldb, pc, pc + kl, j0, j1, part, parts);
    else
      prefetch_rect(g.B, g.ldb, j0, j1, pc, pc + kl, part, parts);
  }

  struct Plan {
    bool canonical;
    std::int64_t kmax, npanels, nc, mc, bfull, spill;
    int stack, levels;  // intra-panel stack depth, panel-level slot count
    bool rk;
    bool inplace;  // rk, and full micro-panels are read from op(A) itself (rows_spread)
    std::int64_t cpf;  // calls ahead whose C tile a kernel prefetches (GemmTuning::c_prefetch)
    const KPanel* panels;
    const std::int32_t* leaf_len;
    const std::uint8_t* leaf_merges;
    std::int64_t pc(std::int64_t p) const { return panels[p].pc; }
    std::int64_t kl(std::int64_t p) const { return panels[p].kl; }
  };

  // Whether MR rows of op(A) = A (ta == N), kl floats each, are read in place instead of
  // copied into the RK layout (rows_spread_l1 above). Only speed depends on this choice: the
  // kernels read the same values in the same order either way.
  static bool rows_spread(const GemmArgs& g, std::int64_t kl) {
    return rows_spread_l1(reinterpret_cast<std::uintptr_t>(g.A), g.lda, MR, g.M, kl);
  }

  // Where the next A block to pack comes from (for prefetching); rows empty = none.
  struct NextA {
    std::int64_t r0 = 0, r1 = 0, pc = 0, kl = 0;
  };
  struct NextB {
    std::int64_t pc = 0, kl = 0, j0 = 0, j1 = 0, part = 0, parts = 1;
  };

  // The C tile of call `call` (row tile call / ntl of the block at row ic, column tile
  // call % ntl of the column block at jc) for the kernels to prefetch: null where pl.cpf == 0,
  // the call does not touch C (canonical: a panel but the last), lies past the block's calls,
  // or is a partial tile.
  static const float* next_c_tile(const GemmArgs& g, const Plan& pl, std::int64_t ic,
                                  std::int64_t i1, std::int64_t jc, std::int64_t j1,
                                  std::int64_t ntl, std::int64_t call, std::int64_t calls,
                                  bool last) {
    if (pl.cpf == 0 || call >= calls || (pl.canonical && !last)) return nullptr;
    const std::int64_t r0 = ic + call / ntl * MR, c0 = jc + call % ntl * NR;
    if (r0 + MR > i1 || c0 + NR > j1) return nullptr;
    return g.C + r0 * g.ldc + c0;
  }

  // The canonical counter's slot tiles: `levels` arrays of `level` floats; in each, the tile of
  // row tile `it` (of the rectangle, or of the block in the B-resident order) and column tile
  // jt of a column block at base + (it * width + jt0 + jt) * TILE, where jt0 is the block's
  // first column tile in a slot row of `width` tiles (jt0 = 0 and width = nc / NR where the
  // slots hold one column block: the Goto and B-resident orders).
  struct Slots {
    float* base = nullptr;
    std::size_t level = 0;
    std::int64_t width = 0, jt0 = 0;
  };

  // Packs the A block rows [ic, ic1) of panel p (unless pack_a is false: ablock already holds
  // it) and runs the micro-kernel on its tiles against the packed B micro-panels bp0 (ntl of
  // them, kl x NR each, `bstride` apart).
  static void run_block(const GemmArgs& g, const Plan& pl, std::int64_t i0, std::int64_t i1,
                        std::int64_t ic, std::int64_t ic1, std::int64_t jc, std::int64_t j1,
                        std::int64_t ntl, std::int64_t p, const float* bp0, std::int64_t bstride,
                        float* ablock, std::int64_t astride, bool pack_a, float* stk,
                        const Slots& sl, const NextA& na, const NextB& nb) {
    const KPanel& pan = pl.panels[p];
    const std::int64_t pc = pan.pc, kl = pan.kl;
    const bool last = p == pl.npanels - 1;
    // Slots to fold in, newest first (the panel-level merges that follow this panel), and the
    // slot its result goes to.
    const int nadds = pl.canonical ? pan.adds : 0;
    const int dst_level = pan.depth - nadds;
    if (pack_a) pack_a_block(g, pl.rk, pl.inplace, ic, ic1, pc, kl, ablock, astride);
    const std::int64_t btiles = ceil_div(ic1 - ic, MR);
    const std::int64_t calls = btiles * ntl;
    for (std::int64_t bt = 0; bt < btiles; ++bt) {
      const std::int64_t it = (ic - i0) / MR + bt;
      const std::int64_t r0 = ic + bt * MR;
      const int rows = static_cast<int>(std::min<std::int64_t>(MR, i1 - r0));
      const float* ap = ablock + bt * astride;
      for (std::int64_t jt = 0; jt < ntl; ++jt) {
        const std::int64_t call = bt * ntl + jt;
        if (na.r1 > na.r0) prefetch_a(g, na.r0, na.r1, na.pc, na.kl, call, calls);
        if (nb.j1 > nb.j0)
          prefetch_b(g, nb.pc, nb.kl, nb.j0, nb.j1, nb.part * calls + call, nb.parts * calls);
        const std::int64_t c0 = jc + jt * NR;
        const int cols = static_cast<int>(std::min<std::int64_t>(NR, j1 - c0));
        const float* bp = bp0 + jt * bstride;
        float* cdst = g.C + r0 * g.ldc + c0;
        const float* cnext = next_c_tile(g, pl, ic, i1, jc, j1, ntl, call + pl.cpf, calls, last);
        const auto kernel = [&]<class K, class A>(const float* a, std::int64_t lda) {
          if (pl.canonical) {
            const std::size_t tile_off =
                static_cast<std::size_t>((it * sl.width + sl.jt0 + jt) * TILE);
            const float* tadds[64];
            for (int i = 0; i < nadds; ++i)
              tadds[i] = sl.base + (pan.depth - 1 - i) * sl.level + tile_off;
            float* slot = last ? nullptr : sl.base + dst_level * sl.level + tile_off;
            K::template canon_panel<A>(pan.nleaves, pl.leaf_len + pan.leaf0,
                                       pl.leaf_merges + pan.leaf0, a, lda, bp, stk, tadds,
                                       nadds, slot, cdst, g.ldc, rows, cols, cnext);
          } else {
            K::template chain_panel<A>(kl, a, lda, bp, p == 0, cdst, g.ldc, rows, cols, cnext);
          }
        };
        // The packed A micro-panel, read by kernel K (any row count up to MR).
        const auto packed = [&]<class K>() {
          if (pl.rk)
            kernel.template operator()<K, typename K::template APacked<ARS_RK, 1>>(ap, 0);
          else
            kernel.template operator()<K, typename K::template APacked<1, MR>>(ap, 0);
        };
        if (pl.inplace && rows == MR)
          kernel.template operator()<Kern, typename Kern::AInPlace>(g.A + r0 * g.lda + pc, g.lda);
        else if (MR > 4 && rows <= 4)
          packed.template operator()<Kern4>();
        else if (MR > 8 && rows <= 8)
          packed.template operator()<Kern8>();
        else
          packed.template operator()<Kern>();
      }
    }
  }

  // A team of threads that share the packed op(B): each member packs every nth-th B
  // micro-panel into `bshared` and waits at a barrier before the kernels read them (and
  // again before the buffer is overwritten). bshared == nullptr (or nth == 1): each member
  // packs all of op(B) into its own buffer, no barriers. Packing is a plain copy, so who
  // packs which micro-panel never changes a bit.
  // deal (optional, one counter per column block, zeroed): the team shares the whole row range
  // and each member takes the next mc-row block from the column block's counter when it is
  // free, so a member slowed down (a busy core) gets fewer blocks instead of holding the others
  // at the next barrier. Used only where a row block carries no state into another (one K
  // panel, or the B-resident order, whose counter slots are per block).
  struct Team {
    int tid = 0, nth = 1;
    float* bshared = nullptr;
    std::atomic<std::int64_t>* deal = nullptr;
    void barrier() const {
      if (nth > 1 && bshared) {
#pragma omp barrier
      }
    }
    bool mine(std::int64_t jt) const {
      return !bshared || jt % nth == tid;
    }
    // Calls f(ic, ic1) for this member's mc-row blocks of [i0, i1) in column block `cb`.
    template <class F>
    void for_blocks(std::int64_t cb, std::int64_t i0, std::int64_t i1, std::int64_t mc,
                    F&& f) const {
      if (!deal) {
        for (std::int64_t ic = i0; ic < i1; ic += mc) f(ic, std::min(ic + mc, i1));
        return;
      }
      const std::int64_t blocks = ceil_div(i1 - i0, mc);
      for (std::int64_t b = deal[cb].fetch_add(1, std::memory_order_relaxed); b < blocks;
           b = deal[cb].fetch_add(1, std::memory_order_relaxed))
        f(i0 + b * mc, std::min(i0 + (b + 1) * mc, i1));
    }
  };
  // Whether a team of `threads` deals the row blocks of this GEMM (see Team::deal): no state
  // crosses row blocks, and there are at least two blocks per member to balance.
  static bool dealable(const GemmArgs& g, const Plan& pl, int threads, std::int64_t nc) {
    const std::int64_t mc = std::min(pl.mc, ceil_div(g.M, MR) * MR);
    return (pl.npanels == 1 || resident(g, pl, nc)) && ceil_div(g.M, mc) >= 2 * threads;
  }
  // Whether the B-resident order runs on column blocks of nc (run_rect): K has several panels
  // and the packed op(B) block has at most pl.bfull floats, or 4 times that where the Goto
  // order's slots would spill (GemmTuning::slot_spill_floats). A function of the whole GEMM,
  // not of a thread's rectangle, so that every member of a team takes the same order.
  static bool resident(const GemmArgs& g, const Plan& pl, std::int64_t nc) {
    if (pl.npanels <= 1) return false;
    const bool spills = pl.spill > 0 && pl.levels * g.M * nc > pl.spill;
    return g.K * nc <= (spills ? 4 : 1) * pl.bfull;
  }
  static std::size_t bpack_floats(const GemmArgs& g, const Plan& pl, std::int64_t nc) {
    return static_cast<std::size_t>((resident(g, pl, nc) ? g.K : pl.kmax) * nc);
  }
  // Columns per B panel on columns [j0, j1): pl.nc, or all of them where they are at most
  // 1.5 * pl.nc, so that N = 768 runs as one block instead of 512 + 256 and each A block is
  // packed once instead of twice (GPT-2 small's d_model; -0.2% to +4% on its microbatch-3
  // shapes at 1 thread, docs/benchmarks.md, GEMM section, "One column block for N = 768").
  static std::int64_t nc_for(const Plan& pl, std::int64_t j0, std::int64_t j1) {
    const std::int64_t width = ceil_div(j1 - j0, NR) * NR;
    return width <= pl.nc + pl.nc / 2 ? width : pl.nc;
  }

  // The sequential algorithm on the C rectangle rows [i0, i1) x columns [j0, j1), i0 and j0
  // multiples of MR and NR; op(B) is packed together with `team` (see Team). Three loop orders:
  //  * B resident (per column block of nc, when K has several panels and the packed op(B)[K,
  //    block] fits pl.bfull floats, or 4 times that where the Goto order's slots would spill,
  //    see resident()): pack the whole block of B once, then for each mc-row block
  //    run all K panels in turn, so the block's counter slots (or C partial chains) stay in L2;
  //  * A once (a thread that packs its own op(B), all rows in one mc block, several column
  //    blocks, K not resident):
  //    per span of up to kAOnceBlocks column blocks, for each K panel pack the A block once,
  //    then for each column block pack its B panel and run the kernels; the slots hold the
  //    span's tiles (the A block would otherwise be packed again for each column block:
  //    M = 256 of a weight gradient);
  //  * otherwise (Goto order, per column block): for each K panel pack the B panel (kl x nc,
  //    L2), then for each mc-row block pack its A micro-panels and run the kernels.
  // Each way the A micro-panel sits in L1 across a row of tiles, B micro-panels stream from
  // L2, and the sources of the next packs are prefetched while the kernels run. Which order
  // runs changes speed only: each C element's panels run in K's order whichever it is.
  static void run_rect(const GemmArgs& g, const Plan& pl, std::int64_t i0, std::int64_t i1,
                       std::int64_t j0, std::int64_t j1, const Team& team = Team{}) {
    if (i1 <= i0 || j1 <= j0) return;
    const RectLayout r = rect_layout(g, pl, i0, i1, j0, j1, team.bshared, team.deal);
    ThreadScratch& ts = thread_scratch();
    Scratch &abuf = ts.abuf, &bbuf = ts.bbuf, &kbuf = ts.kbuf, &sbuf = ts.sbuf;
    Work w;
    w.ablock = abuf.get(static_cast<std::size_t>(r.need.ablock));
    w.astride = r.astride;
    w.bpack = team.bshared ? team.bshared : bbuf.get(static_cast<std::size_t>(r.need.bpack));
    // The intra-panel stack sits at 2 KiB past a 4 KiB boundary: packed B panels start at
    // 4 KiB multiples, and a stack store sharing the low 12 address bits with the next leaf's
    // first B loads would stall them (4K aliasing).
    float* stk = kbuf.get(static_cast<std::size_t>(r.need.stack));
    w.stk = stk + ((2048 - reinterpret_cast<std::uintptr_t>(stk) % 4096 + 4096) % 4096) /
                      sizeof(float);
    w.slots.width = r.slot_width;
    w.slots.level = static_cast<std::size_t>(r.slot_level);
    w.slots.base = pl.levels ? sbuf.get(static_cast<std::size_t>(r.need.slots)) : nullptr;
    const std::int64_t nc = r.nc, mc = r.mc;
    if (r.a_once) {
      for (std::int64_t js = j0; js < j1; js += kAOnceBlocks * nc)
        run_a_once(g, pl, i0, i1, js, std::min(js + kAOnceBlocks * nc, j1), nc, w);
      return;
    }
    for (std::int64_t jc = j0; jc < j1; jc += nc) {
      if (r.resident)
        run_b_resident(g, pl, i0, i1, j0, j1, jc, nc, mc, team, w);
      else
        run_goto(g, pl, i0, i1, j0, j1, jc, nc, mc, team, w);
    }
  }

  // run_rect's loop order and blocking on C rows [i0, i1) x columns [j0, j1), and the floats
  // its grow-only buffers need (one source for run_rect and scratch()). bshared: op(B) is the
  // team's shared buffer; deal: the team deals row blocks out.
  struct RectLayout {
    std::int64_t nc = 0, mc = 0, astride = 0, slot_width = 0, slot_level = 0;
    bool resident = false, a_once = false;
    GemmScratch need;  // shared_b stays 0 here: the team's buffer is run()'s
  };
  static RectLayout rect_layout(const GemmArgs& g, const Plan& pl, std::int64_t i0,
                                std::int64_t i1, std::int64_t j0, std::int64_t j1, bool bshared,
                                bool deal) {
    RectLayout r;
    const std::int64_t mtiles = ceil_div(i1 - i0, MR);
    r.nc = nc_for(pl, j0, j1);
    r.mc = std::min(pl.mc, mtiles * MR);
    // KR micro-panels sit kmax * MR + 16 floats apart: at a multiple of 4 KiB apart, the
    // pack's row-by-row writes to all of them would land in one L1 set.
    r.astride = pl.rk ? MR * ARS_RK : pl.kmax * MR + 16;
    r.resident = resident(g, pl, r.nc);
    r.a_once = !r.resident && !bshared && !deal && mtiles * MR <= r.mc && j1 - j0 > r.nc;
    // A once: the slots span up to kAOnceBlocks column blocks (that many times the Goto
    // order's), so the columns run in spans of that many blocks.
    r.slot_width =
        r.a_once ? ceil_div(std::min(j1 - j0, kAOnceBlocks * r.nc), NR) : r.nc / NR;
    r.slot_level = (r.resident ? ceil_div(r.mc, MR) : mtiles) * r.slot_width * TILE;
    r.need.ablock = r.astride * (r.mc / MR);
    r.need.bpack = bshared ? 0 : static_cast<std::int64_t>(bpack_floats(g, pl, r.nc));
    r.need.stack = (pl.stack + 2) * TILE + 2048;
    r.need.slots = pl.levels * r.slot_level;
    return r;
  }

  // run_rect's buffers: the packed A block, the packed B, the intra-panel stack, the slots.
  struct Work {
    float* ablock = nullptr;
    std::int64_t astride = 0;
    float* bpack = nullptr;
    float* stk = nullptr;
    Slots slots;
  };

  // Packs op(B) columns [jc, jc + ncur) x k [pc, pc + kl): one member's share of the team's
  // micro-panels, `stride` floats apart from bpack (nth == 1: all of them).
  static void pack_b_share(const GemmArgs& g, const Team& team, std::int64_t jc,
                           std::int64_t ncur, std::int64_t pc, std::int64_t kl, float* bpack,
                           std::int64_t stride) {
    if (!team.bshared && stride == kl * NR) return pack_b_panel(g, jc, ncur, pc, kl, bpack);
    for (std::int64_t jt = 0; jt < ceil_div(ncur, NR); ++jt)
      if (team.mine(jt))
        pack_b_panel(g, jc + jt * NR, std::min<std::int64_t>(NR, ncur - jt * NR), pc, kl,
                     bpack + jt * stride);
  }

  // The B-resident order on the column block at jc (run_rect).
  static void run_b_resident(const GemmArgs& g, const Plan& pl, std::int64_t i0, std::int64_t i1,
                             std::int64_t j0, std::int64_t j1, std::int64_t jc, std::int64_t nc,
                             std::int64_t mc, const Team& team, const Work& w) {
    const std::int64_t ncur = std::min(nc, j1 - jc), ntl = ceil_div(ncur, NR);
    // B micro-panel jt of panel p lives at bpack + (jt * K + pc) * NR.
    if (jc != j0) team.barrier();  // everyone is done reading the previous block
    for (std::int64_t p = 0; p < pl.npanels; ++p)
      pack_b_share(g, team, jc, ncur, pl.pc(p), pl.kl(p), w.bpack + pl.pc(p) * NR, g.K * NR);
    team.barrier();
    team.for_blocks((jc - j0) / nc, i0, i1, mc, [&](std::int64_t ic, std::int64_t ic1) {
      for (std::int64_t p = 0; p < pl.npanels; ++p) {
        NextA na;
        if (p + 1 < pl.npanels)
          na = {ic, ic1, pl.pc(p + 1), pl.kl(p + 1)};
        else if (ic1 < i1)
          na = {ic1, std::min(ic1 + mc, i1), 0, pl.kl(0)};
        // Slots are per block here: tile index relative to this block.
        run_block(g, pl, ic, ic1, ic, ic1, jc, j1, ntl, p, w.bpack + pl.pc(p) * NR, g.K * NR,
                  w.ablock, w.astride, true, w.stk, w.slots, na, NextB{});
      }
    });
  }

  // The Goto order on the column block at jc (run_rect).
  static void run_goto(const GemmArgs& g, const Plan& pl, std::int64_t i0, std::int64_t i1,
                       std::int64_t j0, std::int64_t j1, std::int64_t jc, std::int64_t nc,
                       std::int64_t mc, const Team& team, const Work& w) {
    const std::int64_t ncur = std::min(nc, j1 - jc), ntl = ceil_div(ncur, NR);
    for (std::int64_t p = 0; p < pl.npanels; ++p) {
      const std::int64_t pc = pl.pc(p), kl = pl.kl(p);
      const bool last = p == pl.npanels - 1;
      if (jc != j0 || p != 0) team.barrier();  // everyone is done reading the last panel
      pack_b_share(g, team, jc, ncur, pc, kl, w.bpack, kl * NR);
      team.barrier();
      // What the next pack_b_panel will read: the next panel, or the next column block's.
      NextB nb;
      nb.parts = ceil_div(i1 - i0, mc);
      if (!last)
        nb.pc = pl.pc(p + 1), nb.kl = pl.kl(p + 1), nb.j0 = jc,
        nb.j1 = j1 < jc + nc ? j1 : jc + nc;
      else if (jc + nc < j1)
        nb.pc = 0, nb.kl = pl.kl(0), nb.j0 = jc + nc, nb.j1 = std::min(jc + 2 * nc, j1);
      team.for_blocks((jc - j0) / nc, i0, i1, mc, [&](std::int64_t ic, std::int64_t ic1) {
        NextA na;
        if (ic1 < i1)
          na = {ic1, std::min(ic1 + mc, i1), pc, kl};
        else if (!last)
          na = {i0, std::min(i0 + mc, i1), pl.pc(p + 1), pl.kl(p + 1)};
        else if (jc + nc < j1)
          na = {i0, std::min(i0 + mc, i1), 0, pl.kl(0)};
        nb.part = (ic - i0) / mc;
        run_block(g, pl, i0, i1, ic, ic1, jc, j1, ntl, p, w.bpack, kl * NR, w.ablock, w.astride,
                  true, w.stk, w.slots, na, nb);
      });
    }
  }

  // The A-once order (run_rect) on columns [j0, j1): one thread, rows [i0, i1) in one block.
  static void run_a_once(const GemmArgs& g, const Plan& pl, std::int64_t i0, std::int64_t i1,
                         std::int64_t j0, std::int64_t j1, std::int64_t nc, Work w) {
    for (std::int64_t p = 0; p < pl.npanels; ++p) {
      const std::int64_t pc = pl.pc(p), kl = pl.kl(p);
      for (std::int64_t jc = j0; jc < j1; jc += nc) {
        const std::int64_t ncur = std::min(nc, j1 - jc);
        const bool last_block = jc + nc >= j1;
        pack_b_panel(g, jc, ncur, pc, kl, w.bpack);
        // What the next packs read: this panel's next B block, or the next panel's first B
        // block and its A block.
        NextB nb;
        NextA na;
        if (!last_block)
          nb.pc = pc, nb.kl = kl, nb.j0 = jc + nc, nb.j1 = std::min(jc + 2 * nc, j1);
        else if (p + 1 < pl.npanels)
          nb.pc = pl.pc(p + 1), nb.kl = pl.kl(p + 1), nb.j0 = j0, nb.j1 = std::min(j0 + nc, j1),
          na = {i0, i1, pl.pc(p + 1), pl.kl(p + 1)};
        w.slots.jt0 = (jc - j0) / NR;
        run_block(g, pl, i0, i1, i0, i1, jc, j1, ceil_div(ncur, NR), p, w.bpack, kl * NR,
                  w.ablock, w.astride, jc == j0, w.stk, w.slots, na, nb);
      }
    }
  }

  // Threads split C into rectangles (never K) and run the sequential algorithm on each. The
  // split is along M when N <= M (each thread packs the whole op(B) for itself, or, as
  // GemmTuning::shared_b says, the team packs it once into a shared buffer, each thread a
  // share of its micro-panels, with a barrier around each pack) and along N otherwise (each
  // thread packs its own A blocks).
  static void run(const GemmArgs& g, const GemmTuning& tun, bool canonical) {
    if (g.M == 0 || g.N == 0) return;
    if (g.K == 0) return fill_neg_zero(g);
    const Plan pl = make_plan(g, tun, canonical);
    const Split sp = split(g, tun, pl);
    if (sp.threads <= 1) return run_rect(g, pl, 0, g.M, 0, g.N);
    std::atomic<std::int64_t> counters[64];
    float* bshared = sp.share ? thread_scratch().team_b.get(bpack_floats(g, pl, sp.nc)) : nullptr;
    if (sp.deal)
      for (std::int64_t c = 0; c < sp.cblocks; ++c)
        counters[c].store(0, std::memory_order_relaxed);
#pragma omp parallel num_threads(sp.threads)
    {
      const int tid = omp_get_thread_num(), nth = omp_get_num_threads();
      const Rect rc = sp.rect(g, tid, nth);
      run_rect(g, pl, rc.i0, rc.i1, rc.j0, rc.j1,
               sp.split_m ? Team{tid, nth, bshared, sp.deal ? counters : nullptr} : Team{});
    }
  }

  // The floats each thread's grow-only buffers need for run(g, tun, canonical), by OpenMP
  // thread number (one entry where one thread runs it; the caller's, entry 0, also holds the
  // team's shared op(B)).
  static std::vector<GemmScratch> scratch(const GemmArgs& g, const GemmTuning& tun,
                                          bool canonical) {
    std::vector<GemmScratch> out;
    if (g.M == 0 || g.N == 0 || g.K == 0) return out;
    const Plan pl = make_plan(g, tun, canonical);
    const Split sp = split(g, tun, pl);
    for (int tid = 0; tid < std::max(1, sp.threads); ++tid) {
      const Rect rc = sp.threads <= 1 ? Rect{0, g.M, 0, g.N} : sp.rect(g, tid, sp.threads);
      out.push_back(rc.i1 > rc.i0 && rc.j1 > rc.j0
                        ? rect_layout(g, pl, rc.i0, rc.i1, rc.j0, rc.j1,
                                      sp.split_m && sp.share, sp.split_m && sp.deal)
                              .need
                        : GemmScratch{});
    }
    if (sp.threads > 1 && sp.share)
      out[0].shared_b = static_cast<std::int64_t>(bpack_floats(g, pl, sp.nc));
    return out;
  }

  static Plan make_plan(const GemmArgs& g, const GemmTuning& tun, bool canonical) {
    Plan pl{};
    pl.canonical = canonical;
    const KPlan& kp = *g.kplan;
    pl.panels = kp.panels.data();
    pl.leaf_len = kp.leaf_len.data();
    pl.leaf_merges = kp.leaf_merges.data();
    pl.npanels = static_cast<std::int64_t>(kp.panels.size());
    pl.kmax = kp.kmax;
    pl.stack = kp.stack;
    pl.levels = kp.levels;
    pl.nc = std::max<std::int64_t>(NR, tun.nc / NR * NR);
    pl.mc = std::max<std::int64_t>(MR, tun.mc / MR * MR);
    pl.bfull = tun.b_resident_floats;
    pl.spill = pl.canonical ? tun.slot_spill_floats : 0;
    pl.rk = g.ta == Trans::N && pl.kmax <= KCMAX_RK;
    pl.inplace = pl.rk && tun.a_in_place && rows_spread(g, pl.kmax);
    pl.cpf = tun.c_prefetch;
    return pl;
  }

  // How run() splits C over its threads. Split along M: every thread needs all of op(B).
  // Where no state crosses row blocks the team deals the row blocks out as members get free;
  // op(B) is packed once, together, into a shared buffer where GemmTuning::shared_b says so,
  // else by each member for itself.
  struct Rect {
    std::int64_t i0, i1, j0, j1;
  };
  struct Split {
    int threads = 1;
    bool split_m = false, deal = false, share = false;
    std::int64_t units = 0, nc = 0, cblocks = 0;
    Rect rect(const GemmArgs& g, int tid, int nth) const {  // member tid's rectangle
      const std::int64_t u0 = units * tid / nth, u1 = units * (tid + 1) / nth;
      if (deal) return {0, g.M, 0, g.N};
      if (split_m) return {u0 * MR, std::min(g.M, u1 * MR), 0, g.N};
      return {0, g.M, u0 * NR, std::min(g.N, u1 * NR)};
    }
  };
  static Split split(const GemmArgs& g, const GemmTuning& tun, const Plan& pl) {
    Split sp;
    const std::int64_t mtiles = ceil_div(g.M, MR), ntiles = ceil_div(g.N, NR);
    sp.split_m = g.N <= g.M ? mtiles >= 2 : ntiles < 2;
    sp.units = sp.split_m ? mtiles : ntiles;
    sp.threads = static_cast<int>(std::min<std::int64_t>(g.threads, sp.units));
    if (sp.threads <= 1) return sp;
    sp.nc = nc_for(pl, 0, g.N);
    sp.cblocks = ceil_div(g.N, sp.nc);
    sp.deal = sp.split_m && dealable(g, pl, sp.threads, sp.nc) && sp.cblocks <= 64;
    sp.share = sp.split_m && (tun.shared_b == 2 || (tun.shared_b == 1 && sp.deal));
    return sp;
  }
};

}  // namespace
}  // namespace lockstep::gemm_detail

// Defines canonical_SUFFIX and chain_SUFFIX over trait V with an MR x (NV * V::W) register tile
// (used once per gemm*.cpp, inside namespace lockstep::gemm_detail).
#define LOCKSTEP_GEMM_DEFINE(SUFFIX, V, MR, NV)                                       \
  void canonical_##SUFFIX(const GemmArgs& g, const GemmTuning& t) {                   \
    Driver<Kernel<V, MR, NV>>::run(g, t, true);                                       \
  }                                                                                   \
  void chain_##SUFFIX(const GemmArgs& g, const GemmTuning& t) {                       \
    Driver<Kernel<V, MR, NV>>::run(g, t, false);                                      \
  }                                                                                   \
  std::vector<GemmScratch> scratch_##SUFFIX(const GemmArgs& g, const GemmTuning& t,   \
                                            bool canonical) {                         \
    return Driver<Kernel<V, MR, NV>>::scratch(g, t, canonical);                       \
  }
