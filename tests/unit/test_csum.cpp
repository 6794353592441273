// Bitwise tests of the canonical sum (docs/design.md section 2) against an independent, literal
// recursive definition of both trees (pow2 and halving, flat and over sequences), and of its
// shard/thread/ISA independence.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "parallel/microbatch_plan.hpp"
#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
using lockstep::testing::bits;
using lockstep::testing::mixed_floats;
using lockstep::testing::same_bits;

namespace {
constexpr TreeShape kShapes[] = {TreeShape::pow2, TreeShape::halving};

// The split of a node of n >= 2 leaves, from the contract's text (no code shared with
// runtime/reduce_tree.cpp).
std::int64_t literal_split(TreeShape shape, std::int64_t n) {
  if (shape == TreeShape::halving) return n - n / 2;  // ceil(n / 2)
  std::int64_t p = 1;
  while (2 * p < n) p = 2 * p;
  return p;
}
// Leaf values of x[lo, hi) cut into chains of B from -0.0 (the last may be short).
std::vector<float> chains(const std::vector<float>& x, std::int64_t lo, std::int64_t hi, int B) {
  std::vector<float> out;
  for (std::int64_t b = lo; b < hi; b += B) {
    float acc = -0.0f;
    for (std::int64_t k = b; k < std::min(hi, b + B); ++k) acc += x[k];
    out.push_back(acc);
  }
  return out;
}
float literal_tree(TreeShape shape, const std::vector<float>& v, std::int64_t lo, std::int64_t hi) {
  if (hi - lo == 1) return v[lo];
  const std::int64_t mid = lo + literal_split(shape, hi - lo);
  return literal_tree(shape, v, lo, mid) + literal_tree(shape, v, mid, hi);
}
float fold(TreeShape shape, const std::vector<float>& v) {
  return v.empty() ? -0.0f : literal_tree(shape, v, 0, static_cast<std::int64_t>(v.size()));
}
// The literal csum: flat, or (seq > 0) a tree over sequences of seq elements, each a tree over
// its own chains.
float literal_csum(const std::vector<float>& x, int B, TreeShape shape, std::int64_t seq = 0) {
  const auto n = static_cast<std::int64_t>(x.size());
  if (seq == 0) return fold(shape, chains(x, 0, n, B));
  std::vector<float> per_seq;
  for (std::int64_t s = 0; s < n; s += seq) per_seq.push_back(fold(shape, chains(x, s, s + seq, B)));
  return fold(shape, per_seq);
}
}  // namespace

TEST_CASE("csum equals the literal contract for both trees, many lengths and block sizes") {
  for (TreeShape shape : kShapes)
    for (int B : {1, 2, 7, 16, 64, 100})
      for (std::size_t n : {0, 1, 2, 3, 63, 64, 65, 127, 128, 129, 320, 384, 1000, 4096, 5000}) {
        auto x = mixed_floats(n, 1000 + n * 7 + B);
        INFO("tree=" << enum_name(shape) << " B=" << B << " n=" << n);
        REQUIRE(bits(csum(x.data(), n, SumRule{B, shape})) == bits(literal_csum(x, B, shape)));
      }
}

TEST_CASE("csum over sequences: a tree over sequences, each over its own blocks") {
  for (int B : {16, 64})
    for (std::int64_t seq : {16, 64, 96, 100, 256})
      for (std::int64_t S : {1, 2, 3, 6, 12}) {
        auto x = mixed_floats(static_cast<std::size_t>(S * seq), 77 + S + seq);
        const SumRule rule = SumRule{B, TreeShape::halving}.over_sequences(seq);
        INFO("B=" << B << " seq=" << seq << " S=" << S);
        REQUIRE(bits(csum(x.data(), S * seq, rule)) ==
                bits(literal_csum(x, B, TreeShape::halving, seq)));
      }
  // pow2 keeps the flat token axis (contract v1).
  REQUIRE(SumRule{64, TreeShape::pow2}.over_sequences(96).segment == 0);
}

TEST_CASE("both trees agree whenever the leaf count is a power of two") {
  for (std::int64_t leaves : {1, 2, 4, 8, 16, 64, 256}) {
    auto x = mixed_floats(static_cast<std::size_t>(leaves * 16), 5 + leaves);
    REQUIRE(bits(csum(x.data(), leaves * 16, SumRule{16, TreeShape::pow2})) ==
            bits(csum(x.data(), leaves * 16, SumRule{16, TreeShape::halving})));
  }
  // ... and differ at 5 of them (pow2 cuts 4 + 1, halving 3 + 2): the contract really changed.
  const std::vector<float> x = {1.0f, 0x1p-24f, 0x1p-24f, 0x1p-24f, 0x1p-24f};
  REQUIRE(bits(csum(x.data(), 5, SumRule{1, TreeShape::pow2})) !=
          bits(csum(x.data(), 5, SumRule{1, TreeShape::halving})));
}

