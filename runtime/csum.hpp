// The canonical sum of docs/design.md section 2, written out literally, plus the streaming
// combiner of subtree results (microbatches) and the elementwise tree over parts (K shards,
// ranks).
//
// csum(x[0..n)) under a SumRule (block B, tree shape, runtime/reduce_tree.hpp):
//   1. split the axis into leaves of B consecutive elements (the last may be short; on a token
//      axis of sequences the leaves restart at each sequence);
//   2. each leaf is a left-to-right chain starting from -0.0 (IEEE's additive identity):
//      acc += x_k for sums, acc = fma(a_k, b_k, acc) for dot products;
//   3. leaf results are combined by the tree T of the rule's shape (pow2 or halving).
// Determinism contract: the result depends only on the values and the rule, never on
// threads, ISA, tiling or how the axis is sharded, provided each shard owns a node of the
// tree (halving: 2^j equal shards of whole leaves or whole sequences; pow2: a power-of-two
// number of whole blocks), whose local csum is then a subtree of the global one.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/aligned_vector.hpp"
#include "runtime/isa.hpp"
#include "runtime/reduce_tree.hpp"

namespace lockstep {

// IEEE additive identity: -0.0 + x == x for every x, including x == +0.0 and x == -0.0.
inline constexpr float kAdditiveIdentity = -0.0f;

// T(0, n) over n leaf values in the shape's association, combined with `add` (commutative; its
// association is what the tree fixes). Returns -0.0 for n == 0.
template <class T, class Add>
T tree_fold(TreeShape shape, std::span<const T> leaves, Add add) {
  if (leaves.empty()) return T(kAdditiveIdentity);
  if (leaves.size() == 1) return leaves[0];
  const auto h = static_cast<std::size_t>(tree_split(shape, static_cast<std::int64_t>(leaves.size())));
  return add(tree_fold(shape, leaves.first(h), add), tree_fold(shape, leaves.subspan(h), add));
}

// The streaming form of T over a known number of leaves (a rank's sequences or microbatches):
// push nodes of the tree left to right (single leaves, or pre-merged subtrees); each push
// merges with the stack as the tree's post order says (older + newer), so after the last
// leaf one value is left, T(0, leaves). For pow2 and single leaves this is the binary counter.
// A pushed node is read where it is: it is copied only when it starts a new stack level (no
// merge follows it); otherwise its merges run in one pass and land in the oldest level they
// fold. So the combiner holds peak_levels(...) buffers of len floats, not one more.
// A node may also be streamed (open_node / merge_part / close_node): written straight into
// its new level, or merged piece by piece as its producer finishes pieces, so the producer
// needs no buffer of len floats of its own. Level 0, which ends as the root, may be the
// caller's buffer (set_root_buffer): then the result is already where the caller wants it.
// Every path does the same adds per element, so the bits never depend on which is used.
class TreeCombiner {
 public:
  // threads > 1 splits the elementwise copies and merges (every element's adds are the same).
  TreeCombiner(std::int64_t len, TreeShape shape, std::int64_t leaves, int threads = 1)
      : len_(len), shape_(shape), total_(leaves), threads_(threads) {}
  // Adds the next leaf (a vector of len values, one per output element).
  void push(const float* leaf) { push_node(leaf, 1); }
  // Adds the subtree over leaves [leaves(), leaves() + width), already merged. Throws if that
  // range is not a node of the tree. `node` is not kept: the caller may reuse it on return.
  void push_node(const float* node, std::int64_t width);
  // Streams the node over leaves [leaves(), leaves() + width) (throws if it is not a node).
  // Returns the new stack level's buffer (len floats, 64-byte aligned) when the node opens
  // one: the caller writes the whole node there before the next call. Otherwise returns
  // nullptr: the caller then hands the node over as merge_part() pieces that cover [0, len)
  // once each, in any order, and calls close_node().
  float* open_node(std::int64_t width);
  // Merges node elements [offset, offset + n) (the pending node's, from `part`; nullptr: the
  // elements are +0.0, as a pipeline stage's terms of other stages).
  void merge_part(std::int64_t offset, const float* part, std::int64_t n);
  // Ends the pending node; throws unless its pieces added up to len elements.
  void close_node();
  // Level 0 lives in `root` (len floats, kept by the caller; nullptr: the combiner's own) from
  // the next node on. Only while no leaf is pushed (after clear()).
  void set_root_buffer(float* root);
  // Writes T over everything pushed (len values); -0.0 if nothing was pushed. Throws unless
  // every leaf was pushed. Copies nothing when `out` is the root buffer.
  void result(float* out) const;
  // T over everything pushed, held by the combiner until the next push or clear(). Throws
  // unless every leaf was pushed (and at least one was).
  const float* root() const;
  std::int64_t leaves() const { return count_; }
  std::int64_t total() const { return total_; }
  // Buffers of len floats the combiner holds now (stack levels and recycled ones), the
  // caller's root buffer included while it holds level 0.
  std::int64_t buffers() const;
  // The most stack levels (len-float buffers) a combiner over `leaves` leaves holds when fed
  // nodes of these widths, in order (their sum is `leaves`).
  static std::int64_t peak_levels(TreeShape shape, std::int64_t leaves,
                                  std::span<const std::int64_t> widths);
  // Forgets every leaf (keeps the buffers for reuse); a new total if given.
  void clear();
  void clear(std::int64_t total) { clear(), total_ = total; }

