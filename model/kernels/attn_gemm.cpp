#include "model/kernels/attn_gemm.hpp"

#include <algorithm>
#include <bit>

namespace lockstep {

bool attn_gemm_supported(const KernelCtx& ctx, std::int64_t C, std::int64_t hd, bool tree) {
  return ctx.isa == Isa::avx512 && C > 0 && C % 16 == 0 && hd % 16 == 0 && hd >= 16 && hd <= 64 &&
         (!tree || hd <= ctx.reduce_block);
}

std::int64_t attn_gemm_scratch_floats(std::int64_t C, std::int64_t hd, int B) {
  const std::int64_t nbt = (C + B - 1) / B;
  const std::int64_t tile = attn_gemm_detail::kTileRows * hd;  // one register tile
  // scores: X transposed in panels of 32 keys (C rounded up to 32, times hd); prefix / suffix: a
  // contiguous copy of X (C * hd), the suffix's strip of A's tile columns in halves (C * 8),
  // then the binary counter's tiles (at most one per level of the tree over nbt leaves).
  const std::int64_t xt = (C + 31) / 32 * 32 * hd;
  const std::int64_t levels = std::bit_width(static_cast<std::uint64_t>(nbt)) + 1;
  return std::max(xt, hd * C + attn_gemm_detail::kTileRows * C + levels * tile);
}

namespace {
AttnTile g_attn_tile = AttnTile::by_cpu;
}
void set_attn_tile(AttnTile t) {
  g_attn_tile = t;
}
bool attn_tile_halves(std::int64_t hd) {
  if (hd != 64 || g_attn_tile == AttnTile::whole) return false;
  return g_attn_tile == AttnTile::halves || cpu_vendor() == CpuVendor::intel;
}

void causal_scores(std::int64_t C, std::int64_t hd, const float* A, std::int64_t lda,
                   const float* X, std::int64_t ldx, float* S, float* scratch) {
  attn_gemm_detail::causal_scores_avx512(C, hd, A, lda, X, ldx, S, scratch);
}

void causal_prefix(std::int64_t C, std::int64_t hd, int B, bool tree, const float* P,
                   const float* X, std::int64_t ldx, float* Y, std::int64_t ldy, float* scratch,
                   AttnChecks* checks) {
  attn_gemm_detail::causal_prefix_avx512(C, hd, B, tree, attn_tile_halves(hd), P, X, ldx, Y, ldy,
                                         scratch, checks);
}

void causal_suffix(std::int64_t C, std::int64_t hd, int B, bool tree, const float* A,
                   const float* X, std::int64_t ldx, float* Y, std::int64_t ldy, float* scratch,
                   AttnChecks* checks) {
  attn_gemm_detail::causal_suffix_avx512(C, hd, B, tree, attn_tile_halves(hd), A, X, ldx, Y, ldy,
                                         scratch, checks);
}

}  // namespace lockstep
