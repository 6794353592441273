// GPT training samples packed across documents, as Megatron's GPTDataset does, from any
// TokenSource (an indexed dataset on disk, or the built-in synthetic corpus).
//
// Packing (fixed; changing it changes every run's data): the source's documents are
// concatenated in their stored order (no document shuffling: the sampler shuffles samples,
// see data/sampler.hpp), each document already ending in EOD, into one token stream
// t[0, T). Sample i is the window t[i*C, i*C + C + 1) of C + 1 tokens (C = context): inputs
// are its first C tokens, labels its last C (shifted by one). Consecutive samples overlap by
// exactly one token, a sample may span documents (attention is not reset at EOD), and the
// number of samples is (T - 1) / C; the tail that does not fill a window is unused.
// Determinism contract: sample i is a pure function of (source bytes, C, i).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace lockstep::data {

// A read-only token stream: the concatenation of a corpus's documents (EOD-terminated).
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  virtual int64_t num_tokens() const = 0;
  // out[k] = t[first + k] for k in [0, count); fails unless 0 <= first, first + count <= T.
  virtual void read(int64_t first, int64_t count, int32_t* out) const = 0;
  // The same tokens narrowed to uint16 (fails if a token does not fit).
  virtual void read_u16(int64_t first, int64_t count, uint16_t* out) const;
  // What the source is, for messages ("indexed dataset data/wiki", "synthetic corpus seed 1").
  virtual std::string describe() const = 0;
};

// The config file's [data] section: where training data comes from and how much a step
// takes. path empty: the built-in synthetic corpus; otherwise the prefix of an indexed
// dataset (path.bin / path.idx).
struct DataConfig {
  std::string path;
  int64_t global_batch = 8;  // sequences per step
};

// The size of the built-in synthetic corpus.
constexpr int64_t kSyntheticCorpusBytes = 4 << 20;

// Opens the source cfg names: the indexed dataset, or the synthetic corpus generated from
// synthetic_seed (run.seed; data/synthetic_corpus.hpp) with synthetic_bytes bytes.
std::shared_ptr<const TokenSource> open_token_source(
    const DataConfig& cfg, uint64_t synthetic_seed,
    int64_t synthetic_bytes = kSyntheticCorpusBytes);

class GptDataset {
 public:
  // vocab > 0: every token read is checked to be < vocab (a clear error names the sample).
  GptDataset(std::shared_ptr<const TokenSource> source, int64_t context, int64_t vocab = 0);

  int64_t num_samples() const { return num_samples_; }
  int64_t context() const { return context_; }
  const TokenSource& source() const { return *source_; }

  // The C + 1 tokens of sample i.
  void window(int64_t i, int32_t* out) const;
  // tokens[k] = t[i*C + k], labels[k] = t[i*C + k + 1], k in [0, C).
  void sample(int64_t i, int32_t* tokens, int32_t* labels) const;
  // Rows r = 0..n-1 of row-major [n, C] buffers get sample indices[r].
  void fill(const int64_t* indices, int64_t n, int32_t* tokens, int32_t* labels) const;

 private:
  std::shared_ptr<const TokenSource> source_;
  int64_t context_;
  int64_t vocab_;
  int64_t num_samples_;
};

}  // namespace lockstep::data
