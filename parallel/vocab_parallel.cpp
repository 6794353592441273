#include "parallel/vocab_parallel.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/row_max.hpp"
#include "runtime/transcendental.hpp"

namespace lockstep {

void vocab_embedding_forward(const TpContext& tp, const std::int32_t* tokens, std::int64_t T,
                             const float* E_l, std::int64_t vocab, std::int64_t d, float* out) {
  const std::int64_t vl = vocab / tp.size(), lo = vl * tp.rank();
  for (std::int64_t t = 0; t < T; ++t)
    check(tokens[t] >= 0 && tokens[t] < vocab,
          "embedding: token " + std::to_string(tokens[t]) + " at position " + std::to_string(t) +
              " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
          "check the tokenizer / dataset vocab against model.vocab");
#pragma omp parallel for num_threads(tp.kernel().threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t r = tokens[t] - lo;
    float* o = out + t * d;
    if (r >= 0 && r < vl) {
      std::copy(E_l + r * d, E_l + (r + 1) * d, o);
    } else {
      std::fill(o, o + d, kAdditiveIdentity);
    }
  }
  tp.allreduce_sum(std::span<float>(out, static_cast<std::size_t>(T * d)));
}

namespace {
// A sparse level: sorted distinct rows and their vectors.
struct SparseLevel {
  std::vector<std::int32_t> rows;
  std::vector<float> vals;  // rows.size() x width
};

// out = left (+) right: union of rows; a row on both sides is left + right.
SparseLevel merge(const SparseLevel& L, const SparseLevel& R, std::int64_t width) {
  SparseLevel o;
  o.rows.reserve(L.rows.size() + R.rows.size());
  o.vals.reserve((L.rows.size() + R.rows.size()) * width);
  std::size_t i = 0, j = 0;
  while (i < L.rows.size() || j < R.rows.size()) {
    if (j == R.rows.size() || (i < L.rows.size() && L.rows[i] < R.rows[j])) {
      o.rows.push_back(L.rows[i]);
      o.vals.insert(o.vals.end(), L.vals.begin() + i * width, L.vals.begin() + (i + 1) * width);
      ++i;
    } else if (i == L.rows.size() || R.rows[j] < L.rows[i]) {
      o.rows.push_back(R.rows[j]);
      o.vals.insert(o.vals.end(), R.vals.begin() + j * width, R.vals.begin() + (j + 1) * width);
      ++j;
    } else {
      o.rows.push_back(L.rows[i]);
      const float* a = L.vals.data() + i * width;
      const float* b = R.vals.data() + j * width;
      const std::size_t base = o.vals.size();
      o.vals.resize(base + width);
      for (std::int64_t e = 0; e < width; ++e) o.vals[base + e] = a[e] + b[e];
      ++i;
      ++j;
    }
  }
  return o;
}
// The dense form of token_row_grad: every row is present in every leaf (-0.0 where the block
// does not touch it). Same bits as the sparse form: a chain from -0.0 in token order per
// touched row, and x + -0.0 == -0.0 + x == x for every x, so merging a present row with an
// absent (-0.0) one is the sparse copy. Columns are independent, so threads split columns.
void token_row_grad_dense(const KernelCtx& ctx, const std::int32_t* row_of, std::int64_t T,
                          const float* dX, std::int64_t width, std::int64_t ld, std::int64_t row_lo,
                          std::int64_t rows, float* out) {
  const LeafTable leaves(AxisLeaves(ctx.rule(), T));
  const std::int64_t nblocks = leaves.count();
  const std::int64_t* bound = leaves.bounds();
  const std::uint8_t* merges = leaves.merges();
  if (nblocks == 0) {
    std::fill(out, out + rows * width, kAdditiveIdentity);
    return;
  }
  // The deepest the post-order stack gets (a tree over sequences, each over its blocks, can be
  // two levels taller than log2 of its leaf count).
  int levels = 0;
  for (std::int64_t b = 0, depth = 0; b < nblocks; ++b) {
    levels = std::max(levels, static_cast<int>(depth) + 1);
    depth = depth + 1 - merges[b];
  }
  const std::int64_t chunk = 64, nchunks = (width + chunk - 1) / chunk;
#pragma omp parallel num_threads(ctx.threads)
  {
    static thread_local std::vector<float> buf;
    const std::size_t need = static_cast<std::size_t>((levels + 1) * rows * chunk);
    if (buf.size() < need) buf.resize(need);
#pragma omp for schedule(static)
    for (std::int64_t c = 0; c < nchunks; ++c) {
      const std::int64_t c0 = c * chunk, w = std::min(chunk, width - c0), lvl = rows * chunk;
      float* leaf = buf.data();
      float* stack = leaf + lvl;
      int depth = 0;
      for (std::int64_t b = 0; b < nblocks; ++b) {
        std::fill(leaf, leaf + lvl, kAdditiveIdentity);
        for (std::int64_t t = bound[b]; t < bound[b + 1]; ++t) {
          const std::int64_t r = row_of[t] - row_lo;
          if (r < 0 || r >= rows) continue;
          float* acc = leaf + r * chunk;
          const float* x = dX + t * ld + c0;
          for (std::int64_t e = 0; e < w; ++e) acc[e] = acc[e] + x[e];
        }
        for (int k = merges[b]; k > 0; --k) {
          const float* left = stack + (depth - 1) * lvl;
          for (std::int64_t e = 0; e < lvl; ++e) leaf[e] = left[e] + leaf[e];
          --depth;
        }
        std::copy(leaf, leaf + lvl, stack + depth * lvl);
        ++depth;
      }
      float* acc = stack + (depth - 1) * lvl;
      for (int i = depth - 2; i >= 0; --i) {
        const float* left = stack + i * lvl;
        for (std::int64_t e = 0; e < lvl; ++e) acc[e] = left[e] + acc[e];
      }
      for (std::int64_t r = 0; r < rows; ++r)
        std::copy(acc + r * chunk, acc + r * chunk + w, out + r * width + c0);
    }
  }
}
}  // namespace

