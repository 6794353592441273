#include "runtime/random.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/error.hpp"
#include "runtime/philox.hpp"
#include "runtime/transcendental.hpp"

namespace lockstep {

namespace {

void check_range(const char* what, int64_t first, int64_t n) {
  check(first >= 0 && n >= 0,
        std::string(what) + ": negative index or length (first " + std::to_string(first) + ", n " +
            std::to_string(n) + ")",
        "pass the logical index of the first element and a non-negative count");
}

void check_2d(const char* what, int64_t global_cols, int64_t row0, int64_t col0, int64_t rows,
              int64_t cols, int64_t ld) {
  check(global_cols >= 0 && row0 >= 0 && col0 >= 0 && rows >= 0 && cols >= 0 &&
            col0 + cols <= global_cols && ld >= cols,
        std::string(what) + ": block rows [" + std::to_string(row0) + ", +" + std::to_string(rows) +
            "), cols [" + std::to_string(col0) + ", +" + std::to_string(cols) + ") with ld " +
            std::to_string(ld) + " does not fit a matrix with " + std::to_string(global_cols) +
            " columns",
        "the shard must lie inside the logical matrix and ld must be >= cols");
}

// Box-Muller on arrays: for pair j, u1[j] in (0, 1], t[j] = 2 u2; writes r = sqrt(-2 log u1),
// c = cospi(t), s = sinpi(t), all on ctx.isa (bit-identical on every path).
void box_muller(const KernelCtx& ctx, float* u1, float* t, float* c, float* s, int64_t m) {
  math::log(ctx, u1, u1, m);
  for (int64_t j = 0; j < m; ++j) u1[j] = std::sqrt(u1[j] * -2.0f);
  math::cospi(ctx, t, c, m);
  math::sinpi(ctx, t, s, m);
}

}  // namespace

float uniform_at(uint64_t seed, uint64_t stream, int64_t index) {
  check_range("uniform_at", index, 1);
  return uniform01(CounterRng(seed, stream).word(uint64_t(index)));
}

float normal_at(uint64_t seed, uint64_t stream, int64_t index, float mean, float std) {
  check_range("normal_at", index, 1);
  PhiloxCounter w = CounterRng(seed, stream).block(uint64_t(index) >> 2);
  int p = int(index & 3) >> 1;
  float r = std::sqrt(math::ls_log(uniform01c(w[2 * p])) * -2.0f);
  float t = 2.0f * uniform01(w[2 * p + 1]);
  float z = r * ((index & 1) ? math::ls_sinpi(t) : math::ls_cospi(t));
  return std::fma(std, z, mean);
}

void fill_uniform(uint64_t seed, uint64_t stream, int64_t first, float* out, int64_t n, float lo,
                  float hi) {
  check_range("fill_uniform", first, n);
  CounterRng rng(seed, stream);
  float span = hi - lo;
  int64_t i = first, end = first + n;
  while (i < end) {
    PhiloxCounter w = rng.block(uint64_t(i) >> 2);
    for (int k = int(i & 3); k < 4 && i < end; ++k, ++i)
      out[i - first] = std::fma(uniform01(w[k]), span, lo);
  }
}

void fill_normal(const KernelCtx& ctx, uint64_t seed, uint64_t stream, int64_t first, float* out,
                 int64_t n, float mean, float std) {
  check_range("fill_normal", first, n);
  validate(ctx);
  if (n == 0) return;
  KernelCtx one = ctx;
  one.threads = 1;
  CounterRng rng(seed, stream);
  constexpr int64_t kBlocks = 512;  // blocks per batch
  float u1[2 * kBlocks], t[2 * kBlocks], c[2 * kBlocks], s[2 * kBlocks];
  const int64_t end = first + n;
  int64_t b = first >> 2;
  const int64_t b_end = ((end - 1) >> 2) + 1;
  while (b < b_end) {
    int64_t nb = std::min(kBlocks, b_end - b);
    for (int64_t j = 0; j < nb; ++j) {
      PhiloxCounter w = rng.block(uint64_t(b + j));
      u1[2 * j] = uniform01c(w[0]);
      t[2 * j] = 2.0f * uniform01(w[1]);
      u1[2 * j + 1] = uniform01c(w[2]);
      t[2 * j + 1] = 2.0f * uniform01(w[3]);
    }
    box_muller(one, u1, t, c, s, 2 * nb);
    int64_t lo = std::max(first, 4 * b), hi = std::min(end, 4 * (b + nb));
    for (int64_t i = lo; i < hi; ++i) {
      int64_t p = 2 * ((i >> 2) - b) + ((i & 3) >> 1);
      float z = u1[p] * ((i & 1) ? s[p] : c[p]);
      out[i - first] = std::fma(std, z, mean);
    }
    b += nb;
  }
}

void fill_normal(uint64_t seed, uint64_t stream, int64_t first, float* out, int64_t n, float mean,
                 float std) {
  fill_normal(KernelCtx::best(), seed, stream, first, out, n, mean, std);
}

void fill_uniform_2d(uint64_t seed, uint64_t stream, int64_t global_cols, int64_t row0,
                     int64_t col0, int64_t rows, int64_t cols, float* out, int64_t ld, float lo,
                     float hi) {
  check_2d("fill_uniform_2d", global_cols, row0, col0, rows, cols, ld);
  for (int64_t r = 0; r < rows; ++r)
    fill_uniform(seed, stream, (row0 + r) * global_cols + col0, out + r * ld, cols, lo, hi);
}

void fill_normal_2d(const KernelCtx& ctx, uint64_t seed, uint64_t stream, int64_t global_cols,
                    int64_t row0, int64_t col0, int64_t rows, int64_t cols, float* out, int64_t ld,
                    float mean, float std) {
  check_2d("fill_normal_2d", global_cols, row0, col0, rows, cols, ld);
  for (int64_t r = 0; r < rows; ++r)
    fill_normal(ctx, seed, stream, (row0 + r) * global_cols + col0, out + r * ld, cols, mean, std);
}

void fill_normal_2d(uint64_t seed, uint64_t stream, int64_t global_cols, int64_t row0, int64_t col0,
                    int64_t rows, int64_t cols, float* out, int64_t ld, float mean, float std) {
  fill_normal_2d(KernelCtx::best(), seed, stream, global_cols, row0, col0, rows, cols, out, ld,
                 mean, std);
}

}  // namespace lockstep
