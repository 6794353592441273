#include "data/synthetic_corpus.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "data/tokenizer.hpp"
#include "runtime/error.hpp"
#include "runtime/philox.hpp"

namespace lockstep::data {
namespace {

constexpr uint64_t kSyntheticStream = 0x53594E54ull << 32;  // "SYNT"

// Sequential integer draws from one Philox stream.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : rng_(seed, stream) {}
  uint32_t next() {
    if ((i_ & 3) == 0) block_ = rng_.block(i_ >> 2);
    return block_[i_++ & 3];
  }
  // Uniform in [0, s), s >= 1: Lemire's multiply-and-reject on 32 bits.
  uint32_t below(uint32_t s) {
    const uint32_t threshold = (0u - s) % s;
    for (;;) {
      const uint64_t m = uint64_t(next()) * s;
      if (uint32_t(m) >= threshold) return uint32_t(m >> 32);
    }
  }
  // Index drawn with probability weight[i] / total from cumulative weights cum (cum.back()
  // = total < 2^32).
  size_t pick(const std::vector<uint32_t>& cum) {
    const uint32_t r = below(cum.back());
    return size_t(std::upper_bound(cum.begin(), cum.end(), r) - cum.begin());
  }

 private:
  CounterRng rng_;
  uint64_t i_ = 0;
  PhiloxCounter block_{};
};

std::vector<uint32_t> zipf_cumulative(size_t n) {
  std::vector<uint32_t> cum(n);
  uint64_t total = 0;
  for (size_t r = 0; r < n; ++r) {
    total += (uint64_t(1) << 24) / (r + 1);
    cum[r] = uint32_t(total);
  }
  return cum;
}

}  // namespace

SyntheticCorpus::SyntheticCorpus(const SyntheticCorpusConfig& cfg) : cfg_(cfg) {
  check(cfg_.bytes > 0 && cfg_.bytes <= (int64_t(1) << 34),
        "synthetic corpus: size " + std::to_string(cfg_.bytes) + " bytes outside (0, 16 GiB]");
  check(cfg_.words >= 16 && cfg_.words <= 100000, "synthetic corpus: vocabulary of " +
                                                      std::to_string(cfg_.words) +
                                                      " words outside [16, 100000]");
  Draws d(cfg_.seed, kSyntheticStream);
  static constexpr char kCons[] = "bcdfghjklmnprstvwz";
  static constexpr char kVow[] = "aeiou";

  // Vocabulary: distinct pseudo-words, short ones at low (frequent) ranks.
  std::set<std::string> seen;
  while (vocab_.size() < size_t(cfg_.words)) {
    const size_t r = vocab_.size();
    const uint32_t len = r < 12 ? 1 + d.below(3) : r < 80 ? 2 + d.below(4) : 3 + d.below(7);
    std::string w;
    bool vowel = d.below(3) == 0;
    while (w.size() < len) {
      w += vowel ? kVow[d.below(5)] : kCons[d.below(18)];
      vowel = !vowel;
    }
    if (seen.insert(w).second) vocab_.push_back(w);
  }
  const size_t nw = vocab_.size();
  const std::vector<uint32_t> unigram = zipf_cumulative(nw);

  // Sparse order-1 chain: successors and their cumulative weights per word.
  std::vector<std::vector<uint32_t>> succ(nw), succ_cum(nw);
  for (size_t a = 0; a < nw; ++a) {
    const uint32_t k = 4 + d.below(9);
    for (uint32_t j = 0; j < k; ++j) succ[a].push_back(uint32_t(d.pick(unigram)));
    succ_cum[a] = zipf_cumulative(k);
  }

  data_.reserve(size_t(cfg_.bytes) + 8192);
  while (int64_t(data_.size()) < cfg_.bytes) {
    const uint32_t sentences = 2 + d.below(40);
    for (uint32_t s = 0; s < sentences; ++s) {
      const uint32_t words = 3 + d.below(18);
      size_t w = d.pick(unigram);
      for (uint32_t i = 0; i < words; ++i) {
        if (i > 0) {
          w = succ[w][d.pick(succ_cum[w])];
          if (d.below(10) == 0) data_.push_back(',');
          data_.push_back(' ');
        }
        const std::string& word = vocab_[w];
        for (size_t c = 0; c < word.size(); ++c) {
          const char ch = (i == 0 && c == 0) ? char(word[c] - 'a' + 'A') : word[c];
          data_.push_back(uint8_t(ch));
        }
      }
      const uint32_t p = d.below(16);
      data_.push_back(p == 0 ? '!' : p < 3 ? '?' : '.');
      if (s + 1 < sentences) data_.push_back(d.below(5) == 0 ? '\n' : ' ');
    }
    data_.push_back('\n');
    data_.push_back(uint8_t(ByteTokenizer::kEod));
    ++documents_;
  }
}

void SyntheticCorpus::read(int64_t first, int64_t count, int32_t* out) const {
  const int64_t n = num_tokens();
  check(first >= 0 && count >= 0 && first <= n && count <= n - first,
        describe() + ": token range [" + std::to_string(first) + ", " +
            std::to_string(first + count) + ") outside the stream of " + std::to_string(n) +
            " tokens");
  for (int64_t k = 0; k < count; ++k) out[k] = data_[size_t(first + k)];
}

std::string SyntheticCorpus::describe() const {
  return "synthetic corpus (seed " + std::to_string(cfg_.seed) + ", " +
         std::to_string(num_tokens()) + " tokens)";
}

ByteEntropy measure_byte_entropy(const TokenSource& src) {
  const int64_t n = src.num_tokens();
  check(n >= 2, "byte entropy needs at least two tokens");
  std::vector<int64_t> uni(256, 0), bi(256 * 256, 0);
  std::vector<int32_t> buf(1 << 16);
  int32_t prev = -1;
  for (int64_t at = 0; at < n; at += int64_t(buf.size())) {
    const int64_t m = std::min<int64_t>(int64_t(buf.size()), n - at);
    src.read(at, m, buf.data());
    for (int64_t k = 0; k < m; ++k) {
      const int32_t t = buf[size_t(k)];
      check(t >= 0 && t < 256, src.describe() + ": token " + std::to_string(t) + " is not a byte");
      ++uni[size_t(t)];
      if (prev >= 0) ++bi[size_t(prev * 256 + t)];
      prev = t;
    }
  }
  auto entropy = [](const std::vector<int64_t>& c) {
    double total = 0, h = 0;
    for (int64_t x : c) total += double(x);
    for (int64_t x : c)
      if (x > 0) h -= double(x) / total * std::log(double(x) / total);
    return h;
  };
  ByteEntropy e;
  e.unigram = entropy(uni);
  e.bigram_joint = entropy(bi);
  e.conditional = e.bigram_joint - e.unigram;
  return e;
}

}  // namespace lockstep::data