void token_row_grad(const KernelCtx& ctx, const std::int32_t* row_of, std::int64_t T,
                    const float* dX, std::int64_t width, std::int64_t ld, std::int64_t row_lo,
                    std::int64_t rows, float* out) {
  const LeafTable table(AxisLeaves(ctx.rule(), T));
  const std::int64_t nblocks = table.count();
  const std::int64_t* bound = table.bounds();
  if (rows * nblocks <= 4 * T)
    return token_row_grad_dense(ctx, row_of, T, dX, width, ld, row_lo, rows, out);
  // Leaves are built in parallel (each a pure function of its block), merged in order.
  std::vector<SparseLevel> leaves(static_cast<std::size_t>(nblocks));
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t b = 0; b < nblocks; ++b) {
    const std::int64_t t0 = bound[b], t1 = bound[b + 1];
    std::vector<std::int64_t> ts;
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t r = row_of[t] - row_lo;
      if (r >= 0 && r < rows) ts.push_back(t);
    }
    // Stable by row: tokens of one row stay in token order (the chain order).
    std::stable_sort(ts.begin(), ts.end(),
                     [&](std::int64_t x, std::int64_t y) { return row_of[x] < row_of[y]; });
    SparseLevel& lv = leaves[b];
    for (std::size_t k = 0; k < ts.size();) {
      const std::int32_t row = row_of[ts[k]];
      lv.rows.push_back(row);
      const std::size_t base = lv.vals.size();
      lv.vals.resize(base + width, kAdditiveIdentity);
      float* acc = lv.vals.data() + base;
      for (; k < ts.size() && row_of[ts[k]] == row; ++k) {
        const float* x = dX + ts[k] * ld;
        for (std::int64_t e = 0; e < width; ++e) acc[e] = acc[e] + x[e];
      }
    }
  }
  std::vector<SparseLevel> stack;
  for (std::int64_t b = 0; b < nblocks; ++b) {
    SparseLevel cur = std::move(leaves[static_cast<std::size_t>(b)]);
    for (int k = table.merges()[b]; k > 0; --k) {
      cur = merge(stack.back(), cur, width);
      stack.pop_back();
    }
    stack.push_back(std::move(cur));
  }
  std::fill(out, out + rows * width, kAdditiveIdentity);
  if (stack.empty()) return;
  SparseLevel acc = std::move(stack.back());
  for (int i = static_cast<int>(stack.size()) - 2; i >= 0; --i) acc = merge(stack[i], acc, width);
  for (std::size_t k = 0; k < acc.rows.size(); ++k)
    std::copy(acc.vals.begin() + k * width, acc.vals.begin() + (k + 1) * width,
              out + (acc.rows[k] - row_lo) * width);
}

