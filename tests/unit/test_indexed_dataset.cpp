// The Megatron indexed dataset (data/indexed_dataset.hpp) and the byte tokenizer
// (data/tokenizer.hpp): exact .idx bytes, round trips for u8/u16/i32, the concatenated token
// stream, and one clear error for each kind of bad file.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "data/indexed_dataset.hpp"
#include "data/tokenizer.hpp"
#include "runtime/error.hpp"

using namespace lockstep;
using namespace lockstep::data;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  const fs::path p =
      fs::temp_directory_path() / ("lockstep_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

std::vector<unsigned char> slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const fs::path& p, const std::vector<unsigned char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

template <class T>
void put(std::vector<unsigned char>& b, T v) {
  unsigned char tmp[sizeof(T)];
  std::memcpy(tmp, &v, sizeof(T));
  for (unsigned char c : tmp) b.push_back(c);
}

// The error message of f(), or "" if it does not throw lockstep::Error.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const std::vector<std::vector<int32_t>> kDocs = {{72, 105, 0}, {1, 2, 3, 4, 5, 0}, {300, 0}};

std::string build(const fs::path& dir, IndexDType dt,
                  const std::vector<std::vector<int32_t>>& docs) {
  const std::string prefix = (dir / "ds").string();
  IndexedDatasetBuilder b(prefix, dt);
  for (const auto& d : docs) b.add_document(d);
  b.finalize();
  return prefix;
}

}  // namespace

TEST_CASE("byte tokenizer: token = byte, NUL dropped, EOD = 0", "[data][tokenizer]") {
  std::vector<int32_t> t;
  const std::string text("a\0b\xff", 4);
  CHECK(ByteTokenizer::encode(text, t) == 1);
  CHECK(t == std::vector<int32_t>{97, 98, 255});
  t.push_back(ByteTokenizer::kEod);
  CHECK(ByteTokenizer::decode(t.data(), 4, "|") == "ab\xff|");
  CHECK(ByteTokenizer::kVocab == 256);
  CHECK(optimal_index_dtype(256) == IndexDType::u16);
  CHECK(optimal_index_dtype(65500) == IndexDType::i32);
}

TEST_CASE("indexed dataset: the .idx bytes are Megatron's MMIDIDX layout", "[data][indexed]") {
  const fs::path dir = temp_dir("idx_layout");
  const std::string prefix = build(dir, IndexDType::u16, kDocs);
  const unsigned char magic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};
  std::vector<unsigned char> want(magic, magic + 9);
  put<uint64_t>(want, 1);  // version
  put<uint8_t>(want, 8);   // uint16
  put<uint64_t>(want, 3);  // sequences
  put<uint64_t>(want, 4);  // document indices = documents + 1
  for (int32_t len : {3, 6, 2}) put<int32_t>(want, len);
  for (int64_t ptr : {0, 6, 18}) put<int64_t>(want, ptr);
  for (int64_t d : {0, 1, 2, 3}) put<int64_t>(want, d);
  CHECK(slurp(prefix + ".idx") == want);
  std::vector<unsigned char> bin_want;
  for (const auto& d : kDocs)
    for (int32_t t : d) put<uint16_t>(bin_want, uint16_t(t));
  CHECK(slurp(prefix + ".bin") == bin_want);
  CHECK(!fs::exists(prefix + ".bin.tmp"));
  CHECK(!fs::exists(prefix + ".idx.tmp"));
  fs::remove_all(dir);
}

TEST_CASE("indexed dataset: round trip for uint8, uint16, int32", "[data][indexed]") {
  for (IndexDType dt : {IndexDType::u8, IndexDType::u16, IndexDType::i32}) {
    CAPTURE(index_dtype_name(dt));
    const fs::path dir = temp_dir("idx_roundtrip");
    auto docs = kDocs;
    if (dt == IndexDType::u8) docs[2] = {200, 0};
    if (dt == IndexDType::i32) docs[2] = {-7, 1 << 20, 0};
    const std::string prefix = build(dir, dt, docs);
    IndexedDataset ds(prefix);
    CHECK(ds.dtype() == dt);
    REQUIRE(ds.num_sequences() == 3);
    REQUIRE(ds.num_documents() == 3);
    std::vector<int32_t> all;
    for (int64_t i = 0; i < 3; ++i) {
      CHECK(ds.sequence(i) == docs[size_t(i)]);
      CHECK(ds.document_sequences(i) == std::pair<int64_t, int64_t>{i, i + 1});
      all.insert(all.end(), docs[size_t(i)].begin(), docs[size_t(i)].end());
    }
    REQUIRE(ds.num_tokens() == int64_t(all.size()));
    // Every range of the concatenated stream, including ones that cross sequences.
    for (int64_t a = 0; a <= ds.num_tokens(); ++a)
      for (int64_t n = 0; a + n <= ds.num_tokens(); ++n) {
        std::vector<int32_t> got(size_t(n) + 1, -99);
        ds.read(a, n, got.data());
        CHECK(std::equal(got.begin(), got.begin() + n, all.begin() + a));
        CHECK(got[size_t(n)] == -99);
      }
    std::vector<int32_t> two(2);
    ds.read_sequence(1, 2, 2, two.data());
    CHECK(two == std::vector<int32_t>{3, 4});
    CHECK_THROWS_AS(ds.read(ds.num_tokens() - 1, 2, two.data()), Error);
    CHECK_THROWS_AS(ds.read_sequence(1, 5, 2, two.data()), Error);
    CHECK_THROWS_AS(ds.sequence(3), Error);
    fs::remove_all(dir);
  }
}

