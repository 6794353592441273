// GPT sample packing (data/gpt_dataset.hpp): sample i is the C + 1 tokens at i*C of the
// concatenated document stream, (T - 1) / C samples, labels shifted by one, windows crossing
// documents; the same from an indexed dataset and from an in-memory source.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/gpt_dataset.hpp"
#include "data/indexed_dataset.hpp"
#include "data/synthetic_corpus.hpp"
#include "runtime/error.hpp"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {

class VectorSource : public TokenSource {
 public:
  explicit VectorSource(std::vector<int32_t> t) : t_(std::move(t)) {}
  int64_t num_tokens() const override { return int64_t(t_.size()); }
  void read(int64_t first, int64_t count, int32_t* out) const override {
    check(first >= 0 && first + count <= num_tokens(), "VectorSource: out of range");
    for (int64_t k = 0; k < count; ++k) out[k] = t_[size_t(first + k)];
  }
  std::string describe() const override { return "vector source"; }

 private:
  std::vector<int32_t> t_;
};

std::vector<int32_t> iota_tokens(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t(i % 251);
  return v;
}

}  // namespace

TEST_CASE("gpt dataset: sample count and windows", "[data][gpt]") {
  for (int64_t t : {9, 10, 11, 17, 100}) {
    for (int64_t c : {1, 4, 8}) {
      if (t < c + 1) continue;
      CAPTURE(t, c);
      auto src = std::make_shared<VectorSource>(iota_tokens(t));
      GptDataset ds(src, c);
      CHECK(ds.num_samples() == (t - 1) / c);
      std::vector<int32_t> tok(static_cast<size_t>(c)), lab(static_cast<size_t>(c)),
          win(static_cast<size_t>(c + 1));
      for (int64_t i = 0; i < ds.num_samples(); ++i) {
        ds.sample(i, tok.data(), lab.data());
        ds.window(i, win.data());
        for (int64_t k = 0; k < c; ++k) {
          CHECK(tok[size_t(k)] == int32_t((i * c + k) % 251));
          CHECK(lab[size_t(k)] == int32_t((i * c + k + 1) % 251));
          CHECK(win[size_t(k)] == tok[size_t(k)]);
        }
        CHECK(win[size_t(c)] == lab[size_t(c - 1)]);
      }
      // consecutive samples overlap by exactly one token: last label of i = first input of i+1
      if (ds.num_samples() >= 2) {
        std::vector<int32_t> t2(static_cast<size_t>(c)), l2(static_cast<size_t>(c));
        ds.sample(0, tok.data(), lab.data());
        ds.sample(1, t2.data(), l2.data());
        CHECK(lab[size_t(c - 1)] == t2[0]);
      }
      CHECK_THROWS_AS(ds.sample(ds.num_samples(), tok.data(), lab.data()), Error);
      CHECK_THROWS_AS(ds.sample(-1, tok.data(), lab.data()), Error);
    }
  }
}

TEST_CASE("gpt dataset: packs across documents of an indexed dataset", "[data][gpt]") {
  const fs::path dir =
      fs::temp_directory_path() / ("lockstep_test_gpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string prefix = (dir / "p").string();
  std::vector<int32_t> all;
  {
    IndexedDatasetBuilder b(prefix, IndexDType::u16);
    for (int d = 0; d < 7; ++d) {
      std::vector<int32_t> doc;
      for (int k = 0; k < 3 + 2 * d; ++k) doc.push_back(1 + (d * 31 + k) % 255);
      doc.push_back(0);  // EOD
      b.add_document(doc);
      all.insert(all.end(), doc.begin(), doc.end());
    }
    b.finalize();
  }
  auto idx = std::make_shared<IndexedDataset>(prefix);
  auto vec = std::make_shared<VectorSource>(all);
  const int64_t c = 5;
  GptDataset a(idx, c), v(vec, c);
  REQUIRE(a.num_samples() == int64_t(all.size() - 1) / c);
  REQUIRE(a.num_samples() == v.num_samples());
  std::vector<int64_t> order;
  for (int64_t i = a.num_samples() - 1; i >= 0; --i) order.push_back(i);
  const size_t n = order.size() * size_t(c);
  std::vector<int32_t> ta(n), la(n), tv(n), lv(n);
  a.fill(order.data(), int64_t(order.size()), ta.data(), la.data());
  v.fill(order.data(), int64_t(order.size()), tv.data(), lv.data());
  CHECK(ta == tv);
  CHECK(la == lv);
  CHECK(ta[0] == all[size_t(order[0] * c)]);

  DataConfig cfg;
  cfg.path = prefix;
  CHECK(open_token_source(cfg, 1234)->num_tokens() == int64_t(all.size()));
  std::vector<uint16_t> u(all.size());
  idx->read_u16(0, int64_t(all.size()), u.data());
  CHECK(std::equal(u.begin(), u.end(), all.begin()));
  fs::remove_all(dir);
}

TEST_CASE("gpt dataset: the vocabulary check and too-small sources", "[data][gpt]") {
  auto src = std::make_shared<VectorSource>(std::vector<int32_t>{1, 2, 300, 4, 5});
  GptDataset ok(src, 2);
  std::vector<int32_t> t(2), l(2);
  ok.sample(1, t.data(), l.data());
  CHECK(t == std::vector<int32_t>{300, 4});
  GptDataset checked(src, 2, 256);
  // window 0 = {1, 2, 300}: 300 is the last label, and labels are checked too
  CHECK_THROWS_WITH(checked.sample(0, t.data(), l.data()),
                    Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(GptDataset(src, 5), Catch::Contains("fewer than context + 1"));
  CHECK_THROWS_AS(GptDataset(src, 0), Error);
}

TEST_CASE("gpt dataset: no data configured means the synthetic corpus", "[data][gpt]") {
  auto src = open_token_source(DataConfig{}, 1234, 1 << 16);
  CHECK(src->describe().find("synthetic") != std::string::npos);
  CHECK(src->num_tokens() >= (1 << 16));
  GptDataset ds(src, 64, 256);
  CHECK(ds.num_samples() == (src->num_tokens() - 1) / 64);
}