void vocab_parallel_ce_forward(const TpContext& tp, float* logits_l, const std::int32_t* labels,
                               std::int64_t T, std::int64_t vocab, float* max, float* sumexp,
                               float* scratch, float* loss_tok) {
  const std::int64_t vl = vocab / tp.size(), lo = vl * tp.rank();
  const KernelCtx& ctx = tp.kernel();
  for (std::int64_t t = 0; t < T; ++t)
    check(labels[t] >= 0 && labels[t] < vocab,
          "cross-entropy: label " + std::to_string(labels[t]) + " at position " +
              std::to_string(t) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")",
          "check the dataset labels against model.vocab");
  // The scan's lanes may end on either zero of a zero maximum: allreduce_max makes it +0.0.
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) max[t] = row_detail::row_max(logits_l + t * vl, vl);
  tp.allreduce_max(std::span<float>(max, static_cast<std::size_t>(T)));
  float* part = scratch;  // [2, T]: sumexp partials, target logits
  const KernelCtx ctx1 = tp.kernel1();
  // 16 tokens at a time: their exponentials (16 rows of vl) are still in the cache when
  // row_sums sums them, a token in each vector lane.
  constexpr std::int64_t kGroup = 16;
  const RowCsums row_sums(ctx1, vl);
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t t0 = 0; t0 < T; t0 += kGroup) {
    const std::int64_t rows = std::min(kGroup, T - t0);
    for (std::int64_t t = t0; t < t0 + rows; ++t) {
      float* l = logits_l + t * vl;
      const std::int64_t y = labels[t] - lo;
      part[T + t] = (y >= 0 && y < vl) ? l[y] : kAdditiveIdentity;
      math::exp_shifted(ctx1, l, max[t], l, vl);  // exp(l - max): the difference, then exp
    }
    row_sums(logits_l + t0 * vl, rows, vl, part + t0);
  }
  tp.allreduce_sum(std::span<float>(part, static_cast<std::size_t>(2 * T)));
#pragma omp parallel for num_threads(ctx.threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) {
    sumexp[t] = part[t];
    loss_tok[t] = (math::ls_log(part[t]) + max[t]) - part[T + t];
  }
}

void vocab_parallel_ce_backward(const TpContext& tp, float* exp_l, const float* sumexp,
                                const std::int32_t* labels, std::int64_t T, std::int64_t vocab,
                                float loss_scale) {
  const std::int64_t vl = vocab / tp.size(), lo = vl * tp.rank();
#pragma omp parallel for num_threads(tp.kernel().threads) schedule(static)
  for (std::int64_t t = 0; t < T; ++t) {
    float* g = exp_l + t * vl;
    const float s = sumexp[t];
    const std::int64_t y = labels[t] - lo;
    const bool owner = y >= 0 && y < vl;
    const float ey = owner ? g[y] : 0.0f;
    for (std::int64_t v = 0; v < vl; ++v) g[v] = (g[v] / s) * loss_scale;
    if (owner) g[y] = ((ey / s) - 1.0f) * loss_scale;
  }
}

}  // namespace lockstep
