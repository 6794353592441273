// row_max: the maximum of a row as Lockstep's row kernels define it, m = x[0], then
// m = x[j] > m ? x[j] : m, with the scan kept in 16 lanes so that it vectorizes.
// Determinism contract: the lanes return the sequential scan's value but for the sign of a zero
// maximum (of equal zeros the scan keeps the first it meets, a lane its own); a NaN x[0] is the
// result either way and a later NaN never is. Callers say why that sign does not reach their
// bits (model/kernels/attn_rows.hpp: the softmax; parallel/vocab_parallel.cpp: the TP maximum
// turns a zero maximum into +0.0).
// In an anonymous namespace on purpose, as csum_counter.hpp: ISA translation units (*_avx512.cpp)
// include it too.
#pragma once

#include <cstdint>

namespace lockstep::row_detail {
namespace {

inline float row_max(const float* s, std::int64_t n) {
  constexpr int L = 16;
  float lane[L];
  for (int l = 0; l < L; ++l) lane[l] = s[0];
  std::int64_t j = 0;
  for (; j + L <= n; j += L)
    for (int l = 0; l < L; ++l) lane[l] = s[j + l] > lane[l] ? s[j + l] : lane[l];
  float m = lane[0];
  for (int l = 1; l < L; ++l) m = lane[l] > m ? lane[l] : m;
  for (; j < n; ++j) m = s[j] > m ? s[j] : m;
  return m;
}

}  // namespace
}  // namespace lockstep::row_detail