TEST_CASE("indexed dataset: multi-sequence documents and empty sequences", "[data][indexed]") {
  const fs::path dir = temp_dir("idx_multi");
  const std::string prefix = (dir / "m").string();
  {
    IndexedDatasetBuilder b(prefix, IndexDType::u16);
    b.add_sequence(std::vector<int32_t>{1, 2});
    b.add_sequence(std::vector<int32_t>{});
    b.add_sequence(std::vector<int32_t>{3});
    b.end_document();
    b.add_document(std::vector<int32_t>{4, 0});
    CHECK(b.num_documents() == 2);
    CHECK(b.num_sequences() == 4);
    b.finalize();
  }
  IndexedDataset ds(prefix);
  CHECK(ds.num_documents() == 2);
  CHECK(ds.document_sequences(0) == std::pair<int64_t, int64_t>{0, 3});
  CHECK(ds.document_sequences(1) == std::pair<int64_t, int64_t>{3, 4});
  std::vector<int32_t> all(5);
  ds.read(0, 5, all.data());
  CHECK(all == std::vector<int32_t>{1, 2, 3, 4, 0});
  std::vector<int32_t> mid(2);
  ds.read(2, 2, mid.data());
  CHECK(mid == std::vector<int32_t>{3, 4});
  fs::remove_all(dir);
}

TEST_CASE("indexed dataset builder: bad tokens and unfinished builds", "[data][indexed]") {
  const fs::path dir = temp_dir("idx_builder");
  const std::string prefix = (dir / "b").string();
  {
    IndexedDatasetBuilder b(prefix, IndexDType::u16);
    const std::string msg = error_of([&] { b.add_document(std::vector<int32_t>{1, 70000}); });
    CHECK(msg.find("70000") != std::string::npos);
    CHECK(msg.find("uint16") != std::string::npos);
    b.add_document(std::vector<int32_t>{1});
    // no finalize: the destructor removes the temporary files
  }
  CHECK(fs::is_empty(dir));
  CHECK_THROWS_AS(IndexedDatasetBuilder((dir / "f").string(), IndexDType::f32), Error);
  CHECK(error_of([&] {
          IndexedDatasetBuilder((dir / "no/such/dir/x").string(), IndexDType::u16);
        }).find("no/such/dir/x.bin.tmp") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("indexed dataset reader: corrupt and truncated files give one clear error",
          "[data][indexed]") {
  const fs::path dir = temp_dir("idx_corrupt");
  const std::string prefix = build(dir, IndexDType::u16, kDocs);
  const auto idx = slurp(prefix + ".idx"), bin = slurp(prefix + ".bin");
  const std::string ip = prefix + ".idx", bp = prefix + ".bin";
  auto expect = [&](const std::string& needle1, const std::string& needle2) {
    const std::string msg = error_of([&] { IndexedDataset ds(prefix); });
    CAPTURE(msg);
    CHECK(msg.find(needle1) != std::string::npos);
    CHECK(msg.find(needle2) != std::string::npos);
    CHECK(msg.find("hint:") != std::string::npos);
  };
  SECTION("missing files") {
    fs::remove(ip);
    expect(ip, "No such file");
  }
  SECTION("idx shorter than the header") {
    spit(ip, {idx.begin(), idx.begin() + 20});
    expect(ip, "34-byte header");
  }
  SECTION("idx truncated inside the arrays") {
    spit(ip, {idx.begin(), idx.end() - 3});
    expect(ip, "implies");
  }
  SECTION("bad magic") {
    auto b = idx;
    b[0] = 'X';
    spit(ip, b);
    expect(ip, "magic");
  }
  SECTION("bad version") {
    auto b = idx;
    b[9] = 2;
    spit(ip, b);
    expect(ip, "version 2");
  }
  SECTION("unsupported dtype") {
    auto b = idx;
    b[17] = 7;
    spit(ip, b);
    expect(ip, "float32");
  }
  SECTION("unknown dtype code") {
    auto b = idx;
    b[17] = 42;
    spit(ip, b);
    expect(ip, "dtype code 42");
  }
  SECTION("bin truncated") {
    spit(bp, {bin.begin(), bin.end() - 2});
    expect(bp, "sequence 2");
  }
  SECTION("document indices inconsistent") {
    auto b = idx;
    b[b.size() - 8] = 9;  // last document index != N
    spit(ip, b);
    expect(ip, "document indices");
  }
  SECTION("huge counts") {
    auto b = idx;
    b[25] = 0x7f;  // sequence count ~ 2^63
    spit(ip, b);
    expect(ip, "impossible header");
  }
  fs::remove_all(dir);
}