 private:
  int merges_of(std::int64_t width) const;  // throws unless the next `width` leaves are a node
  float* new_level();

  std::int64_t len_;
  TreeShape shape_;
  std::int64_t total_;
  int threads_;
  std::int64_t count_ = 0;
  int pending_ = 0;                        // merges of the node being streamed (0: none)
  std::int64_t pending_n_ = 0;             // its elements merged so far
  float* root_ = nullptr;                  // the caller's level-0 buffer
  std::vector<float*> stack_;              // level buffers, oldest first
  std::vector<float*> spare_;              // own buffers off the stack, for reuse
  std::vector<AlignedVector<float>> own_;  // every buffer the combiner allocated
};

// Canonical sum of x[0], x[stride], ... (n terms) under `rule`. The literal contract.
float csum(const float* x, std::int64_t n, const SumRule& rule, std::int64_t stride = 1);
// Canonical dot product: leaves are FMA chains from -0.0.
float cdot(const float* a, const float* b, std::int64_t n, const SumRule& rule,
           std::int64_t stride_a = 1, std::int64_t stride_b = 1);
// Column sums out[j] = csum_i X[i*ld + j] over `rows` rows under ctx.rule() (a token axis when
// ctx.sequence > 0): the bias-gradient and LayerNorm-weight-gradient reduction over tokens.
// Vectorized over j (never over i), so every path gives the literal csum bits; ctx.threads
// split columns.
void csum_rows(const KernelCtx& ctx, const float* X, std::int64_t rows, std::int64_t cols,
               std::int64_t ld, float* out);
// Row sums out[i] = csum(X + i * ld, cols, ctx.rule()) for rows of `cols` values: the literal
// csum's bits on every path. The AVX-512 path sums 16 rows at once, a row in each lane (16 x 16
// blocks transposed, so that step k of the rows' leaf chains is one vector add, the leaves
// merged by the tree's schedule on vectors), where cols and every leaf bound are multiples of
// 16; other rows take the literal loop. ctx.threads split the rows. The leaves are laid out
// once, at construction, for every call (the cross-entropy calls it per 16 tokens).
class RowCsums {
 public:
  RowCsums(const KernelCtx& ctx, std::int64_t cols);  // throws on an invalid ctx
  void operator()(const float* X, std::int64_t rows, std::int64_t ld, float* out) const;

 private:
  KernelCtx ctx_;
  std::int64_t cols_;
  LeafTable leaves_;
  bool blocks16_ = false;  // the AVX-512 path applies
};
// Elementwise tree over parts: out[e] = T(parts[0][e], ..., parts[P-1][e]) in the shape's
// association. This is how the nodes that K shards, ranks or microbatches own combine.
void tree_sum(TreeShape shape, std::span<const float* const> parts, std::int64_t n, float* out);

}  // namespace lockstep
