// Tokens grouped by embedding row, the input of the deterministic embedding backward
// (runtime/cuda/kernels.hpp embedding_backward_canonical): a counting sort on the host, where
// the token ids come from the data loader. Host code only.
// Determinism contract: positions ascend within each row (the token order the canonical sum
// runs in); the result is a pure function of row_of.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/error.hpp"

namespace lockstep::cuda {

struct TokensByRow {
  std::vector<std::int32_t> offsets;    // [rows + 1]: row r's tokens are positions[offsets[r] ..
  std::vector<std::int32_t> positions;  // offsets[r+1]), ascending token indices t
};

// Rows row_lo .. row_lo+rows-1 (row_of[t] - row_lo); tokens of other rows are left out.
inline TokensByRow group_tokens_by_row(const std::int32_t* row_of, std::int64_t T,
                                       std::int64_t row_lo, std::int64_t rows) {
  check(T >= 0 && rows >= 0 && T <= 0x7fffffff,
        "group_tokens_by_row: bad sizes T=" + std::to_string(T) + " rows=" + std::to_string(rows),
        "T must fit an int32 token index");
  TokensByRow g;
  g.offsets.assign(std::size_t(rows + 1), 0);
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t r = std::int64_t(row_of[t]) - row_lo;
    if (r >= 0 && r < rows) ++g.offsets[std::size_t(r + 1)];
  }
  for (std::int64_t r = 0; r < rows; ++r)
    g.offsets[std::size_t(r + 1)] += g.offsets[std::size_t(r)];
  g.positions.resize(std::size_t(g.offsets[std::size_t(rows)]));
  std::vector<std::int32_t> next(g.offsets.begin(), g.offsets.end() - 1);
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t r = std::int64_t(row_of[t]) - row_lo;
    if (r >= 0 && r < rows) g.positions[std::size_t(next[std::size_t(r)]++)] = std::int32_t(t);
  }
  return g;
}

}  // namespace lockstep::cuda
