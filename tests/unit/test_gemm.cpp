// Bitwise tests of the GEMMs (runtime/gemm.hpp): canonical == the literal scalar reference on
// every ISA path for many shapes, block sizes, transpositions, leading dimensions and special
// values; canonical bits independent of M, N, threads, tiling and ISA; K sharded into aligned
// subtrees + tree_sum == unsplit; chain == a literal single FMA chain; vendor GEMMs within
// tolerance of float64; argument errors. Bitwise claims compare bits (memcmp), never tolerances.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "runtime/aligned_vector.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/gemm.hpp"
#include "runtime/tensor.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::bits;
using lockstep::testing::from_bits;
using lockstep::testing::same_bits;
using lockstep::testing::splitmix64;

namespace {

// x86's default NaN: the only NaN the inputs use, so NaN results have one bit pattern no
// matter which operand an instruction propagates.
const float kNaN = from_bits(0xFFC00000u);

enum class Fill { normal, wide, special };

// n floats. normal: O(1) values of both signs over ~12 binades with a few signed zeros.
// wide: magnitudes 2^-30..2^30 plus subnormals. special: wide plus +-Inf and NaN, rarely.
std::vector<float> gen(std::size_t n, std::uint64_t seed, Fill fill) {
  std::vector<float> v(n);
  std::uint64_t s = seed * 0x51ED27u + 17;
  for (auto& x : v) {
    const std::uint64_t r = splitmix64(s);
    const int kind = static_cast<int>(r % 97);
    const float sign = ((r >> 63) & 1) ? -1.0f : 1.0f;
    const float mant = static_cast<float>((r >> 8) & 0xFFFFFF) / 16777216.0f + 0.5f;
    if (kind == 0) {
      x = 0.0f;
    } else if (kind == 1) {
      x = -0.0f;
    } else if (fill != Fill::normal && kind == 2) {
      x = sign * from_bits(static_cast<std::uint32_t>((r >> 20) & 0x7FFFFF) | 1u);  // subnormal
    } else if (fill == Fill::special && kind == 3 && ((r >> 30) & 7) == 0) {
      x = sign * std::numeric_limits<float>::infinity();
    } else if (fill == Fill::special && kind == 4 && ((r >> 30) & 7) == 0) {
      x = kNaN;
    } else {
      const int span = fill == Fill::normal ? 12 : 60;
      const int exp = static_cast<int>((r >> 40) % span) - span / 2;
      x = std::ldexp(mant, exp) * sign;
    }
  }
  return v;
}

struct Problem {
  Trans ta = Trans::N, tb = Trans::N;
  std::int64_t M = 1, N = 1, K = 1, lda = 1, ldb = 1, ldc = 1;
  std::vector<float> A, B;
};

Problem make_problem(Trans ta, Trans tb, std::int64_t M, std::int64_t N, std::int64_t K,
                     std::int64_t pad, std::uint64_t seed, Fill fill) {
  Problem p;
  p.ta = ta, p.tb = tb, p.M = M, p.N = N, p.K = K;
  const std::int64_t arows = ta == Trans::N ? M : K, acols = ta == Trans::N ? K : M;
  const std::int64_t brows = tb == Trans::N ? K : N, bcols = tb == Trans::N ? N : K;
  p.lda = std::max<std::int64_t>(1, acols + pad);
  p.ldb = std::max<std::int64_t>(1, bcols + (pad * 3) % 7);
  p.ldc = std::max<std::int64_t>(1, N + (pad * 5) % 4);
  p.A = gen(static_cast<std::size_t>(std::max<std::int64_t>(1, arows * p.lda)), seed, fill);
  p.B = gen(static_cast<std::size_t>(std::max<std::int64_t>(1, brows * p.ldb)), seed + 1000, fill);
  return p;
}

constexpr float kSentinel = 12345.678f;

// Runs one GEMM into a fresh C (padding columns hold a sentinel that must survive). a: op(A)'s
// storage if not p.A's (the same values elsewhere, e.g. on a 64-byte boundary).
std::vector<float> run(const KernelCtx& ctx, GemmImpl impl, const Problem& p,
                       const float* a = nullptr) {
  std::vector<float> C(static_cast<std::size_t>(std::max<std::int64_t>(1, p.M * p.ldc)), kSentinel);
  gemm(ctx, impl, p.ta, p.tb, p.M, p.N, p.K, a ? a : p.A.data(), p.lda, p.B.data(), p.ldb, C.data(),
       p.ldc);
  for (std::int64_t i = 0; i < p.M; ++i)
    for (std::int64_t j = p.N; j < p.ldc; ++j)
      if (bits(C[i * p.ldc + j]) != bits(kSentinel)) FAIL("GEMM wrote past column N");
  return C;
}

// Compact M x N copy of C (drops the ldc padding).
std::vector<float> compact(const std::vector<float>& C, std::int64_t M, std::int64_t N,
                           std::int64_t ldc) {
  std::vector<float> out(static_cast<std::size_t>(M * N));
  for (std::int64_t i = 0; i < M; ++i)
    for (std::int64_t j = 0; j < N; ++j) out[i * N + j] = C[i * ldc + j];
  return out;
}

std::string first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (bits(a[i]) != bits(b[i]))
      return "index " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
  return a.size() == b.size() ? "none" : "sizes differ";
}

float a_at(const Problem& p, std::int64_t i, std::int64_t k) {
  return p.ta == Trans::N ? p.A[i * p.lda + k] : p.A[k * p.lda + i];
}
float b_at(const Problem& p, std::int64_t k, std::int64_t j) {
  return p.tb == Trans::N ? p.B[k * p.ldb + j] : p.B[j * p.ldb + k];
}

// The chain contract, literally: per C element one FMA chain over all of K from -0.0 (M x N).
std::vector<float> literal_chain(const Problem& p) {
  std::vector<float> out(static_cast<std::size_t>(p.M * p.N));
  for (std::int64_t i = 0; i < p.M; ++i)
    for (std::int64_t j = 0; j < p.N; ++j) {
      float acc = -0.0f;
      for (std::int64_t k = 0; k < p.K; ++k) acc = std::fma(a_at(p, i, k), b_at(p, k, j), acc);
      out[i * p.N + j] = acc;
    }
  return out;
}

