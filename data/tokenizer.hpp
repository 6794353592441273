// The byte-level tokenizer (docs/design.md section 5): vocab 256, token = byte value, and the
// end-of-document token EOD = 0 (the NUL byte). NUL bytes in input text are dropped (and
// counted) so EOD is unambiguous; every other byte maps to itself. Vocab stays 256, which
// every power-of-two TP size divides.
// Determinism contract: a pure function of the input bytes; no state, no locale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::data {

class ByteTokenizer {
 public:
  static constexpr int32_t kVocab = 256;
  static constexpr int32_t kEod = 0;  // the NUL byte; never produced by encode()

  // Appends the tokens of `text` to `out` (one per byte, NUL bytes dropped) and returns the
  // number of NUL bytes dropped.
  static int64_t encode(std::string_view text, std::vector<int32_t>& out);
  // Bytes of the tokens; EOD is shown as `eod_mark`, tokens >= 256 as "<tok N>".
  static std::string decode(const int32_t* tokens, int64_t n,
                            std::string_view eod_mark = "<|eod|>");
};

}  // namespace lockstep::data
