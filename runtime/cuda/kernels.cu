// Kernels and launchers of runtime/cuda/kernels.hpp (Philox fills, LayerNorm, softmax, AdamW,
// embedding backward, the transcendentals, the tree-node add of the NCCL collectives). One
// translation unit on purpose: each .cu costs two device compilations (sm_90a and compute_80) in
// CI.
#include "runtime/cuda/kernels.hpp"

#include <string>

#include "runtime/cuda/device.hpp"
#include "runtime/cuda/math_device.hpp"
#include "runtime/cuda/philox_core.hpp"
#include "runtime/error.hpp"

namespace lockstep::cuda {

namespace {

constexpr int kBlock = 256;

unsigned blocks_for(std::int64_t n, int per_block = kBlock) {
  const std::int64_t b = (n + per_block - 1) / per_block;
  check(b <= 0x7fffffff, "cuda kernels: " + std::to_string(n) + " elements need too many blocks",
        "split the call");
  return unsigned(b);
}

// Grid y (at most 65535) covers the columns in chunks of 128 threads.
unsigned column_chunks(std::int64_t width) {
  const std::int64_t c = (width + 127) / 128;
  check(c <= 65535, "cuda kernels: width " + std::to_string(width) + " is too wide",
        "split the columns");
  return unsigned(c);
}

void check_n(std::int64_t n, const char* what) {
  check(n >= 0, std::string(what) + ": negative size " + std::to_string(n));
}

__global__ void fill_uniform_kernel(std::uint64_t seed, std::uint64_t sid, std::int64_t first,
                                    std::int64_t n, float lo, float hi, float* out) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) out[k] = hd::uniform_in(seed, sid, std::uint64_t(first + k), lo, hi);
}

__global__ void dropout_keep_kernel(std::uint64_t seed, std::uint64_t sid, std::int64_t first,
                                    std::int64_t n, float p, std::uint8_t* keep) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) keep[k] = hd::dropout_keep(seed, sid, std::uint64_t(first + k), p) ? 1 : 0;
}

__global__ void layernorm_canonical_kernel(const float* x, std::int64_t T, std::int64_t n,
                                           const float* w, const float* b, float eps,
                                           hd::SumRuleHD rule, float* xhat, float* rstd, float* y) {
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < T)
    hd::layernorm_row_forward(x + t * n, n, w, b, eps, rule, xhat + t * n, rstd + t, y + t * n);
}

__device__ float math_fn(MathFn fn, float x) {
  switch (fn) {
    case MathFn::exp:
      return hd::math::exp(x);
    case MathFn::log:
      return hd::math::log(x);
    case MathFn::tanh:
      return hd::math::tanh(x);
    case MathFn::erf:
      return hd::math::erf(x);
    case MathFn::sinpi:
      return hd::math::sinpi(x);
    case MathFn::cospi:
      return hd::math::cospi(x);
    case MathFn::gelu_tanh:
      return hd::math::gelu_tanh(x);
    case MathFn::gelu_tanh_grad:
      return hd::math::gelu_tanh_grad(x);
  }
  return x;
}

__global__ void math_apply_kernel(MathFn fn, const float* x, float* y, std::int64_t n) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) y[k] = math_fn(fn, x[k]);
}

__global__ void gelu_pair_kernel(const float* x, float* y, float* g, std::int64_t n) {
  const std::int64_t k = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (k < n) {
    float a, b;
    hd::math::gelu_tanh_and_grad(x[k], a, b);
    y[k] = a;
    g[k] = b;
  }
}

__global__ void layernorm_backward_rows_kernel(const float* dy, const float* xhat,
                                               const float* rstd, const float* w, std::int64_t T,
                                               std::int64_t n, hd::SumRuleHD rule, bool accumulate,
                                               float* dx) {
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < T)
    hd::layernorm_row_backward(dy + t * n, xhat + t * n, rstd[t], w, n, rule, accumulate,
                               dx + t * n);
}

__global__ void layernorm_param_grad_kernel(const float* dy, const float* xhat, std::int64_t T,
                                            std::int64_t n, hd::SumRuleHD tokens, float* dw,
                                            float* db) {
  const std::int64_t j = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j < n) hd::layernorm_param_grad_column(dy, xhat, T, n, j, tokens, dw + j, db + j);
}

__global__ void softmax_causal_kernel(float* S, std::int64_t rows, std::int64_t C, float scale,
                                      hd::SumRuleHD rule) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) hd::softmax_causal_row(S + r * C, C, r % C, scale, rule);
}

__global__ void softmax_backward_kernel(const float* P, float* G, std::int64_t rows, std::int64_t C,
                                        float scale, hd::SumRuleHD rule) {
  const std::int64_t r = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < rows) hd::softmax_backward_row(P + r * C, G + r * C, C, r % C, scale, rule);
}

