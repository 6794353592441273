// The canonical sum of docs/design.md section 2, written out literally, plus the canonical tree
// used to combine subtree results (GEMM K panels, microbatches, ranks).
//
// csum(x[0..n)) with block size B:
//   1. split the axis into blocks of B consecutive elements (the last may be short);
//   2. each block is a left-to-right chain starting from -0.0 (IEEE's additive identity):
//      acc += x_k for sums, acc = fma(a_k, b_k, acc) for dot products;
//   3. block results are combined by T(lo, hi): a leaf if hi - lo == 1, else
//      T(lo, lo + p) + T(lo + p, hi) with p the largest power of two < hi - lo.
// Determinism contract: the result depends only on the values and B, never on threads,
// ISA, tiling or how the axis is sharded, provided each shard owns a power-of-two number
// of whole blocks (then its local csum is a subtree of the global one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/isa.hpp"

namespace lockstep {

// IEEE additive identity: -0.0 + x == x for every x, including x == +0.0 and x == -0.0.
inline constexpr float kAdditiveIdentity = -0.0f;

// T(0, n) over n leaf values, combined with `add` (commutative; its association is what
// the tree fixes). Returns -0.0 for n == 0.
template <class T, class Add>
T tree_fold(std::span<const T> leaves, Add add) {
  if (leaves.empty()) return T(kAdditiveIdentity);
  if (leaves.size() == 1) return leaves[0];
  std::size_t p = 1;
  while (p * 2 < leaves.size()) p *= 2;
  return add(tree_fold(leaves.first(p), add), tree_fold(leaves.subspan(p), add));
}

// The streaming form of T: push leaves (or aligned subtrees of equal size) left to right;
// equal-sized neighbours merge as soon as both exist (a binary counter), and result()
// folds what is left from the right. For n leaves pushed one at a time, result() == T(0, n).
class BinaryCounter {
 public:
  explicit BinaryCounter(std::int64_t len) : len_(len) {}
  // Adds one leaf (a vector of len values, one per output element) of weight 1.
  void push(const float* leaf);
  // Pushes a subtree that already covers `weight` leaves (a power of two). It must be
  // aligned: the number of leaves pushed so far must be a multiple of weight.
  void push_subtree(const float* subtree, std::int64_t weight);
  // Writes T over everything pushed (len values); -0.0 if nothing was pushed.
  void result(float* out) const;
  std::int64_t leaves() const { return count_; }
  // Forgets every leaf (keeps the buffers for reuse).
  void clear();

 private:
  struct Level {
    std::int64_t weight;
    std::vector<float> values;
  };
  std::int64_t len_;
  std::int64_t count_ = 0;
  std::vector<Level> stack_;
  std::vector<std::vector<float>> spare_;  // recycled level buffers
};

// Canonical sum of x[0], x[stride], ... (n terms), block B. The literal contract.
float csum(const float* x, std::int64_t n, int block, std::int64_t stride = 1);
// Canonical dot product: blocks are FMA chains from -0.0.
float cdot(const float* a, const float* b, std::int64_t n, int block, std::int64_t stride_a = 1,
           std::int64_t stride_b = 1);
// Column sums out[j] = csum_i X[i*ld + j] over `rows` rows: the bias-gradient and
// LayerNorm-weight-gradient reduction over tokens. Vectorized over j (never over i), so
// every path gives the literal csum bits; ctx.threads split columns.
void csum_rows(const KernelCtx& ctx, const float* X, std::int64_t rows, std::int64_t cols,
               std::int64_t ld, float* out);
// Elementwise canonical tree over parts: out[e] = T(parts[0][e], ..., parts[P-1][e]).
// This is how 2^j aligned subtrees (K shards, ranks, microbatches) combine.
void tree_sum(std::span<const float* const> parts, std::int64_t n, float* out);

}  // namespace lockstep
