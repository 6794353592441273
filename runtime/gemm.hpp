// Single-precision GEMM for every execution mode: C[M,N] = op(A)[M,K] . op(B)[K,N],
// row-major, C overwritten (no alpha/beta).
//
//   canonical  (invariant mode)     C[i,j] = csum_k A[i,k]*B[k,j] with block B = ctx.reduce_block
//                                   (docs/design.md section 2, runtime/csum.hpp): each block an FMA
//                                   chain from -0.0, blocks combined by the pairwise tree T.
//   chain      (deterministic mode) one FMA chain from -0.0 over the whole K per element.
//   eigen, openblas                 vendor GEMMs; not bitwise reproducible across layouts.
//   fast mode runs fastest_gemm_impl(isa): canonical or openblas, whichever measured faster.
//   reference                       the canonical contract written out literally (scalar).
//
// Determinism contract: canonical returns the bits of `reference` for every ISA path, thread
// count, tiling, M, N, leading dimension and transposition; splitting K into aligned shards of
// 2^j whole blocks and combining shard results with lockstep::tree_sum gives the same bits
// (a shard's GEMM is a subtree). chain returns the bits of a literal single-chain loop for
// every ISA path, thread count and tiling. Signed zeros, Inf and NaN propagate as in the
// scalar definition; K == 0 gives -0.0 (IEEE's additive identity) for canonical, chain and
// reference. Threads only ever split C tiles, never K.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/determinism.hpp"
#include "runtime/enum_names.hpp"
#include "runtime/isa.hpp"
#include "runtime/tensor.hpp"