TEST_CASE("csum is accurate against a float64 sum") {
  auto x = mixed_floats(100000, 5);
  double ref = 0, mag = 0;
  for (float v : x) ref += v, mag += std::fabs(v);
  for (TreeShape shape : kShapes)
    REQUIRE(std::fabs(csum(x.data(), x.size(), SumRule{64, shape}) - ref) <= 1e-6 * mag);
}

TEST_CASE("csum keeps IEEE's additive identity: empty sums and zeros keep their sign") {
  REQUIRE(bits(csum(nullptr, 0, SumRule{64})) == bits(-0.0f));
  std::vector<float> negz(200, -0.0f);
  REQUIRE(bits(csum(negz.data(), negz.size(), SumRule{64})) == bits(-0.0f));
  std::vector<float> mixed = {-0.0f, 0.0f};
  REQUIRE(bits(csum(mixed.data(), 2, SumRule{1})) == bits(0.0f));
  float one = 1.0f, mone = -1.0f;
  REQUIRE(bits(cdot(&one, &mone, 1, SumRule{64})) == bits(-1.0f));
}

TEST_CASE("halving: 2^j equal shards of a non-power-of-two block count combine to the whole") {
  const int B = 64;
  for (std::int64_t blocks : {6, 12, 24, 48, 192}) {
    auto x = mixed_floats(static_cast<std::size_t>(blocks * B - 17), 42 + blocks);  // short last
    const SumRule rule{B, TreeShape::halving};
    const float whole = csum(x.data(), x.size(), rule);
    for (int shards : {2, 4, 8, 16, 64}) {
      if (blocks % shards != 0) continue;
      const std::int64_t per = blocks / shards * B;
      std::vector<float> parts;
      for (int s = 0; s < shards; ++s) {
        const std::int64_t lo = s * per, hi = std::min<std::int64_t>(x.size(), lo + per);
        parts.push_back(csum(x.data() + lo, hi - lo, rule));
      }
      INFO("blocks=" << blocks << " shards=" << shards);
      REQUIRE(bits(fold(TreeShape::halving, parts)) == bits(whole));
      // the pow2 tree has no node at these cuts (3 of 6 blocks...) unless blocks/shards is 2^k
    }
  }
}

TEST_CASE("pow2: aligned power-of-two shards combined by the tree equal the unsplit csum") {
  const int B = 64;
  for (std::int64_t blocks : {8, 16, 13}) {  // 13: the last shard is short
    auto x = mixed_floats(blocks * B - (blocks == 13 ? 17 : 0), 42 + blocks);
    const SumRule rule{B, TreeShape::pow2};
    const float whole = csum(x.data(), x.size(), rule);
    for (int shards : {2, 4, 8}) {
      const std::int64_t per = (blocks == 13 ? 16 : blocks) / shards * B;
      std::vector<float> parts;
      for (int s = 0; s < shards; ++s) {
        const std::int64_t lo = std::min<std::int64_t>(x.size(), s * per);
        const std::int64_t hi = std::min<std::int64_t>(x.size(), lo + per);
        if (hi > lo) parts.push_back(csum(x.data() + lo, hi - lo, rule));
      }
      INFO("blocks=" << blocks << " shards=" << shards);
      REQUIRE(bits(tree_fold(TreeShape::pow2, std::span<const float>(parts),
                             [](float a, float b) { return a + b; })) == bits(whole));
    }
  }
}

TEST_CASE("the tree has a node at every k * n / 2^j cut (halving) and merges_after_node says so") {
  for (std::int64_t n : {3, 5, 6, 7, 12, 24, 48, 96, 192, 384, 1000}) {
    for (std::int64_t parts = 2; parts <= n; parts *= 2) {
      if (n % parts != 0) continue;
      for (std::int64_t k = 0; k < parts; ++k)
        REQUIRE(merges_after_node(TreeShape::halving, n, k * n / parts, (k + 1) * n / parts) >= 0);
    }
    REQUIRE(merges_after_node(TreeShape::halving, n, 0, n) == 0);
  }
  REQUIRE(merges_after_node(TreeShape::halving, 6, 2, 4) == -1);  // straddles 3
  REQUIRE(merges_after_node(TreeShape::pow2, 12, 0, 6) == -1);   // pow2 cuts 12 at 8
}

