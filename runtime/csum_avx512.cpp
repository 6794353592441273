// The avx512 path of RowCsums (runtime/csum.cpp's dispatch, after validate() checked the ISA): 16 rows summed at once, one per lane of a vector. Same bits as the literal csum of each
// row (docs/design.md section 2).
#include <cstdint>

#include "runtime/csum.hpp"
#include "runtime/simd_avx512.hpp"

namespace lockstep::csum_detail {

// Rows 0..15 of X (row stride ld), each summed over the leaves [bound[l], bound[l + 1]) for
// l < leaves, every bound a multiple of 16: each 16 x 16 block is transposed so that step k of
// the 16 rows' leaf chains is one vector add (acc + x, from -0.0, k increasing), and the leaf
// results are merged by the tree's schedule on vectors (older + newer), the post-order counter
// of csum_counter.hpp with a row in each lane.
void row_sums16_avx512(const float* X, std::int64_t ld, const std::int64_t* bound,
                       const std::uint8_t* merges, std::int64_t leaves, float* out) {
  using V = simd::Avx512;
  alignas(64) float t[16 * 16];
  V::reg level[64];
  int depth = 0;
  for (std::int64_t l = 0; l < leaves; ++l) {
    V::reg acc = V::set1(kAdditiveIdentity);
    for (std::int64_t k0 = bound[l]; k0 < bound[l + 1]; k0 += 16) {
      V::transpose(X + k0, ld, t, 16);
      for (int k = 0; k < 16; ++k) acc = V::add(acc, V::load(t + k * 16));
    }
    for (int k = merges[l]; k > 0; --k) acc = V::add(level[--depth], acc);
    level[depth++] = acc;
  }
  V::reg root = V::set1(kAdditiveIdentity);
  if (depth > 0) {  // a complete schedule leaves one level; else fold from the right, as
    root = level[depth - 1];  // RowCounters::result does
    for (int i = depth - 2; i >= 0; --i) root = V::add(level[i], root);
  }
  V::storeu(out, root);
}

}  // namespace lockstep::csum_detail