namespace lockstep {

enum class Trans : std::uint8_t { N, T };
enum class GemmImpl { canonical, chain, eigen, openblas, reference };
constexpr std::array<EnumName<GemmImpl>, 5> enum_names(GemmImpl) {
  return {{{GemmImpl::canonical, "canonical"},
           {GemmImpl::chain, "chain"},
           {GemmImpl::eigen, "eigen"},
           {GemmImpl::openblas, "openblas"},
           {GemmImpl::reference, "reference"}}};
}

const char* gemm_impl_name(GemmImpl impl);
// "canonical", "chain", "eigen", "openblas", "reference"; throws lockstep::Error otherwise.
GemmImpl parse_gemm_impl(std::string_view name);
// Fast mode's GEMM on a CPU whose kernels run the ISA path `isa`: the implementation that
// measured fastest on the model shapes (see the comment at the definition in gemm.cpp for
// the numbers): canonical on AVX-512 (faster than chain in the training step), OpenBLAS
// otherwise.
GemmImpl fastest_gemm_impl(Isa isa);
// The GEMM a determinism mode runs: canonical (invariant), chain (deterministic), or
// fastest_gemm_impl(isa) (fast).
GemmImpl gemm_impl_for(Determinism mode, Isa isa);

// C[M,N] = op(A)[M,K] . op(B)[K,N]; C is overwritten.
// ta == N: A is stored M x K (lda >= K); ta == T: A is stored K x M (lda >= M).
// tb == N: B is stored K x N (ldb >= N); tb == T: B is stored N x K (ldb >= K).
// ldc >= N. C must not alias A or B. Throws lockstep::Error on a bad ctx or bad sizes.
void gemm(const KernelCtx& ctx, GemmImpl impl, Trans ta, Trans tb, std::int64_t M, std::int64_t N,
          std::int64_t K, const float* A, std::int64_t lda, const float* B, std::int64_t ldb,
          float* C, std::int64_t ldc);

// Tensor form: A, B, C are rank-2 f32 tensors with unit column stride (row stride = leading
// dimension). op(A) must be [M, K], op(B) [K, N] and C [M, N]; a mismatch throws an Error
// naming both tensors and their shapes.
void matmul(const KernelCtx& ctx, GemmImpl impl, const Tensor& A, Trans ta, const Tensor& B,
            Trans tb, Tensor& C);

// The floats of one thread's grow-only GEMM buffers that a canonical or chain call needs
// (each thread keeps its buffers at the largest size any of its calls needed): the packed A
// block, the packed op(B) panel, the leaf stack, the counter slots (canonical's partial sums of
// whole K panels: levels x M x nc floats in the Goto order, which GPT-2 small's LM head weight
// gradient at microbatch 3 makes 442 MiB) and, on the calling thread of a team that packs op(B)
// once, that shared panel.
struct GemmScratch {
  std::int64_t ablock = 0, bpack = 0, stack = 0, slots = 0, shared_b = 0;
  std::int64_t floats() const { return ablock + bpack + stack + slots + shared_b; }
};
// What gemm(ctx, impl, ta, tb, M, N, K, ...) needs, by OpenMP thread number of its team (the
// caller's is entry 0; one entry when one thread runs it); empty for an empty call or a
// vendor or reference implementation, whose buffers are not ours. Exact: the driver sizes its
// buffers with the same function. Leading dimensions and addresses do not change it.
std::vector<GemmScratch> gemm_scratch(const KernelCtx& ctx, GemmImpl impl, Trans ta, Trans tb,
                                      std::int64_t M, std::int64_t N, std::int64_t K);
// The bytes every GEMM scratch buffer of the process holds now (all threads).
std::int64_t gemm_scratch_held_bytes();

// What the vendor GEMMs run: OpenBLAS's build config and the core type it picked, Eigen's
// version and SIMD set (for bench output and run records).
std::string gemm_vendor_info();

// Tiling knobs of the canonical and chain kernels. They change speed only, never bits (the
// tests vary them to prove it). kc_target: K panel length; canonical uses the largest nodes
// of K's tree of at most kc_target (1.5 * kc_target on AVX-512; at least one block; gemm.cpp,
// plan_canonical). nc: columns per packed B panel (a width of up to 1.5 * nc is one panel).
// mc: rows per packed A block.
// A test and benchmark hook: set it while no GEMM is running.
struct GemmTuning {
  std::int64_t kc_target = 256;
  std::int64_t nc = 512;
  std::int64_t mc = 264;
  // Keep the whole packed op(B) column block resident (B-resident loop order) when it has at
  // most this many floats (default 2^18 = 1 MiB); 0 disables that order.
  std::int64_t b_resident_floats = 1 << 18;
  // Read full A micro-panels of op(A) = A (ta == N) where they are instead of copying them,
  // when their rows fall into enough L1 sets (gemm_kernel.hpp, rows_spread); false: always copy.
  bool a_in_place = true;
  // A kernel call that stores a C tile prefetches, for writing, the C tile of the call this
  // many calls later in its mc x nc block (0: off): canonical in the last K panel, chain in
  // every panel (it reads C back at each).
  std::int64_t c_prefetch = 2;
  // Canonical: when the Goto order's counter slots (slot levels x M x nc floats, every
  // thread's together) would pass this many floats (default 2^23 = 32 MiB, an L3's worth on
  // the hosts measured), they travel to memory and back at every K panel (an LM head's weight
  // gradient, M = 50304: 100 MiB per level); the B-resident order, whose slots stay in L2,
  // then runs for blocks of up to 4 * b_resident_floats. 0: never.
  std::int64_t slot_spill_floats = 1 << 23;
  // Threads that split C along M all read the whole packed op(B). 2: the team packs it once
  // into a shared buffer, each member a share of its micro-panels, with a barrier before and
  // after every pack (every K panel in the Goto order); 1: shared only where the team deals
  // its row blocks out (one K panel, or the B-resident order), elsewhere each thread packs
  // its own op(B) and runs its rows with no barrier; 0: each thread always packs its own.
  int shared_b = 0;
  // Rows of the AVX-512 kernels' register tile, both of 24 zmm accumulators: 12 (12 x 32: two
  // B vectors and 12 broadcasts of A a k step), 8 (8 x 48: three and 8, so 11 loads per 24
  // FMAs instead of 14), or 0: by CPU and shape (avx512_tile_rows). Speed only: each C
  // element's sum is the same whatever the tile (gemm_kernel.hpp's contract; test_gemm).
  int avx512_rows = 0;
};
GemmTuning gemm_tuning();
void set_gemm_tuning(const GemmTuning& t);
// The AVX-512 register tile's rows for a GEMM of N columns under t: t.avx512_rows, or for 0
// the tile measured faster: on Intel 8 x 48, whose 11 loads per 24 FMAs leave the two load
// ports room that 12 x 32's 14 do not (Ice Lake: GPT-2's GEMMs 1-23% faster, its step ~5%),
// unless padding N to 48 columns costs 10% more work than padding it to 32 (N = 256: 12.5%;
// such shapes ran 7-14% slower with 8 x 48); elsewhere 12 (AMD Zen 5: 94-101% of the FMA peak
// with 12 x 32, 8 x 48 slower on 12 of 13 shapes). docs/benchmarks.md, "The 8 x 48 tile on
// Intel". N alone decides, so that a GEMM run in row blocks or shorter K (the causal
// attention's pieces) takes the tile of its whole and needs no more scratch than the whole
// (model/memory_footprint.cpp counts the whole).
int avx512_tile_rows(const GemmTuning& t, std::int64_t N);

// A leading dimension (floats) >= cols for a 64-byte-aligned row-major matrix that later
// GEMMs read as A (ta == N): the smallest multiple of 16 whose rows spread over the L1's sets
// so that the kernels read them in place (gemm_kernel.hpp, rows_spread_l1) instead of copying
// them; cols rounded up to 16 when that already does (256, 768), e.g. 1088 for 1024. Checked
// for panels of kc_target: the AVX-512 canonical panels of up to 1.5 * kc_target may not
// spread and are then copied. A layout choice for speed only: a GEMM's bits never depend on
// lda.
std::int64_t gemm_row_stride(std::int64_t cols);

}  // namespace lockstep