TEST_CASE("TreeCombiner over a microbatch plan equals the literal tree, for any microbatch") {
  // 2,100 elements: the merges run in blocks of 1,024 (runtime/csum.cpp), the last one short
  for (const int len : {3, 2100})
    for (TreeShape shape : kShapes)
      for (std::int64_t seqs : {1, 3, 4, 6, 7, 12, 16})
        for (std::int64_t mb = 1; mb <= seqs; ++mb) {
          if (shape == TreeShape::pow2 && seqs % mb != 0) continue;
          const MicrobatchPlan plan = plan_microbatches(shape, seqs, mb);
          auto leaf = mixed_floats(static_cast<std::size_t>(plan.leaves * len), 9 + seqs * 31 + mb);
          TreeCombiner c(len, shape, plan.leaves);
          std::int64_t at = 0;
          std::vector<std::int64_t> widths;
          for (const Microbatch& m : plan.passes) {
            widths.push_back(m.width);
            REQUIRE(m.count <= mb);
            // the node's own value: the literal tree over its leaves
            std::vector<float> node(static_cast<std::size_t>(len));
            for (int e = 0; e < len; ++e) {
              std::vector<float> col;
              for (std::int64_t i = at; i < at + m.width; ++i) col.push_back(leaf[i * len + e]);
              node[e] = fold(shape, col);
            }
            c.push_node(node.data(), m.width);
            at += m.width;
          }
          std::vector<float> got(static_cast<std::size_t>(len));
          c.result(got.data());
          for (int e = 0; e < len; ++e) {
            std::vector<float> col;
            for (std::int64_t i = 0; i < plan.leaves; ++i) col.push_back(leaf[i * len + e]);
            INFO("tree=" << enum_name(shape) << " seqs=" << seqs << " mb=" << mb);
            REQUIRE(bits(got[e]) == bits(fold(shape, col)));
            REQUIRE(bits(c.root()[e]) == bits(got[e]));
          }
          // It never held more buffers than the deepest stack of the plan (memory_estimate).
          REQUIRE(c.buffers() == TreeCombiner::peak_levels(shape, plan.leaves, widths));
        }
  // The stack depths the memory estimate counts: ceil(log2 m) for a power of two, else fewer.
  auto singles = [](std::int64_t m) { return std::vector<std::int64_t>(m, 1); };
  REQUIRE(TreeCombiner::peak_levels(TreeShape::halving, 12, singles(12)) == 3);
  REQUIRE(TreeCombiner::peak_levels(TreeShape::halving, 6, singles(6)) == 2);
  REQUIRE(TreeCombiner::peak_levels(TreeShape::halving, 8, singles(8)) == 3);
  REQUIRE(TreeCombiner::peak_levels(TreeShape::pow2, 8, singles(8)) == 3);
  REQUIRE(TreeCombiner::peak_levels(TreeShape::halving, 2, singles(2)) == 1);
  REQUIRE(TreeCombiner::peak_levels(TreeShape::halving, 1, singles(1)) == 1);
  // a microbatch of 2 in a 6-sequence rank is the nodes 2, 1, 2, 1 of the halving tree
  const MicrobatchPlan p = plan_microbatches(TreeShape::halving, 6, 2);
  REQUIRE(p.passes.size() == 4);
  REQUIRE(p.passes[1].count == 1);
  TreeCombiner bad(1, TreeShape::halving, 6);
  const float v = 1.0f;
  bad.push_node(&v, 2);
  REQUIRE_THROWS_AS(bad.push_node(&v, 2), Error);  // [2, 4) is not a node
  REQUIRE_THROWS_AS(plan_microbatches(TreeShape::pow2, 6, 4), Error);
}