const char* tname(Trans t) {
  return t == Trans::N ? "N" : "T";
}

struct TuningGuard {
  GemmTuning saved = gemm_tuning();
  ~TuningGuard() { set_gemm_tuning(saved); }
};

const std::int64_t kMN[] = {1, 2, 3, 5, 13, 17, 31, 33, 47, 64, 100};
const std::int64_t kK[] = {1, 5, 63, 64, 65, 127, 128, 129, 200, 513, 1030};
const Trans kTrans[] = {Trans::N, Trans::T};

}  // namespace

TEST_CASE("canonical GEMM equals the literal reference bitwise on every ISA path") {
  std::uint64_t s = 42;
  int cases = 0;
  for (int B : {1, 7, 16, 64, 128}) {
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        for (int rep = 0; rep < 10; ++rep) {
          const std::int64_t M = kMN[splitmix64(s) % 11], N = kMN[splitmix64(s) % 11];
          std::int64_t K = kK[splitmix64(s) % 11];
          if (B == 1 && K > 200) K = 129;  // keep the literal reference quick
          const std::int64_t pad = static_cast<std::int64_t>(splitmix64(s) % 6);
          const Fill fill = static_cast<Fill>(rep % 3);
          const Problem p = make_problem(ta, tb, M, N, K, pad, splitmix64(s), fill);
          const int threads = 1 + static_cast<int>(splitmix64(s) % 3);
          const auto ref = run(KernelCtx{Isa::scalar, 1, B}, GemmImpl::reference, p);
          for (Isa isa : supported_isas()) {
            INFO("isa=" << isa_name(isa) << " B=" << B << " " << tname(ta) << tname(tb)
                        << " M=" << M << " N=" << N << " K=" << K << " pad=" << pad
                        << " threads=" << threads << " fill=" << rep % 3);
            const auto got = run(KernelCtx{isa, threads, B}, GemmImpl::canonical, p);
            INFO("first difference: " << first_diff(got, ref));
            REQUIRE(same_bits(got, ref));
            ++cases;
          }
        }
      }
    }
  }
  CHECK(cases >= 200);
}

TEST_CASE("canonical GEMM: large blocks, single-panel and multi-panel K, shapes past one tile") {
  std::uint64_t s = 7;
  for (int B : {64, 600}) {
    for (auto [M, N, K] :
         {std::tuple<int, int, int>{37, 70, 1300}, {25, 33, 2100}, {130, 3, 700}}) {
      const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
      const Problem p = make_problem(ta, tb, M, N, K, 1, splitmix64(s), Fill::wide);
      const auto ref = run(KernelCtx{Isa::scalar, 1, B}, GemmImpl::reference, p);
      for (Isa isa : supported_isas()) {
        INFO("isa=" << isa_name(isa) << " B=" << B << " M=" << M << " N=" << N << " K=" << K);
        REQUIRE(same_bits(run(KernelCtx{isa, 2, B}, GemmImpl::canonical, p), ref));
      }
    }
  }
}

