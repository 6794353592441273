// The built-in synthetic corpus (data/synthetic_corpus.hpp): deterministic per seed,
// different across seeds, EOD-separated documents, and learnable: its byte entropies are far
// below log(256).
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "data/gpt_dataset.hpp"
#include "data/synthetic_corpus.hpp"
#include "data/tokenizer.hpp"

using namespace lockstep::data;

TEST_CASE("synthetic corpus: identical per seed, different across seeds", "[data][synthetic]") {
  SyntheticCorpusConfig cfg;
  cfg.bytes = 1 << 18;
  const SyntheticCorpus a(cfg), b(cfg);
  CHECK(a.bytes() == b.bytes());
  CHECK(a.vocabulary() == b.vocabulary());
  cfg.seed = 1235;
  const SyntheticCorpus c(cfg);
  CHECK(a.bytes() != c.bytes());
  CHECK(a.vocabulary() != c.vocabulary());
  // The same seed with a larger size extends the same text (documents are generated in order).
  SyntheticCorpusConfig big;
  big.bytes = 1 << 19;
  const SyntheticCorpus d(big);
  CHECK(std::equal(a.bytes().begin(), a.bytes().end(), d.bytes().begin()));
}

TEST_CASE("synthetic corpus: pinned text for seed 1234", "[data][synthetic]") {
  SyntheticCorpusConfig cfg;
  cfg.bytes = 4096;
  const SyntheticCorpus a(cfg);
  const std::string head(a.bytes().begin(), a.bytes().begin() + 60);
  CHECK(head == "Kakit du r, r r vanepapu dud r, vanepapu dud fape keletapo h");
}

TEST_CASE("synthetic corpus: documents end in EOD, text holds no NUL", "[data][synthetic]") {
  SyntheticCorpusConfig cfg;
  cfg.bytes = 1 << 20;
  const SyntheticCorpus a(cfg);
  const auto& b = a.bytes();
  CHECK(int64_t(b.size()) >= cfg.bytes);
  CHECK(int64_t(b.size()) < cfg.bytes + 65536);
  CHECK(b.back() == ByteTokenizer::kEod);
  int64_t eods = 0, lo = 256, hi = 0;
  for (uint8_t t : b) {
    eods += t == ByteTokenizer::kEod;
    if (t != ByteTokenizer::kEod) lo = std::min<int64_t>(lo, t), hi = std::max<int64_t>(hi, t);
  }
  CHECK(eods == a.num_documents());
  CHECK(a.num_documents() > 100);
  CHECK(lo >= 10);  // '\n'
  CHECK(hi <= 'z');
  std::vector<int32_t> got(100);
  a.read(1000, 100, got.data());
  for (int k = 0; k < 100; ++k) CHECK(got[size_t(k)] == b[size_t(1000 + k)]);
  CHECK_THROWS(a.read(a.num_tokens() - 5, 6, got.data()));
}

TEST_CASE("synthetic corpus: learnable (byte entropies far below log 256)", "[data][synthetic]") {
  SyntheticCorpusConfig cfg;  // the default: 4 MiB, seed 1234
  const auto t0 = std::chrono::steady_clock::now();
  const SyntheticCorpus a(cfg);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ByteEntropy e = measure_byte_entropy(a);
  std::printf(
      "synthetic corpus: %lld tokens, %lld documents, generated in %.3f s; byte entropy (nats): "
      "unigram %.3f, bigram joint %.3f, conditional H(x_t+1|x_t) %.3f; log(256) = %.3f\n",
      static_cast<long long>(a.num_tokens()), static_cast<long long>(a.num_documents()), secs,
      e.unigram, e.bigram_joint, e.conditional, std::log(256.0));
  CHECK(e.unigram < 3.2);
  CHECK(e.conditional < 2.1);
  CHECK(e.conditional > 0.5);  // not degenerate
  for (uint64_t seed : {1ull, 2ull, 77ull}) {
    SyntheticCorpusConfig c2;
    c2.seed = seed;
    c2.bytes = 1 << 20;
    const ByteEntropy f = measure_byte_entropy(SyntheticCorpus(c2));
    CAPTURE(seed, f.unigram, f.conditional);
    CHECK(f.unigram < 3.4);
    CHECK(f.conditional < 2.3);
  }
}