TEST_CASE("TreeCombiner: streamed nodes into the caller's root buffer equal pushed nodes") {
  // The training loop's path (launch/train/grad_sync.cpp): a node that opens a level is written
  // into the buffer open_node returns, one that merges arrives in pieces in any order; level 0
  // is the caller's buffer, which ends holding the root. Same bits as push_node, one buffer
  // (the caller's) counted in peak_levels.
  const std::int64_t len = 70000;  // above the threaded-merge threshold
  for (TreeShape shape : kShapes)
    for (std::int64_t seqs : {2, 3, 6, 12})
      for (std::int64_t mb : {std::int64_t{1}, std::int64_t{2}, seqs}) {
        if (shape == TreeShape::pow2 && seqs % mb != 0) continue;
        const MicrobatchPlan plan = plan_microbatches(shape, seqs, mb);
        const auto n = static_cast<std::size_t>(len);
        for (int threads : {1, 2}) {
          TreeCombiner pushed(len, shape, plan.leaves, threads);
          TreeCombiner streamed(len, shape, plan.leaves, threads);
          AlignedVector<float> root(n);
          for (int step = 0; step < 2; ++step) {  // the second step reuses every buffer
            pushed.clear();
            streamed.clear();
            streamed.set_root_buffer(root.data());
            std::vector<std::int64_t> widths;
            for (std::size_t i = 0; i < plan.passes.size(); ++i) {
              const std::int64_t w = plan.passes[i].width;
              widths.push_back(w);
              const auto node = mixed_floats(n, 7 + step * 101 + static_cast<int>(i) * 13 + seqs);
              pushed.push_node(node.data(), w);
              if (float* level = streamed.open_node(w)) {
                if (i == 0) REQUIRE(level == root.data());
                std::copy(node.begin(), node.end(), level);
                continue;
              }
              // pieces: the back half first, then the front in two
              const std::int64_t h = len / 2, q = len / 5;
              streamed.merge_part(h, node.data() + h, len - h);
              REQUIRE_THROWS_AS(streamed.close_node(), Error);  // half merged
              streamed.merge_part(0, node.data(), q);
              streamed.merge_part(q, node.data() + q, h - q);
              streamed.close_node();
            }
            REQUIRE(streamed.root() == root.data());
            REQUIRE(same_bits(root.data(), pushed.root(), len));
            std::vector<float> out(n);
            streamed.result(out.data());
            REQUIRE(same_bits(out.data(), root.data(), len));
            streamed.result(root.data());  // onto itself: nothing to copy
            REQUIRE(same_bits(root.data(), pushed.root(), len));
            INFO("tree=" << enum_name(shape) << " seqs=" << seqs << " mb=" << mb);
            REQUIRE(streamed.buffers() == TreeCombiner::peak_levels(shape, plan.leaves, widths));
          }
        }
      }
  TreeCombiner c(4, TreeShape::halving, 3);
  const float v[4] = {1, 2, 3, 4};
  REQUIRE_THROWS_AS(c.merge_part(0, v, 4), Error);  // no streamed node open
  REQUIRE(c.open_node(1) != nullptr);
  REQUIRE_THROWS_AS(c.set_root_buffer(nullptr), Error);  // leaves pushed already
  REQUIRE(c.open_node(1) == nullptr);                    // [1, 2) merges into [0, 2)
  REQUIRE_THROWS_AS(c.open_node(1), Error);              // the open node is not closed
  REQUIRE_THROWS_AS(c.merge_part(2, v, 4), Error);       // past the end
  c.merge_part(0, v, 4);
  c.close_node();
  // a node of +0.0 (a pipeline stage's terms of other stages: part null), over several blocks
  const std::int64_t nz = 2100;
  auto x = mixed_floats(static_cast<std::size_t>(nz), 5);
  x[7] = -0.0f;
  TreeCombiner z(nz, TreeShape::halving, 2);
  std::copy(x.begin(), x.end(), z.open_node(1));
  REQUIRE(z.open_node(1) == nullptr);
  z.merge_part(0, nullptr, nz);
  z.close_node();
  for (std::int64_t e = 0; e < nz; ++e) REQUIRE(bits(z.root()[e]) == bits(x[e] + 0.0f));
}

TEST_CASE("csum_rows equals per-column csum, for any thread count, ISA and tree") {
  for (TreeShape shape : kShapes)
    for (int B : {1, 7, 64})
      for (auto [rows, cols] : {std::pair{1, 1}, {3, 300}, {200, 17}, {640, 513}}) {
        auto x = mixed_floats(static_cast<std::size_t>(rows) * (cols + 3), rows * 31 + cols);
        std::vector<float> want(cols);
        for (int j = 0; j < cols; ++j)
          want[j] = csum(x.data() + j, rows, SumRule{B, shape}, cols + 3);
        for (Isa isa : supported_isas())
          for (int threads : {1, 2, 3}) {
            std::vector<float> got(cols, 123.0f);
            csum_rows(KernelCtx{isa, threads, B, shape}, x.data(), rows, cols, cols + 3,
                      got.data());
            INFO("B=" << B << " rows=" << rows << " cols=" << cols << " threads=" << threads);
            REQUIRE(same_bits(got.data(), want.data(), cols));
          }
      }
}