TEST_CASE("canonical GEMM bits do not depend on M, N, threads, tiling or ISA path") {
  TuningGuard guard;
  const std::int64_t M = 100, N = 100;
  for (Trans ta : kTrans) {
    for (Trans tb : kTrans) {
      for (std::int64_t K : {129, 1030}) {
        const int B = 16;
        const Problem p = make_problem(ta, tb, M, N, K, 3, 77 + K, Fill::wide);
        set_gemm_tuning(GemmTuning{});
        const auto full =
            compact(run(KernelCtx{Isa::scalar, 1, B}, GemmImpl::reference, p), M, N, p.ldc);
        for (Isa isa : supported_isas()) {
          if (isa == Isa::scalar && K > 129) continue;  // keeps the test quick under ASan
          for (int threads : {1, 2, 3}) {
            // cpf: how many calls ahead the C tile is prefetched (0: off); spill: the slot
            // floats past which blocks of up to 4 * res floats stay resident (K = 1030 at nc
            // 32 is 32,960 floats: resident only by that rule in the 30,000 case); sb: how
            // threads splitting M get op(B) (0 own copies, 1 shared where dealt, 2 shared).
            for (auto [kc, nc, mc, res, cpf, spill, sb] :
                 {std::tuple<int, int, int, int, int, int, int>{256, 512, 264, 1 << 18, 2, 1 << 23,
                                                                0},
                  {1, 32, 12, 0, 1, 1 << 23, 1},
                  {64, 64, 24, 1 << 30, 0, 0, 2},
                  {100, 96, 36, 1 << 18, 3, 1 << 23, 0},
                  {700, 1000, 1000, 0, 1, 1, 1},
                  {2048, 32, 7, 1 << 30, 7, 1 << 23, 2},
                  {16, 64, 48, 1 << 30, 2, 1 << 23, 2},
                  {64, 32, 12, 0, 0, 1 << 23, 0},
                  {64, 32, 24, 30000, 2, 1, 1},
                  {1000, 48, 24, 0, 1, 1 << 23, 2}}) {
              set_gemm_tuning(GemmTuning{kc, nc, mc, res, true, cpf, spill, sb});
              INFO("isa=" << isa_name(isa) << " threads=" << threads << " kc=" << kc << " nc=" << nc
                          << " mc=" << mc << " resident=" << res << " c_prefetch=" << cpf
                          << " slot_spill=" << spill << " shared_b=" << sb << " " << tname(ta)
                          << tname(tb) << " K=" << K);
              const auto got =
                  compact(run(KernelCtx{isa, threads, B}, GemmImpl::canonical, p), M, N, p.ldc);
              REQUIRE(same_bits(got, full));
            }
            set_gemm_tuning(GemmTuning{});
            // A sub-block of C via smaller M and N (offset A and B pointers).
            for (auto [r0, m, c0, n] : {std::tuple<int, int, int, int>{0, 1, 0, 1},
                                        {37, 13, 5, 33},
                                        {99, 1, 64, 36},
                                        {3, 97, 2, 7}}) {
              std::vector<float> C(static_cast<std::size_t>(m * n));
              const float* A = p.A.data() + (ta == Trans::N ? r0 * p.lda : r0);
              const float* Bp = p.B.data() + (tb == Trans::N ? c0 : c0 * p.ldb);
              gemm(KernelCtx{isa, threads, B}, GemmImpl::canonical, ta, tb, m, n, K, A, p.lda, Bp,
                   p.ldb, C.data(), n);
              std::vector<float> want(static_cast<std::size_t>(m * n));
              for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j) want[i * n + j] = full[(r0 + i) * N + c0 + j];
              INFO("sub-block r0=" << r0 << " m=" << m << " c0=" << c0 << " n=" << n
                                   << " isa=" << isa_name(isa) << " threads=" << threads);
              REQUIRE(same_bits(C, want));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("pow2: K split into aligned shards of 2^q blocks + tree_sum equals the unsplit GEMM") {
  std::uint64_t s = 99;
  for (int B : {16, 64}) {
    for (int shards : {2, 4, 8}) {
      for (int q : {0, 1, 3}) {
        for (bool short_last : {false, true}) {
          const std::int64_t shardK = static_cast<std::int64_t>(B) << q;
          const std::int64_t lastK =
              short_last ? 1 + static_cast<std::int64_t>(splitmix64(s) % shardK) : shardK;
          const std::int64_t K = (shards - 1) * shardK + lastK;
          const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
          const std::int64_t M = 19, N = 45;
          const Problem p = make_problem(ta, tb, M, N, K, 2, splitmix64(s), Fill::wide);
          for (Isa isa : supported_isas()) {
            const KernelCtx ctx{isa, 2, B, TreeShape::pow2};
            const auto whole = compact(run(ctx, GemmImpl::canonical, p), M, N, p.ldc);
            std::vector<std::vector<float>> parts(static_cast<std::size_t>(shards),
                                                  std::vector<float>(M * N));
            std::vector<const float*> ptrs;
            for (int sh = 0; sh < shards; ++sh) {
              const std::int64_t k0 = sh * shardK, kl = sh == shards - 1 ? lastK : shardK;
              const float* A = p.A.data() + (p.ta == Trans::N ? k0 : k0 * p.lda);
              const float* Bp = p.B.data() + (p.tb == Trans::N ? k0 * p.ldb : k0);
              gemm(ctx, GemmImpl::canonical, ta, tb, M, N, kl, A, p.lda, Bp, p.ldb,
                   parts[sh].data(), N);
              ptrs.push_back(parts[sh].data());
            }
            std::vector<float> combined(M * N);
            tree_sum(ctx.tree, ptrs, M * N, combined.data());
            INFO("isa=" << isa_name(isa) << " B=" << B << " shards=" << shards << " q=" << q
                        << " K=" << K << " " << tname(ta) << tname(tb));
            REQUIRE(same_bits(combined, whole));
          }
        }
      }
    }
  }
}

namespace {
// The canonical GEMM element written from the contract's text, for both trees and a token axis
// of sequences (no code shared with runtime/: the split and the leaves are spelled out here).
float literal_dot(const Problem& p, std::int64_t i, std::int64_t j, int B, TreeShape shape,
                  std::int64_t seq) {
  auto split = [&](std::int64_t n) {
    if (shape == TreeShape::halving) return n - n / 2;
    std::int64_t q = 1;
    while (2 * q < n) q *= 2;
    return q;
  };
  std::function<float(const std::vector<float>&, std::int64_t, std::int64_t)> tree =
      [&](const std::vector<float>& v, std::int64_t lo, std::int64_t hi) -> float {
    if (hi - lo == 1) return v[lo];
    const std::int64_t mid = lo + split(hi - lo);
    return tree(v, lo, mid) + tree(v, mid, hi);
  };
  auto leaves_of = [&](std::int64_t lo, std::int64_t hi) {
    std::vector<float> out;
    for (std::int64_t b = lo; b < hi; b += B) {
      float acc = -0.0f;
      for (std::int64_t k = b; k < std::min(hi, b + B); ++k) acc = std::fma(a_at(p, i, k), b_at(p, k, j), acc);
      out.push_back(acc);
    }
    return out;
  };
  if (p.K == 0) return -0.0f;
  if (seq == 0) {
    const auto v = leaves_of(0, p.K);
    return tree(v, 0, static_cast<std::int64_t>(v.size()));
  }
  std::vector<float> per_seq;
  for (std::int64_t s0 = 0; s0 < p.K; s0 += seq) {
    const auto v = leaves_of(s0, s0 + seq);
    per_seq.push_back(tree(v, 0, static_cast<std::int64_t>(v.size())));
  }
  return tree(per_seq, 0, static_cast<std::int64_t>(per_seq.size()));
}
}  // namespace

TEST_CASE("the reference GEMM equals an independent literal of both trees, flat and over sequences") {
  std::uint64_t s = 11;
  for (TreeShape shape : {TreeShape::pow2, TreeShape::halving})
    for (auto [B, K, seq] : {std::tuple<int, int, int>{64, 768, 0}, {64, 337, 0}, {16, 80, 0},
                             {64, 1152, 96}, {64, 600, 100}, {16, 384, 64}, {7, 300, 50}}) {
      if (shape == TreeShape::pow2 && seq > 0) continue;  // pow2's token axis is flat
      const Problem p = make_problem(kTrans[splitmix64(s) % 2], kTrans[splitmix64(s) % 2], 5, 7, K,
                                     1, splitmix64(s), Fill::wide);
      KernelCtx ctx{Isa::scalar, 1, B, shape};
      ctx.sequence = seq;
      const auto ref = run(ctx, GemmImpl::reference, p);
      for (std::int64_t i = 0; i < p.M; ++i)
        for (std::int64_t j = 0; j < p.N; ++j) {
          INFO("tree=" << enum_name(shape) << " B=" << B << " K=" << K << " seq=" << seq);
          REQUIRE(bits(ref[i * p.ldc + j]) == bits(literal_dot(p, i, j, B, shape, seq)));
        }
    }
}

TEST_CASE("canonical GEMM equals the reference for both trees and token axes, any ISA/threads/tiling") {
  TuningGuard guard;
  std::uint64_t s = 21;
  for (TreeShape shape : {TreeShape::pow2, TreeShape::halving})
    for (auto [B, K, seq] : {std::tuple<int, int, int>{64, 768, 0}, {64, 3072, 0}, {64, 401, 0},
                             {16, 336, 0}, {64, 1152, 96}, {64, 1200, 100}, {64, 768, 128},
                             {16, 240, 48}, {64, 3 * 64, 64}}) {
      if (shape == TreeShape::pow2 && seq > 0) continue;
      const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
      const Problem p = make_problem(ta, tb, 37, 45, K, 2, splitmix64(s), Fill::wide);
      KernelCtx ref_ctx{Isa::scalar, 1, B, shape};
      ref_ctx.sequence = seq;
      set_gemm_tuning(GemmTuning{});
      const auto ref = compact(run(ref_ctx, GemmImpl::reference, p), p.M, p.N, p.ldc);
      for (Isa isa : supported_isas())
        for (int threads : {1, 2})
          for (int kc : {16, 64, 256, 1000}) {
            GemmTuning t;
            t.kc_target = kc;
            set_gemm_tuning(t);
            KernelCtx ctx{isa, threads, B, shape};
            ctx.sequence = seq;
            INFO("tree=" << enum_name(shape) << " isa=" << isa_name(isa) << " threads=" << threads
                         << " kc=" << kc << " B=" << B << " K=" << K << " seq=" << seq << " "
                         << tname(ta) << tname(tb));
            REQUIRE(same_bits(compact(run(ctx, GemmImpl::canonical, p), p.M, p.N, p.ldc), ref));
          }
    }
}

TEST_CASE("halving: K split into 2^j equal shards (non-power-of-two blocks) equals the unsplit GEMM") {
  std::uint64_t s = 31;
  for (auto [B, blocks, seq] : {std::tuple<int, int, int>{64, 12, 0}, {64, 24, 0}, {16, 6, 0},
                                {64, 48, 0}, {64, 12, 192}, {64, 12, 96}}) {
    // seq > 0: K is blocks * B tokens, sequences of seq tokens (3 or 1.5 blocks each)
    const std::int64_t K = static_cast<std::int64_t>(blocks) * B - (seq == 0 ? 9 : 0);
    for (int shards : {2, 4}) {
      if (blocks % shards != 0) continue;  // 2^j equal shards of whole blocks
      const std::int64_t per = (static_cast<std::int64_t>(blocks) * B) / shards;
      if (seq > 0 && per % seq != 0) continue;  // shards are whole sequences
      const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
      const std::int64_t M = 19, N = 45;
      const Problem p = make_problem(ta, tb, M, N, K, 2, splitmix64(s), Fill::wide);
      for (Isa isa : supported_isas()) {
        KernelCtx ctx{isa, 2, B, TreeShape::halving};
        ctx.sequence = seq;
        const auto whole = compact(run(ctx, GemmImpl::canonical, p), M, N, p.ldc);
        std::vector<std::vector<float>> parts(static_cast<std::size_t>(shards),
                                              std::vector<float>(M * N));
        std::vector<const float*> ptrs;
        for (int sh = 0; sh < shards; ++sh) {
          const std::int64_t k0 = sh * per, kl = std::min(per, K - k0);
          const float* A = p.A.data() + (p.ta == Trans::N ? k0 : k0 * p.lda);
          const float* Bp = p.B.data() + (p.tb == Trans::N ? k0 * p.ldb : k0);
          gemm(ctx, GemmImpl::canonical, ta, tb, M, N, kl, A, p.lda, Bp, p.ldb, parts[sh].data(), N);
          ptrs.push_back(parts[sh].data());
        }
        std::vector<float> combined(M * N);
        tree_sum(TreeShape::halving, ptrs, M * N, combined.data());
        INFO("isa=" << isa_name(isa) << " B=" << B << " blocks=" << blocks << " seq=" << seq
                    << " shards=" << shards);
        REQUIRE(same_bits(combined, whole));
      }
    }
  }
}

TEST_CASE("chain GEMM equals a literal single FMA chain per element") {
  TuningGuard guard;
  std::uint64_t s = 5;
  for (int rep = 0; rep < 24; ++rep) {
    const Trans ta = kTrans[rep % 2], tb = kTrans[(rep / 2) % 2];
    const std::int64_t M = kMN[splitmix64(s) % 11], N = kMN[splitmix64(s) % 11],
                       K = kK[splitmix64(s) % 11];
    const Problem p =
        make_problem(ta, tb, M, N, K, rep % 4, splitmix64(s), static_cast<Fill>(rep % 3));
    const std::vector<float> want = literal_chain(p);
    for (Isa isa : supported_isas()) {
      for (auto kc : {256, 64, 7}) {
        const int cpf = rep % 3;  // C tile prefetch distance (0: off)
        const int sb = (rep / 3) % 3;  // how threads splitting M get op(B)
        set_gemm_tuning(GemmTuning{kc, rep % 2 ? 32 : 512, rep % 3 ? 264 : 12,
                                   rep % 4 < 2 ? 0 : 1 << 30, true, cpf, 1 << 23, sb});
        const int threads = 1 + rep % 3;
        INFO("isa=" << isa_name(isa) << " kc=" << kc << " c_prefetch=" << cpf
                    << " shared_b=" << sb << " " << tname(ta) << tname(tb) << " M=" << M
                    << " N=" << N << " K=" << K);
        const auto got = compact(run(KernelCtx{isa, threads, 64}, GemmImpl::chain, p), M, N, p.ldc);
        REQUIRE(same_bits(got, want));
      }
    }
  }
}

TEST_CASE("K == 0 gives IEEE's additive identity -0.0") {
  for (GemmImpl impl : {GemmImpl::canonical, GemmImpl::chain, GemmImpl::reference}) {
    for (Isa isa : supported_isas()) {
      std::vector<float> C(6, 1.0f);
      gemm(KernelCtx{isa, 2, 64}, impl, Trans::N, Trans::N, 2, 3, 0, nullptr, 1, nullptr, 3,
           C.data(), 3);
      for (float c : C) REQUIRE(bits(c) == bits(-0.0f));
    }
  }
}

TEST_CASE("canonical keeps signed zeros: all -0 products give -0, mixed give +0") {
  for (Isa isa : supported_isas()) {
    const std::int64_t K = 200;
    std::vector<float> A(K, -0.0f), Bm(K, 1.0f), C(1);
    gemm(KernelCtx{isa, 1, 64}, GemmImpl::canonical, Trans::N, Trans::N, 1, 1, K, A.data(), K,
         Bm.data(), 1, C.data(), 1);
    REQUIRE(bits(C[0]) == bits(-0.0f));
    A[150] = 0.0f;
    gemm(KernelCtx{isa, 1, 64}, GemmImpl::canonical, Trans::N, Trans::N, 1, 1, K, A.data(), K,
         Bm.data(), 1, C.data(), 1);
    REQUIRE(bits(C[0]) == bits(0.0f));
  }
}

TEST_CASE("eigen and openblas GEMMs agree with a float64 reference within tolerance") {
  // The eigen path is built for AVX-512 only: elsewhere it must refuse with a clear error.
  const bool eigen = isa_supported(Isa::avx512);
  if (!eigen) {
    const Problem p = make_problem(Trans::N, Trans::N, 4, 4, 4, 3, 11, Fill::normal);
    REQUIRE_THROWS_WITH(run(KernelCtx{Isa::scalar, 1, 64}, GemmImpl::eigen, p),
                        Catch::Contains("AVX-512 only"));
  }
  for (GemmImpl impl : {GemmImpl::eigen, GemmImpl::openblas}) {
    if (impl == GemmImpl::eigen && !eigen) continue;
    for (Trans ta : kTrans) {
      for (Trans tb : kTrans) {
        for (int threads : {1, 2}) {
          const std::int64_t M = 47, N = 33, K = 513;
          const Problem p = make_problem(ta, tb, M, N, K, 3, 11, Fill::normal);
          const auto got = run(KernelCtx{Isa::scalar, threads, 64}, impl, p);
          for (std::int64_t i = 0; i < M; ++i)
            for (std::int64_t j = 0; j < N; ++j) {
              double ref = 0, mag = 0;
              for (std::int64_t k = 0; k < K; ++k) {
                ref += static_cast<double>(a_at(p, i, k)) * b_at(p, k, j);
                mag += std::fabs(static_cast<double>(a_at(p, i, k)) * b_at(p, k, j));
              }
              INFO(gemm_impl_name(impl)
                   << " " << tname(ta) << tname(tb) << " i=" << i << " j=" << j);
              REQUIRE(std::fabs(got[i * p.ldc + j] - ref) <= 1e-5 * mag + 1e-30);
            }
        }
      }
    }
  }
}

TEST_CASE("matmul: tensor form, shape checks name both tensors") {
  const KernelCtx ctx = KernelCtx::best(2, 64);
  Tensor X = Tensor::zeros(DType::f32, {5, 7}, "X");
  Tensor W = Tensor::zeros(DType::f32, {3, 7}, "W");
  Tensor Y = Tensor::zeros(DType::f32, {5, 3}, "Y");
  const auto xv = gen(35, 1, Fill::normal), wv = gen(21, 2, Fill::normal);
  std::memcpy(X.data<float>(), xv.data(), 35 * 4);
  std::memcpy(W.data<float>(), wv.data(), 21 * 4);
  matmul(ctx, GemmImpl::canonical, X, Trans::N, W, Trans::T, Y);
  std::vector<float> want(15);
  gemm(ctx, GemmImpl::reference, Trans::N, Trans::T, 5, 3, 7, xv.data(), 7, wv.data(), 7,
       want.data(), 3);
  REQUIRE(std::memcmp(Y.data<float>(), want.data(), 15 * 4) == 0);

  try {
    matmul(ctx, GemmImpl::canonical, X, Trans::N, W, Trans::N, Y);
    FAIL("inner-dimension mismatch did not throw");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("'X'") != std::string::npos);
    CHECK(msg.find("'W'") != std::string::npos);
    CHECK(msg.find("[5, 7]") != std::string::npos);
    CHECK(msg.find("[3, 7]") != std::string::npos);
  }
  Tensor Ybad = Tensor::zeros(DType::f32, {5, 4}, "Ybad");
  try {
    matmul(ctx, GemmImpl::canonical, X, Trans::N, W, Trans::T, Ybad);
    FAIL("output mismatch did not throw");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("Ybad") != std::string::npos);
    CHECK(msg.find("[5, 4]") != std::string::npos);
  }
  // A row slice (padded leading dimension) works like a plain pointer call.
  Tensor Xbig = Tensor::zeros(DType::f32, {5, 9}, "Xbig");
  Tensor Xs = Xbig.slice(1, 0, 7);
  for (int i = 0; i < 5; ++i) std::memcpy(Xbig.data<float>() + i * 9, xv.data() + i * 7, 7 * 4);
  Tensor Y2 = Tensor::zeros(DType::f32, {5, 3}, "Y2");
  matmul(ctx, GemmImpl::canonical, Xs, Trans::N, W, Trans::T, Y2);
  REQUIRE(Y2.bitwise_equal(Y));
}

// Full-size model shapes (bench-small: 1024 tokens, d_model 256, FFN 1024): many micro-panels,
// several mc blocks, a B panel packed by a team of threads (shared) or by each thread for
// itself (GemmTuning::shared_b 2, 1, 0), 16 x 16 transposing packs
// of op(B) (NT) with a k tail (K = 1030), padded KR A panels (TN), row blocks dealt to the
// threads (one K panel and B-resident order), the Goto order over many K panels.
TEST_CASE("canonical GEMM on bench-small shapes equals the reference at 1, 2 and 3 threads") {
  TuningGuard guard;
  set_gemm_tuning(GemmTuning{});
  struct Shape {
    Trans ta, tb;
    std::int64_t M, N, K, pad;
  };
  for (const Shape& s :
       {Shape{Trans::N, Trans::T, 1024, 256, 256, 0}, Shape{Trans::N, Trans::T, 300, 1024, 1030, 5},
        Shape{Trans::N, Trans::N, 1024, 256, 256, 0}, Shape{Trans::T, Trans::N, 256, 256, 1024, 0},
        Shape{Trans::T, Trans::N, 1000, 200, 1030, 3},
        // Goto order over 17 K panels, counter slots in memory across 4 row blocks.
        Shape{Trans::T, Trans::N, 1056, 64, 4160, 0}}) {
    const int B = 64;
    const Problem p = make_problem(s.ta, s.tb, s.M, s.N, s.K, s.pad, 5 + s.K + s.N, Fill::wide);
    const auto want =
        compact(run(KernelCtx{Isa::scalar, 1, B}, GemmImpl::reference, p), s.M, s.N, p.ldc);
    for (Isa isa : supported_isas()) {
      if (isa == Isa::scalar) continue;  // the portable path is covered on small shapes above
      for (int threads : {1, 2, 3}) {
        for (int sb : {0, 1, 2}) {
          if (threads == 1 && sb > 0) continue;  // one thread packs for itself
          GemmTuning t;
          t.shared_b = sb;
          set_gemm_tuning(t);
          INFO("isa=" << isa_name(isa) << " threads=" << threads << " shared_b=" << sb << " "
                      << tname(s.ta) << tname(s.tb) << " " << s.M << "x" << s.N << "x" << s.K);
          const auto got =
              compact(run(KernelCtx{isa, threads, B}, GemmImpl::canonical, p), s.M, s.N, p.ldc);
          INFO(first_diff(got, want));
          REQUIRE(same_bits(got, want));
        }
      }
    }
  }
}

// A last row tile of 1-4 or 5-8 rows runs on the 4- and 8-row kernels (runtime/gemm_kernel.hpp,
// Kern4 / Kern8), and a rectangle whose rows fit one mc block but whose columns span several
// nc blocks runs in the A-once order (the A block packed once per K panel, the slots holding
// every column block of a span of up to 8). Both must give the reference's bits (canonical)
// and one FMA chain per element (chain), on every ISA path, at 1 and 2 threads, in one and
// several K panels; so must a column block of up to 1.5 * nc run as one.
TEST_CASE("canonical and chain GEMM: short last row tiles and the A-once order") {
  TuningGuard guard;
  std::uint64_t s = 11;
  struct Case {
    std::int64_t M, N, K;
    GemmTuning tuning;
  };
  const GemmTuning narrow{64, 32, 264, 0, true, 2};  // kc 64, nc 32: many panels and blocks
  std::vector<Case> cases;
  for (std::int64_t M : {1, 3, 4, 5, 8, 9, 16, 20, 28, 36})
    cases.push_back({M, 100, 300, narrow});
  cases.push_back({100, 1100, 600, GemmTuning{}});  // default tuning: 3 column blocks
  cases.push_back({20, 330, 300, narrow});  // 11 column blocks: A-once spans of 8 and 3
  cases.push_back({256, 96, 130, GemmTuning{64, 32, 264, 0, true, 0}});  // 4 rows past 252
  // nc 64 and 90 columns (96 padded, at most 1.5 * nc): one column block wider than nc, its
  // rows split between the threads (300) or its columns (40).
  cases.push_back({300, 90, 300, GemmTuning{64, 64, 264, 0, true, 2}});
  cases.push_back({40, 90, 300, GemmTuning{64, 64, 264, 0, true, 2}});
  for (const Case& c : cases) {
    const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
    const Problem p = make_problem(ta, tb, c.M, c.N, c.K, splitmix64(s) % 3, splitmix64(s),
                                   Fill::wide);
    const int B = 64;
    const auto want =
        compact(run(KernelCtx{Isa::scalar, 1, B}, GemmImpl::reference, p), c.M, c.N, p.ldc);
    const std::vector<float> chain = literal_chain(p);
    set_gemm_tuning(c.tuning);
    for (Isa isa : supported_isas()) {
      for (int threads : {1, 2}) {
        INFO("isa=" << isa_name(isa) << " threads=" << threads << " " << tname(ta) << tname(tb)
                    << " " << c.M << "x" << c.N << "x" << c.K << " nc=" << c.tuning.nc);
        const auto got =
            compact(run(KernelCtx{isa, threads, B}, GemmImpl::canonical, p), c.M, c.N, p.ldc);
        INFO(first_diff(got, want));
        REQUIRE(same_bits(got, want));
        const auto got_chain =
            compact(run(KernelCtx{isa, threads, B}, GemmImpl::chain, p), c.M, c.N, p.ldc);
        INFO(first_diff(got_chain, chain));
        REQUIRE(same_bits(got_chain, chain));
      }
    }
  }
}

// gemm_scratch says exactly how much each thread's grow-only buffers take for a call: run in a
// fresh thread (its buffers, and its OpenMP team's, start empty and are freed when it ends),
// the bytes the process's GEMM scratch grows by equal the sum over the call's entries. Cases:
// one and several K panels, the Goto, B-resident (a small limit) and A-once orders, spilling
// slots (a small spill limit), the token axis, a team sharing op(B), canonical and chain.
TEST_CASE("gemm_scratch: what a call's buffers take, thread by thread") {
  TuningGuard guard;
  struct Case {
    std::int64_t M, N, K;
    GemmTuning tuning;
    std::int64_t sequence;
  };
  const std::vector<Case> cases = {
      {100, 1100, 600, GemmTuning{}, 0},                       // Goto order, 3 column blocks
      {20, 330, 300, GemmTuning{64, 32, 264, 0, true, 2}, 0},  // A once
      {300, 90, 1000, GemmTuning{64, 64, 264, 1 << 16, true, 2}, 0},  // B resident
      {600, 96, 768, GemmTuning{64, 64, 96, 1 << 12, true, 2, 1 << 10, 2}, 0},  // spill, shared B
      {256, 200, 3 * 96, GemmTuning{}, 96},  // tokens: 3 sequences of 96
      {40, 40, 40, GemmTuning{}, 0}};        // one panel, one tile
  std::uint64_t s = 5;
  for (const Case& c : cases) {
    set_gemm_tuning(c.tuning);
    for (const Isa isa : supported_isas())
      for (const int threads : {1, 2})
        for (const GemmImpl impl : {GemmImpl::canonical, GemmImpl::chain}) {
          const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
          KernelCtx ctx{isa, threads, 16};
          ctx.sequence = c.sequence;
          const std::vector<GemmScratch> need = gemm_scratch(ctx, impl, ta, tb, c.M, c.N, c.K);
          std::int64_t want = 0;
          for (const GemmScratch& g : need) want += 4 * g.floats();
          const Problem p = make_problem(ta, tb, c.M, c.N, c.K, 0, splitmix64(s), Fill::normal);
          std::int64_t grew = -1, after = -1;
          const std::int64_t before = gemm_scratch_held_bytes();
          std::thread([&] {
            run(ctx, impl, p);
            grew = gemm_scratch_held_bytes() - before;
            run(ctx, impl, p);  // grow-only: the same call again takes nothing more
            after = gemm_scratch_held_bytes() - before;
          }).join();
          INFO(isa_name(isa) << " threads=" << threads << " " << gemm_impl_name(impl) << " "
                             << tname(ta) << tname(tb) << " " << c.M << "x" << c.N << "x" << c.K);
          CHECK(need.size() == static_cast<std::size_t>(threads));
          CHECK(grew == want);
          CHECK(after == want);
          // The thread's buffers went with it; its OpenMP workers end (and free theirs) soon
          // after it, not with it.
          for (int i = 0; i < 500 && gemm_scratch_held_bytes() != before; ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          CHECK(gemm_scratch_held_bytes() == before);
        }
  }
  CHECK(gemm_scratch(KernelCtx{Isa::scalar, 1, 16}, GemmImpl::openblas, Trans::N, Trans::N, 8,
                     8, 8)
            .empty());
}

// A read in place (GemmTuning::a_in_place, runtime/gemm_kernel.hpp rows_spread): with A on a
// 64-byte boundary and row strides whose rows spread over L1's sets (256, 768 floats, and 300,
// which is not a multiple of a line), full micro-panels are read where they are and a last
// partial one (M not a multiple of 12) is copied; strides that pile rows into few sets (1024,
// and 1040 at K 1040) take the copy. Both must give the reference's bits, at 1-3 threads, in
// one and several K panels, canonical and chain, and the same bits as the copying path.
TEST_CASE("canonical GEMM reading A in place equals the reference and the copying path") {
  TuningGuard guard;
  struct Shape {
    std::int64_t M, N, K, lda;
  };
  for (const Shape& s :
       {Shape{1030, 96, 256, 256}, Shape{600, 64, 768, 768}, Shape{250, 40, 300, 300},
        Shape{96, 33, 1024, 1024}, Shape{100, 64, 700, 768}, Shape{61, 50, 1040, 1040},
        Shape{100, 64, 1024, 1088}}) {
    for (Trans tb : kTrans) {
      const int B = 64;
      const Problem p = make_problem(Trans::N, tb, s.M, s.N, s.K, s.lda - s.K, 9 + s.K, Fill::wide);
      // The same A on a 64-byte boundary (a std::vector's large blocks start 16 bytes past one).
      AlignedVector<float> a(p.A.begin(), p.A.end());
      REQUIRE(reinterpret_cast<std::uintptr_t>(a.data()) % 64 == 0);
      const auto want =
          compact(run(KernelCtx{Isa::scalar, 1, B}, GemmImpl::reference, p), s.M, s.N, p.ldc);
      for (GemmImpl impl : {GemmImpl::canonical, GemmImpl::chain}) {
        for (Isa isa : supported_isas()) {
          for (int threads : {1, 2, 3}) {
            INFO("isa=" << isa_name(isa) << " threads=" << threads << " " << gemm_impl_name(impl)
                        << " N" << tname(tb) << " " << s.M << "x" << s.N << "x" << s.K << " lda "
                        << s.lda);
            std::vector<std::vector<float>> got;
            for (bool in_place : {true, false}) {
              GemmTuning t;
              t.a_in_place = in_place;
              set_gemm_tuning(t);
              got.push_back(
                  compact(run(KernelCtx{isa, threads, B}, impl, p, a.data()), s.M, s.N, p.ldc));
            }
            INFO(first_diff(got[0], got[1]));
            REQUIRE(same_bits(got[0], got[1]));
            if (impl == GemmImpl::canonical) {
              INFO(first_diff(got[0], want));
              REQUIRE(same_bits(got[0], want));
            }
          }
        }
      }
    }
  }
}

// The AVX-512 path has two register tiles (GemmTuning::avx512_rows: 12 x 32 and 8 x 48) and
// takes one by CPU vendor and shape, so the other tests here run mostly this host's. Both must
// give the reference's bits (canonical, both trees, flat and token axes) and one FMA chain per
// element (chain): row and column tails of either tile (M, N around multiples of 4, 8, 12, 32
// and 48), every loop order (Goto, A once, B resident, spilling slots, a shared op(B)), 1 to 3
// threads.
TEST_CASE("the AVX-512 tiles 12 x 32 and 8 x 48 give the reference's bits") {
  if (!isa_supported(Isa::avx512)) {
    SUCCEED("no AVX-512 on this CPU: nothing to compare");
    return;
  }
  TuningGuard guard;
  std::uint64_t s = 48;
  const std::int64_t mn[] = {1, 4, 7, 8, 9, 12, 13, 31, 32, 33, 47, 48, 49, 95, 97, 130};
  // kc, nc, mc, resident, in place, c_prefetch, spill, shared_b
  const GemmTuning tunings[] = {GemmTuning{},
                                GemmTuning{64, 32, 264, 0, true, 2},  // A once, nc < 48
                                GemmTuning{64, 64, 264, 1 << 16, false, 2},  // B resident
                                GemmTuning{64, 96, 24, 1 << 12, true, 1, 1 << 10, 2}};
  int cases = 0;
  for (int rep = 0; rep < 48; ++rep) {
    const Trans ta = kTrans[splitmix64(s) % 2], tb = kTrans[splitmix64(s) % 2];
    const std::int64_t M = mn[splitmix64(s) % 16], N = mn[splitmix64(s) % 16];
    const TreeShape tree = rep % 2 ? TreeShape::halving : TreeShape::pow2;
    const std::int64_t seq = tree == TreeShape::halving && rep % 4 == 1 ? 96 : 0;
    const std::int64_t K = seq ? 3 * seq : kK[splitmix64(s) % 11];
    const Problem p = make_problem(ta, tb, M, N, K, splitmix64(s) % 4, splitmix64(s), Fill::wide);
    KernelCtx ctx{Isa::scalar, 1, 64, tree};
    ctx.sequence = seq;
    const auto want = compact(run(ctx, GemmImpl::reference, p), M, N, p.ldc);
    const auto chain = literal_chain(p);
    ctx.isa = Isa::avx512;
    ctx.threads = 1 + static_cast<int>(splitmix64(s) % 3);
    const GemmTuning& base = tunings[rep % 4];
    for (const int rows : {12, 8}) {
      GemmTuning t = base;
      t.avx512_rows = rows;
      set_gemm_tuning(t);
      INFO("rows=" << rows << " " << tname(ta) << tname(tb) << " " << M << "x" << N << "x" << K
                   << " tree=" << enum_name(tree) << " seq=" << seq
                   << " threads=" << ctx.threads << " tuning " << rep % 4);
      const auto got = compact(run(ctx, GemmImpl::canonical, p), M, N, p.ldc);
      INFO(first_diff(got, want));
      REQUIRE(same_bits(got, want));
      const auto got_chain = compact(run(ctx, GemmImpl::chain, p), M, N, p.ldc);
      INFO(first_diff(got_chain, chain));
      REQUIRE(same_bits(got_chain, chain));
      ++cases;
    }
  }
  CHECK(cases == 96);
  // By CPU and N: on Intel 8 x 48 unless padding N to 48 costs 10% more than padding it to 32.
  GemmTuning t;
  const bool intel = cpu_vendor() == CpuVendor::intel;
  CHECK(avx512_tile_rows(t, 768) == (intel ? 8 : 12));   // no padding either way
  CHECK(avx512_tile_rows(t, 1024) == (intel ? 8 : 12));  // 1,056 columns: 3% more
  CHECK(avx512_tile_rows(t, 256) == 12);                 // 288 columns: 12.5% more
  CHECK(avx512_tile_rows(t, 64) == 12);                  // 96 columns against 64
  t.avx512_rows = 12;
  CHECK(avx512_tile_rows(t, 768) == 12);
  t.avx512_rows = 7;
  CHECK_THROWS_AS(set_gemm_tuning(t), Error);
}

TEST_CASE("gemm_row_stride: the smallest multiple of 16 >= cols whose rows spread over L1") {
  // 1 KiB and 3 KiB rows already spread (3 lines per set for 12 rows of 256 floats); rows of
  // 1024, 1040, 1056 and 1072 floats put 12, 12, 8 and 6 lines into one set, 1088 shifts each
  // row by 4 lines: at most 4 per set (the model's FFN activations at fl 1024).
  CHECK(gemm_row_stride(256) == 256);
  CHECK(gemm_row_stride(768) == 768);
  CHECK(gemm_row_stride(1024) == 1088);
  CHECK(gemm_row_stride(100) == 112);
  for (std::int64_t cols : {1, 16, 17, 64, 512, 1000, 2048, 4096, 3000}) {
    const std::int64_t ld = gemm_row_stride(cols);
    INFO("cols " << cols << " ld " << ld);
    CHECK(ld >= cols);
    CHECK(ld % 16 == 0);
    CHECK(ld <= (cols + 15) / 16 * 16 + 1024);
  }
  CHECK_THROWS(gemm_row_stride(0));
}

TEST_CASE("gemm rejects an invalid ctx, bad leading dimensions or tunings and unknown names") {
  std::vector<float> A(16, 1.0f), B(16, 1.0f), C(16);
  REQUIRE_THROWS_AS(gemm(KernelCtx{Isa::scalar, 0, 64}, GemmImpl::canonical, Trans::N, Trans::N, 2,
                         2, 2, A.data(), 2, B.data(), 2, C.data(), 2),
                    Error);
  REQUIRE_THROWS_AS(gemm(KernelCtx{Isa::scalar, 1, 0}, GemmImpl::canonical, Trans::N, Trans::N, 2,
                         2, 2, A.data(), 2, B.data(), 2, C.data(), 2),
                    Error);
  REQUIRE_THROWS_AS(gemm(KernelCtx{Isa::scalar, 1, 64}, GemmImpl::canonical, Trans::N, Trans::N, 2,
                         2, 3, A.data(), 2, B.data(), 2, C.data(), 2),
                    Error);
  REQUIRE_THROWS_AS(gemm(KernelCtx{Isa::scalar, 1, 64}, GemmImpl::canonical, Trans::N, Trans::N, 2,
                         3, 2, A.data(), 2, B.data(), 3, C.data(), 2),
                    Error);
  REQUIRE_THROWS_AS(parse_gemm_impl("cublas"), Error);
  {
    TuningGuard guard;
    GemmTuning t;
    t.c_prefetch = -1;
    REQUIRE_THROWS_AS(set_gemm_tuning(t), Error);
    t = GemmTuning{};
    t.slot_spill_floats = -1;
    REQUIRE_THROWS_AS(set_gemm_tuning(t), Error);
    t = GemmTuning{};
    t.b_resident_floats = -1;
    REQUIRE_THROWS_AS(set_gemm_tuning(t), Error);
    t = GemmTuning{};
    t.shared_b = 3;
    REQUIRE_THROWS_AS(set_gemm_tuning(t), Error);
  }
  for (GemmImpl i : {GemmImpl::canonical, GemmImpl::chain, GemmImpl::eigen, GemmImpl::openblas,
                     GemmImpl::reference})
    REQUIRE(parse_gemm_impl(gemm_impl_name(i)) == i);
  REQUIRE(fastest_gemm_impl(Isa::avx512) == GemmImpl::canonical);
  REQUIRE(fastest_gemm_impl(Isa::avx2) == GemmImpl::openblas);
  REQUIRE(fastest_gemm_impl(Isa::scalar) == GemmImpl::openblas);
}
