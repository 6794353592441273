// The built-in synthetic corpus (docs/design.md section 5): a seeded, generated language that a
// small model learns quickly, so every command works with no data at all. It is a TokenSource
// of byte tokens (data/tokenizer.hpp) with EOD = 0 after every document.
//
// The language (fixed; changing it changes every run that uses it):
//   - a vocabulary of `words` pseudo-words of letters (consonant/vowel syllables); word r has
//     Zipf unigram weight floor(2^24 / (r + 1)), and low ranks are short words;
//   - an order-1 Markov chain over words: word a has 4..12 successors drawn from the unigram
//     distribution, weighted floor(2^24 / (j + 1)) for the j-th successor;
//   - sentences of 3..20 words start from a unigram word, follow the chain, get an occasional
//     comma, and end in '.', '?' or '!'; the first letter is capitalized; sentences are
//     separated by a space or (1 in 5) a newline; a document has 2..41 sentences, ends with
//     '\n' and is followed by EOD; documents are generated until `bytes` tokens are reached.
//   All choices are integer draws from Philox (CounterRng(seed, 0x53594E54'00000000), the
//   "SYNT" stream, words consumed in order; bounded draws by Lemire's method with rejection),
//   so the corpus is a pure function of (seed, bytes, words) on every host.
// Determinism contract: identical bytes for identical config; generation takes ~0.1 s for 4 MB.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/gpt_dataset.hpp"

namespace lockstep::data {

struct SyntheticCorpusConfig {
  uint64_t seed = 1234;
  int64_t bytes = 4 << 20;  // at least this many tokens (the last document is completed)
  int words = 320;          // vocabulary size of the generated language
};

class SyntheticCorpus : public TokenSource {
 public:
  explicit SyntheticCorpus(const SyntheticCorpusConfig& cfg);

  const SyntheticCorpusConfig& config() const { return cfg_; }
  int64_t num_documents() const { return documents_; }
  // The byte tokens (EOD = 0 between documents).
  const std::vector<uint8_t>& bytes() const { return data_; }
  const std::vector<std::string>& vocabulary() const { return vocab_; }

  int64_t num_tokens() const override { return static_cast<int64_t>(data_.size()); }
  void read(int64_t first, int64_t count, int32_t* out) const override;
  std::string describe() const override;

 private:
  SyntheticCorpusConfig cfg_;
  std::vector<std::string> vocab_;
  std::vector<uint8_t> data_;
  int64_t documents_ = 0;
};

// Empirical byte entropies of a token stream, in nats: H(X), the joint H(X_t, X_t+1) and the
// conditional H(X_t+1 | X_t) = joint - H(X). log(256) = 5.545 is the uniform baseline; the
// conditional entropy bounds what a bigram model reaches (a deeper model goes lower).
struct ByteEntropy {
  double unigram = 0, bigram_joint = 0, conditional = 0;
};
ByteEntropy measure_byte_entropy(const TokenSource& src);

}  // namespace lockstep::data
