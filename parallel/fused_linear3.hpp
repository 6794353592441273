// Three column-parallel linears that read the same input (attention's q, k and v
// projections) run as one GEMM each for the forward, the weight gradient and, where it keeps
// the bits, the input gradient: one pass over X and one packed operand instead of three.
//
// Determinism contract: every output has the bits of three column_linear_forward /
// column_linear_backward calls (parallel/tp_layers.hpp) followed by copy_to_tp_backward on
// the three partial input gradients and dX = (p0 + p1) + p2:
//  - forward Y = X [W0; W1; W2]^T and the weight gradient [dW0; dW1; dW2] = dY^T X: a GEMM's
//    element bits depend on its K only, never on M or N, so concatenating outputs along M or N
//    changes nothing; bias adds and bias-gradient column sums are per column.
//  - input gradient: with TP = 1 in invariant mode, when out_l is a power-of-two number of whole
//    blocks B (pow2 tree) or exactly one block (halving tree), the canonical GEMM over
//    K = 3 out_l is T over 3 * 2^j blocks = (T0 + T1) + T2, exactly (p0 + p1) + p2
//    (docs/design.md section 2's tree), so one GEMM gives the same bits.
//    fast mode (no guarantee) takes the one GEMM too. Otherwise (deterministic mode's single chain,
//    TP > 1 where each part is reduced over ranks before the sum, other widths) three GEMMs.
#pragma once

#include <cstdint>

#include "parallel/tp_layers.hpp"

namespace lockstep {

struct Linear3 {
  const float* w[3];  // [out_l, in] each
  const float* b[3];  // [out_l] each, or all nullptr
};
struct Linear3Grads {
  float* w[3];  // [out_l, in] each, overwritten
  float* b[3];  // [out_l] each, or all nullptr
};

// Y [T, 3 out_l] (row-major, part i in columns [i out_l, (i+1) out_l)) = X [T, in] W_i^T + b_i.
// scratch: 3 out_l (in + 1) floats.
void linear3_forward(const TpContext& tp, const float* X, std::int64_t T, std::int64_t in,
                     const Linear3& lin, std::int64_t out_l, float* Y, float* scratch);
// dY [T, 3 out_l] laid out as Y. Writes the weight and bias gradients and dX [T, in], complete
// over TP (copy_to_tp_backward done). scratch: linear3_scratch_floats floats.
void linear3_backward(const TpContext& tp, const float* X, const float* dY, std::int64_t T,
                      std::int64_t in, const Linear3& lin, std::int64_t out_l,
                      const Linear3Grads& grads, float* dX, float* scratch);
// Floats of scratch linear3_backward needs (linear3_forward needs less): the concatenated
// weights and biases, plus the three partial input gradients when they are not one GEMM.
std::int64_t linear3_scratch_floats(const TpContext& tp, std::int64_t T, std::int64_t in,
                                    std::int64_t out_l);
// True when linear3_backward's input gradient is one GEMM (see the header comment).
bool linear3_single_dgrad(const TpContext& tp, std::int64_t out_l);

}  // namespace lockstep