__global__ void cross_entropy_forward_kernel(float* logits, const std::int32_t* labels,
                                             std::int64_t T, std::int64_t V, hd::SumRuleHD rule,
                                             float* max, float* sumexp, float* loss) {
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= T) return;
  float* l = logits + t * V;
  const float m = hd::ce_max_signed_zero(hd::row_max(l, V));
  float part, target;
  hd::ce_row_exp(l, V, m, labels[t], rule, &part, &target);
  max[t] = m;
  sumexp[t] = part;
  loss[t] = hd::ce_row_loss(part, m, target);
}

__global__ void cross_entropy_backward_kernel(float* g, const float* sumexp,
                                              const std::int32_t* labels, std::int64_t T,
                                              std::int64_t V, float loss_scale) {
  const std::int64_t t = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < T) hd::ce_row_backward(g + t * V, V, sumexp[t], labels[t], loss_scale);
}

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per row (8 rows per 256-thread block).
__global__ void layernorm_fast_kernel(const float* x, std::int64_t T, std::int64_t n,
                                      const float* w, const float* b, float eps, float* xhat,
                                      float* rstd, float* y) {
  const std::int64_t t = std::int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= T) return;
  const float* xr = x + t * n;
  float s = 0.0f;
  for (std::int64_t k = lane; k < n; k += 32) s += xr[k];
  const float m = __fdiv_rn(warp_sum(s), float(n));
  float s2 = 0.0f;
  for (std::int64_t k = lane; k < n; k += 32) {
    const float c = xr[k] - m;
    s2 += c * c;
  }
  const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(warp_sum(s2), float(n)) + eps));
  if (lane == 0) rstd[t] = rs;
  for (std::int64_t k = lane; k < n; k += 32) {
    const float xh = (xr[k] - m) * rs;
    xhat[t * n + k] = xh;
    y[t * n + k] = xh * w[k] + b[k];
  }
}

__global__ void adamw_kernel(const hd::AdamWScalarsHD s, float* p, const float* g, float* m,
                             float* v, std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) hd::adamw_element(s, p[i], g[i], m[i], v[i]);
}

// Thread (r, c): blockIdx.x picks the row (up to 2^31 - 1 of them), blockIdx.y a chunk of
// columns, the threads the columns in it (coalesced over c).
__global__ void embedding_canonical_kernel(const std::int32_t* offsets,
                                           const std::int32_t* positions, const float* dX,
                                           std::int64_t width, std::int64_t ld, std::int64_t T,
                                           hd::SumRuleHD rule, float* out) {
  const std::int64_t r = blockIdx.x;
  const std::int64_t c = std::int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= width) return;
  const std::int32_t lo = offsets[r], hi = offsets[r + 1];
  out[r * width + c] = hd::embedding_grad_column(positions + lo, hi - lo, dX, ld, c, T, rule);
}

__global__ void fill_kernel(float* out, std::int64_t n, float value) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

__global__ void embedding_atomic_kernel(const std::int32_t* row_of, std::int64_t T, const float* dX,
                                        std::int64_t width, std::int64_t ld, std::int64_t row_lo,
                                        std::int64_t rows, float* out) {
  const std::int64_t t = blockIdx.x;  // token (grid x: up to 2^31 - 1)
  const std::int64_t c = std::int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= width) return;
  const std::int64_t r = std::int64_t(row_of[t]) - row_lo;
  if (r < 0 || r >= rows) return;
  atomicAdd(out + r * width + c, dX[t * ld + c]);
}

__global__ void tree_add_kernel(const float* lower, const float* upper, float* out,
                                std::int64_t n) {
  const std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = lower[i] + upper[i];
}

}  // namespace

void fill_uniform(cudaStream_t stream, std::uint64_t seed, std::uint64_t stream_id,
                  std::int64_t first, std::int64_t n, float lo, float hi, float* out) {
  check_n(n, "cuda::fill_uniform");
  check(first >= 0, "cuda::fill_uniform: negative first element " + std::to_string(first));
  if (n == 0) return;
  fill_uniform_kernel<<<blocks_for(n), kBlock, 0, stream>>>(seed, stream_id, first, n, lo, hi, out);
  LOCKSTEP_CUDA_CHECK_LAUNCH("fill_uniform_kernel");
}

