#include "data/tokenizer.hpp"

namespace lockstep::data {

int64_t ByteTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  int64_t dropped = 0;
  out.reserve(out.size() + text.size());
  for (char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b == 0) {
      ++dropped;
      continue;
    }
    out.push_back(static_cast<int32_t>(b));
  }
  return dropped;
}

std::string ByteTokenizer::decode(const int32_t* tokens, int64_t n, std::string_view eod_mark) {
  std::string s;
  s.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t t = tokens[i];
    if (t == kEod) {
      s += eod_mark;
    } else if (t > 0 && t < kVocab) {
      s += static_cast<char>(t);
    } else {
      s += "<tok " + std::to_string(t) + ">";
    }
  }
  return s;
}

}  // namespace lockstep::data