TEST_CASE("RowCsums equals the literal csum of each row, for any ISA, thread count and tree") {
  // 16-row groups take the AVX-512 path where cols and every leaf bound are multiples of 16
  // (B 16, 64); B 7 and cols 300 take the literal loop; 37 and 35 rows leave partial groups.
  for (TreeShape shape : kShapes)
    for (int B : {7, 16, 64})
      for (auto [rows, cols] : {std::pair{1, 16}, {16, 64}, {37, 1024}, {35, 300}, {33, 2000}}) {
        const std::int64_t ld = cols + 5;
        auto x = mixed_floats(static_cast<std::size_t>(rows * ld), rows * 17 + cols + B);
        std::vector<float> want(rows);
        for (int r = 0; r < rows; ++r)
          want[r] = literal_csum(std::vector<float>(x.begin() + r * ld, x.begin() + r * ld + cols),
                                 B, shape);
        for (Isa isa : supported_isas())
          for (int threads : {1, 2, 3}) {
            std::vector<float> got(rows, 123.0f);
            RowCsums(KernelCtx{isa, threads, B, shape}, cols)(x.data(), rows, ld, got.data());
            INFO("isa=" << isa_name(isa) << " B=" << B << " rows=" << rows << " cols=" << cols
                        << " threads=" << threads);
            REQUIRE(same_bits(got.data(), want.data(), rows));
          }
      }
  // A token axis of sequences: 96 (leaves of 64 and 32, bounds multiples of 16) and 40 (not).
  for (std::int64_t seq : {96, 40}) {
    const std::int64_t rows = 20, cols = 4 * seq;
    auto x = mixed_floats(static_cast<std::size_t>(rows * cols), seq);
    std::vector<float> want(rows), got(rows);
    for (std::int64_t r = 0; r < rows; ++r)
      want[r] = literal_csum(std::vector<float>(x.begin() + r * cols, x.begin() + (r + 1) * cols),
                             64, TreeShape::halving, seq);
    const KernelCtx tok = KernelCtx{best_isa(), 2, 64, TreeShape::halving}.over_sequences(seq);
    RowCsums(tok, cols)(x.data(), rows, cols, got.data());
    INFO("seq=" << seq);
    REQUIRE(same_bits(got.data(), want.data(), rows));
  }
  REQUIRE_THROWS_AS(RowCsums(KernelCtx{}, 8)(nullptr, 1, 4, nullptr), Error);  // ld < cols
}

TEST_CASE("csum_rows over sequences: DP shards of whole sequences combine to the whole") {
  const int B = 64, len = 5;
  const std::int64_t seq = 96, S = 12;  // a context that is not a multiple of B
  auto x = mixed_floats(static_cast<std::size_t>(S * seq * len), 3);
  const KernelCtx tok = KernelCtx{Isa::scalar, 2, B, TreeShape::halving}.over_sequences(seq);
  std::vector<float> whole(len), want(len);
  csum_rows(tok, x.data(), S * seq, len, len, whole.data());
  std::vector<float> col(static_cast<std::size_t>(S * seq));
  for (int j = 0; j < len; ++j) {
    for (std::int64_t t = 0; t < S * seq; ++t) col[t] = x[t * len + j];
    want[j] = literal_csum(col, B, TreeShape::halving, seq);
  }
  REQUIRE(same_bits(whole.data(), want.data(), len));
  for (int shards : {2, 4}) {
    std::vector<std::vector<float>> parts(shards, std::vector<float>(len));
    std::vector<const float*> ptrs;
    const std::int64_t per = S / shards;
    for (int s = 0; s < shards; ++s) {
      csum_rows(tok, x.data() + s * per * seq * len, per * seq, len, len, parts[s].data());
      ptrs.push_back(parts[s].data());
    }
    std::vector<float> got(len);
    tree_sum(TreeShape::halving, ptrs, len, got.data());
    INFO("shards=" << shards);
    REQUIRE(same_bits(got.data(), whole.data(), len));
  }
}

TEST_CASE("tree_sum over parts equals tree_fold per element") {
  for (TreeShape shape : kShapes)
    for (int P : {1, 2, 3, 4, 5, 6, 8}) {
      std::vector<std::vector<float>> data;
      std::vector<const float*> ptrs;
      for (int p = 0; p < P; ++p) data.push_back(mixed_floats(33, 500 + p));
      for (auto& d : data) ptrs.push_back(d.data());
      std::vector<float> out(33);
      tree_sum(shape, ptrs, 33, out.data());
      for (int e = 0; e < 33; ++e) {
        std::vector<float> leaves;
        for (int p = 0; p < P; ++p) leaves.push_back(data[p][e]);
        REQUIRE(bits(out[e]) == bits(fold(shape, leaves)));
      }
    }
}

TEST_CASE("a bad block size is refused with a hint") {
  float x = 1.0f;
  REQUIRE_THROWS_WITH(csum(&x, 1, SumRule{0}), Catch::Contains("reduce_block"));
}