void dropout_keep(cudaStream_t stream, std::uint64_t seed, std::uint64_t stream_id,
                  std::int64_t first, std::int64_t n, float p, std::uint8_t* keep) {
  check_n(n, "cuda::dropout_keep");
  check(first >= 0, "cuda::dropout_keep: negative first element " + std::to_string(first));
  if (n == 0) return;
  dropout_keep_kernel<<<blocks_for(n), kBlock, 0, stream>>>(seed, stream_id, first, n, p, keep);
  LOCKSTEP_CUDA_CHECK_LAUNCH("dropout_keep_kernel");
}

void layernorm_forward_canonical(cudaStream_t stream, const float* x, std::int64_t T,
                                 std::int64_t n, const float* w, const float* b, float eps,
                                 const hd::SumRuleHD& rule, float* xhat, float* rstd, float* y) {
  check_n(T, "cuda::layernorm_forward_canonical");
  check(n >= 1, "cuda::layernorm_forward_canonical: feature count " + std::to_string(n) + " < 1");
  check(rule.block >= 1 && rule.segment == 0,
        "cuda::layernorm_forward_canonical: reduce_block < 1 or a token rule for a feature row");
  check(hd::AxisHD(rule, n).count() <= (std::int64_t(1) << hd::kMaxLeafBits),
        "cuda::layernorm_forward_canonical: " + std::to_string(n) +
            " features exceed the tree counter's 2^" + std::to_string(hd::kMaxLeafBits) +
            " leaves",
        "raise numerics.reduce_block");
  if (T == 0) return;
  // Small blocks: a row per thread, so spread the rows over many SMs.
  layernorm_canonical_kernel<<<blocks_for(T, 64), 64, 0, stream>>>(x, T, n, w, b, eps, rule, xhat,
                                                                   rstd, y);
  LOCKSTEP_CUDA_CHECK_LAUNCH("layernorm_canonical_kernel");
}

void layernorm_forward_fast(cudaStream_t stream, const float* x, std::int64_t T, std::int64_t n,
                            const float* w, const float* b, float eps, float* xhat, float* rstd,
                            float* y) {
  check_n(T, "cuda::layernorm_forward_fast");
  check(n >= 1, "cuda::layernorm_forward_fast: feature count " + std::to_string(n) + " < 1");
  if (T == 0) return;
  layernorm_fast_kernel<<<blocks_for(T, kBlock / 32), kBlock, 0, stream>>>(x, T, n, w, b, eps, xhat,
                                                                           rstd, y);
  LOCKSTEP_CUDA_CHECK_LAUNCH("layernorm_fast_kernel");
}

void layernorm_backward_canonical(cudaStream_t stream, const float* dy, const float* xhat,
                                  const float* rstd, const float* w, std::int64_t T, std::int64_t n,
                                  const hd::SumRuleHD& features, const hd::SumRuleHD& tokens,
                                  float* dx_out, bool accumulate, float* dw, float* db) {
  check_n(T, "cuda::layernorm_backward_canonical rows");
  check_n(n, "cuda::layernorm_backward_canonical features");
  if (T == 0 || n == 0) return;
  layernorm_backward_rows_kernel<<<blocks_for(T), kBlock, 0, stream>>>(
      dy, xhat, rstd, w, T, n, features, accumulate, dx_out);
  LOCKSTEP_CUDA_CHECK_LAUNCH("layernorm_backward_rows_kernel");
  layernorm_param_grad_kernel<<<blocks_for(n), kBlock, 0, stream>>>(dy, xhat, T, n, tokens, dw, db);
  LOCKSTEP_CUDA_CHECK_LAUNCH("layernorm_param_grad_kernel");
}

void softmax_causal_canonical(cudaStream_t stream, float* S, std::int64_t mats, std::int64_t C,
                              float scale, const hd::SumRuleHD& rule) {
  check_n(mats * C, "cuda::softmax_causal_canonical");
  if (mats * C == 0) return;
  softmax_causal_kernel<<<blocks_for(mats * C), kBlock, 0, stream>>>(S, mats * C, C, scale, rule);
  LOCKSTEP_CUDA_CHECK_LAUNCH("softmax_causal_kernel");
}

void softmax_backward_canonical(cudaStream_t stream, const float* P, float* G, std::int64_t mats,
                                std::int64_t C, float scale, const hd::SumRuleHD& rule) {
  check_n(mats * C, "cuda::softmax_backward_canonical");
  if (mats * C == 0) return;
  softmax_backward_kernel<<<blocks_for(mats * C), kBlock, 0, stream>>>(P, G, mats * C, C, scale,
                                                                       rule);
  LOCKSTEP_CUDA_CHECK_LAUNCH("softmax_backward_kernel");
}

