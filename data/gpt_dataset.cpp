#include "data/gpt_dataset.hpp"

#include <cstring>
#include <vector>

#include "data/indexed_dataset.hpp"
#include "data/synthetic_corpus.hpp"
#include "runtime/error.hpp"

namespace lockstep::data {

void TokenSource::read_u16(int64_t first, int64_t count, uint16_t* out) const {
  std::vector<int32_t> tmp(static_cast<size_t>(count));
  read(first, count, tmp.data());
  for (int64_t k = 0; k < count; ++k) {
    check(tmp[k] >= 0 && tmp[k] <= 0xFFFF,
          describe() + ": token " + std::to_string(tmp[k]) + " at position " +
              std::to_string(first + k) + " does not fit in uint16",
          "read this source into an int32 buffer");
    out[k] = static_cast<uint16_t>(tmp[k]);
  }
}

std::shared_ptr<const TokenSource> open_token_source(const DataConfig& cfg, uint64_t synthetic_seed,
                                                     int64_t synthetic_bytes) {
  if (cfg.path.empty()) {
    SyntheticCorpusConfig sc;
    sc.seed = synthetic_seed;
    sc.bytes = synthetic_bytes;
    return std::make_shared<SyntheticCorpus>(sc);
  }
  return std::make_shared<IndexedDataset>(cfg.path);
}

GptDataset::GptDataset(std::shared_ptr<const TokenSource> source, int64_t context, int64_t vocab)
    : source_(std::move(source)), context_(context), vocab_(vocab), num_samples_(0) {
  check(source_ != nullptr, "GptDataset: no token source");
  check(context_ > 0, "GptDataset: context must be positive, got " + std::to_string(context_),
        "set model.context to a positive number");
  const int64_t t = source_->num_tokens();
  check(t >= context_ + 1,
        source_->describe() + " has " + std::to_string(t) + " tokens, fewer than context + 1 = " +
            std::to_string(context_ + 1) + " needed for one sample",
        "use more data or a smaller model.context");
  num_samples_ = (t - 1) / context_;
}

void GptDataset::window(int64_t i, int32_t* out) const {
  check(i >= 0 && i < num_samples_, "sample index " + std::to_string(i) + " out of range [0, " +
                                        std::to_string(num_samples_) + ") of " +
                                        source_->describe());
  source_->read(i * context_, context_ + 1, out);
  if (vocab_ > 0) {
    for (int64_t k = 0; k <= context_; ++k) {
      if (out[k] < 0 || out[k] >= vocab_)
        fail(source_->describe() + ": sample " + std::to_string(i) + " holds token " +
                 std::to_string(out[k]) + " outside the vocabulary [0, " + std::to_string(vocab_) +
                 ")",
             "set model.vocab to cover the dataset's tokenizer, or re-preprocess the data");
    }
  }
}

void GptDataset::sample(int64_t i, int32_t* tokens, int32_t* labels) const {
  std::vector<int32_t> w(static_cast<size_t>(context_ + 1));
  window(i, w.data());
  std::memcpy(tokens, w.data(), static_cast<size_t>(context_) * sizeof(int32_t));
  std::memcpy(labels, w.data() + 1, static_cast<size_t>(context_) * sizeof(int32_t));
}

void GptDataset::fill(const int64_t* indices, int64_t n, int32_t* tokens, int32_t* labels) const {
  for (int64_t r = 0; r < n; ++r) sample(indices[r], tokens + r * context_, labels + r * context_);
}

}  // namespace lockstep::data