void cross_entropy_forward_canonical(cudaStream_t stream, float* logits, const std::int32_t* labels,
                                     std::int64_t T, std::int64_t V, const hd::SumRuleHD& rule,
                                     float* max, float* sumexp, float* loss) {
  check_n(T, "cuda::cross_entropy_forward_canonical");
  check(V > 0, "cuda::cross_entropy_forward_canonical: vocabulary " + std::to_string(V));
  if (T == 0) return;
  cross_entropy_forward_kernel<<<blocks_for(T), kBlock, 0, stream>>>(logits, labels, T, V, rule,
                                                                     max, sumexp, loss);
  LOCKSTEP_CUDA_CHECK_LAUNCH("cross_entropy_forward_kernel");
}

void cross_entropy_backward_canonical(cudaStream_t stream, float* exp_logits, const float* sumexp,
                                      const std::int32_t* labels, std::int64_t T, std::int64_t V,
                                      float loss_scale) {
  check_n(T, "cuda::cross_entropy_backward_canonical");
  if (T == 0) return;
  cross_entropy_backward_kernel<<<blocks_for(T), kBlock, 0, stream>>>(exp_logits, sumexp, labels, T,
                                                                      V, loss_scale);
  LOCKSTEP_CUDA_CHECK_LAUNCH("cross_entropy_backward_kernel");
}

void adamw_step(cudaStream_t stream, const hd::AdamWScalarsHD& s, float* param, const float* grad,
                float* m, float* v, std::int64_t n) {
  check_n(n, "cuda::adamw_step");
  if (n == 0) return;
  adamw_kernel<<<blocks_for(n), kBlock, 0, stream>>>(s, param, grad, m, v, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH("adamw_kernel");
}

void embedding_backward_canonical(cudaStream_t stream, const std::int32_t* offsets,
                                  const std::int32_t* positions, std::int64_t rows, const float* dX,
                                  std::int64_t width, std::int64_t ld, std::int64_t T,
                                  const hd::SumRuleHD& rule, float* out) {
  check(rows >= 0 && width >= 0 && T >= 0 && ld >= width && rule.block >= 1 &&
            (rule.segment == 0 || (rule.halving && T % rule.segment == 0)),
        "cuda::embedding_backward_canonical: bad sizes rows=" + std::to_string(rows) + " width=" +
            std::to_string(width) + " ld=" + std::to_string(ld) + " T=" + std::to_string(T));
  check(rows <= 0x7fffffff, "cuda::embedding_backward_canonical: too many rows");
  if (rows == 0 || width == 0) return;
  embedding_canonical_kernel<<<dim3(unsigned(rows), column_chunks(width)), 128, 0, stream>>>(
      offsets, positions, dX, width, ld, T, rule, out);
  LOCKSTEP_CUDA_CHECK_LAUNCH("embedding_canonical_kernel");
}

void embedding_backward_atomic(cudaStream_t stream, const std::int32_t* row_of, std::int64_t T,
                               const float* dX, std::int64_t width, std::int64_t ld,
                               std::int64_t row_lo, std::int64_t rows, float* out) {
  check(rows >= 0 && width >= 0 && T >= 0 && ld >= width && T <= 0x7fffffff,
        "cuda::embedding_backward_atomic: bad sizes");
  if (rows == 0 || width == 0) return;
  fill_kernel<<<blocks_for(rows * width), kBlock, 0, stream>>>(out, rows * width, 0.0f);
  LOCKSTEP_CUDA_CHECK_LAUNCH("fill_kernel");
  if (T == 0) return;
  embedding_atomic_kernel<<<dim3(unsigned(T), column_chunks(width)), 128, 0, stream>>>(
      row_of, T, dX, width, ld, row_lo, rows, out);
  LOCKSTEP_CUDA_CHECK_LAUNCH("embedding_atomic_kernel");
}

void math_apply(cudaStream_t stream, MathFn fn, const float* x, float* y, std::int64_t n) {
  check_n(n, "cuda::math_apply");
  if (n == 0) return;
  math_apply_kernel<<<blocks_for(n), kBlock, 0, stream>>>(fn, x, y, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH("math_apply_kernel");
}

void gelu_tanh_and_grad(cudaStream_t stream, const float* x, float* y, float* g, std::int64_t n) {
  check_n(n, "cuda::gelu_tanh_and_grad");
  if (n == 0) return;
  gelu_pair_kernel<<<blocks_for(n), kBlock, 0, stream>>>(x, y, g, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH("gelu_pair_kernel");
}

void tree_add(cudaStream_t stream, const float* lower, const float* upper, float* out,
              std::int64_t n) {
  check_n(n, "cuda::tree_add");
  if (n == 0) return;
  tree_add_kernel<<<blocks_for(n), kBlock, 0, stream>>>(lower, upper, out, n);
  LOCKSTEP_CUDA_CHECK_LAUNCH("tree_add_kernel");
}

}  // namespace lockstep::cuda
