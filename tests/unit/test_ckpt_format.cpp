// Unit tests of the checkpoint formats (checkpoint/safetensors.hpp, checkpoint/meta.hpp) and
// the corruption table of issue 4: each damage gives one lockstep::Error naming the file and
// the tensor, no crash, and (for everything detectable before reading tensor bytes) leaves
// the destination pieces untouched. A checkpoint is written by ckpt::save in an MPI
// singleton (one rank).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/direct_io.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "verify/fingerprint.hpp"

using namespace lockstep;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

Context& mpi() {
  static int argc = 0;
  static char** argv = nullptr;
  static Context ctx(&argc, &argv);
  return ctx;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string header_bytes(const std::string& json_text) {
  std::string out(8, '\0');
  const std::uint64_t n = json_text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json_text;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A two-tensor state saved as one checkpoint; pieces to load it into.
struct Fixture {
  std::string root, dir;
  std::vector<float> w = std::vector<float>(6 * 4), b = std::vector<float>(5);
  std::vector<float> w2 = std::vector<float>(6 * 4, -1.0f), b2 = std::vector<float>(5, -1.0f);
  std::vector<StatePiece> dst;

  Fixture() {
    root = (fs::temp_directory_path() / ("lockstep_test_ckpt_format_" + std::to_string(getpid())))
               .string();
    fs::remove_all(root);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i) - 3.0f;
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = -1.5f * static_cast<float>(i);
    std::vector<StatePiece> src;
    // param/w [6, 4] saved as two TP boxes on dim 0; param/b [5] whole.
    for (int half = 0; half < 2; ++half) {
      StatePiece p;
      p.name = "param/w";
      p.global_shape = {6, 4};
      p.box_offset = {3 * half, 0};
      p.box_shape = {3, 4};
      p.flat_end = 12;
      p.data = w.data() + 12 * half;
      src.push_back(p);
    }
    StatePiece pb;
    pb.name = "param/b";
    pb.global_shape = pb.box_shape = {5};
    pb.box_offset = {0};
    pb.flat_end = 5;
    pb.data = b.data();
    src.push_back(pb);
    const std::map<std::string, std::uint64_t> fps = {{"param/w", fingerprint_range("param/w", w)},
                                                      {"param/b", fingerprint_range("param/b", b)}};
    dir = ckpt::save(mpi().world(), {root, 1, 0, -1}, src, fps, {{"note", "unit"}});
    StatePiece dw;
    dw.name = "param/w";
    dw.global_shape = dw.box_shape = {6, 4};
    dw.box_offset = {0, 0};
    dw.flat_end = 24;
    dw.data = w2.data();
    StatePiece db = pb;
    db.data = b2.data();
    dst = {dw, db};
  }
  ~Fixture() { fs::remove_all(root); }

  std::string shard() const { return (fs::path(dir) / "rank_00000.safetensors").string(); }
  std::string meta_path() const { return (fs::path(dir) / "meta.json").string(); }
  bool untouched() const {
    for (float x : w2)
      if (x != -1.0f) return false;
    for (float x : b2)
      if (x != -1.0f) return false;
    return true;
  }
  // read_meta + load; returns the error message ("" if it loaded).
  std::string load() {
    return error_of([&] { ckpt::load(mpi().world(), dir, ckpt::read_meta(dir), dst); });
  }
  void edit_meta(const std::function<void(json&)>& f) {
    json j = json::parse(slurp(meta_path()));
    f(j);
    spit(meta_path(), j.dump(1));
  }
  // Rewrites the shard's header JSON (data unchanged).
  void edit_header(const std::function<void(json&)>& f) {
    const std::string bytes = slurp(shard());
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
    json h = json::parse(bytes.substr(8, n));
    f(h);
    std::string text = h.dump();
    text.resize(n, ' ');  // keep the data where it was (the edits below keep it short)
    REQUIRE(text.size() == n);
    spit(shard(), header_bytes(text) + bytes.substr(8 + n));
  }
};

bool names(const std::string& msg, const std::string& file, const std::string& tensor) {
  return msg.find(file) != std::string::npos && msg.find("tensor '" + tensor) != std::string::npos;
}

}  // namespace

TEST_CASE("safetensors round trip: header layout, alignment, values") {
  const std::string path =
      (fs::temp_directory_path() / ("lockstep_st_" + std::to_string(getpid()))).string();
  std::vector<float> a = {1.0f, -2.0f, 3.5f, 0.0f, -0.0f, 1e-30f};
  std::vector<std::int32_t> c = {7, -8, 9};
  ckpt::write_safetensors(path, {{"a", DType::f32, {2, 3}, a.data(), 24},
                                 {"c", DType::i32, {3}, c.data(), 12},
                                 {"empty", DType::f32, {0, 4}, nullptr, 0}});
  const ckpt::StHeader h = ckpt::read_safetensors_header(path);
  CHECK(h.data_start % 8 == 0);
  CHECK(h.file_size == h.data_start + 36);
  REQUIRE(h.tensors.size() == 3);
  const ckpt::StEntry* ea = h.find("a");
  const ckpt::StEntry* ec = h.find("c");
  REQUIRE(ea);
  REQUIRE(ec);
  CHECK(ea->shape == Shape{2, 3});
  CHECK(ea->begin == 0);
  CHECK(ea->end == 24);
  CHECK(ec->dtype == DType::i32);
  CHECK(ec->begin == 24);
  const std::string bytes = slurp(path);
  CHECK(std::memcmp(bytes.data() + h.data_start, a.data(), 24) == 0);
  CHECK(std::memcmp(bytes.data() + h.data_start + 24, c.data(), 12) == 0);
  fs::remove(path);
}

// Where the O_DIRECT tests write: the temp directory and, if present, /dev/shm (tmpfs,
// which may refuse O_DIRECT: the fallback path).
std::vector<std::string> direct_io_dirs() {
  std::vector<std::string> dirs = {fs::temp_directory_path().string()};
  if (ckpt::is_directory("/dev/shm")) dirs.push_back("/dev/shm");
  return dirs;
}

TEST_CASE("direct writer: exact bytes and hashes, O_DIRECT or page cache, tmpfs falls back") {
  // Spans that straddle the 8 MiB staging blocks and the chunks, sizes not multiples of
  // 4 KiB, an empty span; chunk_bytes small so each span has many chunks.
  std::vector<std::vector<float>> data = {
      std::vector<float>(2500001), std::vector<float>(7), {}, std::vector<float>(1100000)};
  for (std::size_t t = 0; t < data.size(); ++t)
    for (std::size_t i = 0; i < data[t].size(); ++i)
      data[t][i] = static_cast<float>((i * 2654435761u + t) % 100003) * 0.001f - 7.0f;
  std::vector<ckpt::StTensor> tensors;
  std::vector<ckpt::ByteSpan> spans;
  for (std::size_t t = 0; t < data.size(); ++t) {
    const std::uint64_t bytes = data[t].size() * 4;
    tensors.push_back({"t" + std::to_string(t),
                       DType::f32,
                       {static_cast<std::int64_t>(data[t].size())},
                       data[t].data(),
                       bytes});
    spans.push_back({data[t].data(), bytes});
  }
  const std::string header = ckpt::safetensors_header(tensors);
  const std::uint64_t chunk = 1000004;
  std::string want = header;
  std::vector<std::uint64_t> want_whole;
  std::vector<std::vector<std::uint64_t>> want_chunks;
  for (std::size_t t = 0; t < data.size(); ++t) {
    want.append(reinterpret_cast<const char*>(data[t].data()), data[t].size() * 4);
    std::uint64_t whole = 0;
    want_chunks.push_back(ckpt::chunk_hashes(data[t].data(), data[t].size() * 4, chunk, &whole));
    want_whole.push_back(whole);
  }
  auto same_hashes = [&](const std::vector<ckpt::SpanHash>& got) {
    REQUIRE(got.size() == data.size());
    for (std::size_t t = 0; t < data.size(); ++t) {
      CHECK(got[t].whole == want_whole[t]);
      CHECK(got[t].chunks == want_chunks[t]);
    }
  };
  for (const std::string& dir : direct_io_dirs())
    for (bool direct : {true, false}) {
      INFO("dir " << dir << ", direct_io " << direct);
      const std::string path =
          (fs::path(dir) / ("lockstep_dw_" + std::to_string(getpid()))).string();
      same_hashes(ckpt::write_pipelined(path, header, spans, chunk, direct));
      CHECK(slurp(path) == want);
      CHECK(ckpt::read_safetensors_header(path).tensors.size() == data.size());
      ckpt::FileImage image;
      same_hashes(image.build(header, spans, chunk));
      image.write(path, direct);
      CHECK(slurp(path) == want);
      // A smaller second image in the same buffer: the file holds exactly its bytes.
      const std::vector<ckpt::ByteSpan> small = {spans[1]};
      const std::string small_header = ckpt::safetensors_header({tensors[1]});
      const std::vector<ckpt::SpanHash> h = image.build(small_header, small, chunk);
      image.write(path, direct);
      CHECK(slurp(path) == small_header + want.substr(header.size() + data[0].size() * 4, 28));
      CHECK(h.at(0).whole == want_whole[1]);
      fs::remove(path);
    }
}

TEST_CASE("pipelined reader: exact bytes of each range, O_DIRECT or page cache, truncation") {
  // A file of 21 MB with a known pattern; ranges at unaligned offsets, one straddling many
  // pieces, a short one, one ending at the end of the file, an empty one.
  std::string bytes(21'000'003, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  const std::vector<ckpt::ReadRange> ranges = {
      {3, 17}, {4096, 0}, {5000, 9'000'001}, {9'100'000, 4096}, {12'000'001, 9'000'002}};
  const std::uint64_t piece = 3'000'000;
  for (const std::string& dir : direct_io_dirs())
    for (bool direct : {true, false}) {
      INFO("dir " << dir << ", direct_io " << direct);
      const std::string path =
          (fs::path(dir) / ("lockstep_dr_" + std::to_string(getpid()))).string();
      spit(path, bytes);
      std::vector<std::string> got(ranges.size());
      std::vector<std::uint64_t> next(ranges.size(), 0);
      bool in_order = true;
      ckpt::read_pipelined(
          path, ranges, piece,
          [&](std::size_t r, std::uint64_t at, const char* data, std::uint64_t n) {
            in_order = in_order && at == next[r] && n <= piece && n > 0;
            next[r] = at + n;
            got[r].append(data, n);
          },
          direct);
      CHECK(in_order);
      for (std::size_t r = 0; r < ranges.size(); ++r)
        CHECK(got[r] == bytes.substr(ranges[r].offset, ranges[r].bytes));
      // The consumer's error stops the reader and comes out unchanged.
      CHECK(error_of([&] {
              ckpt::read_pipelined(
                  path, ranges, piece,
                  [&](std::size_t r, std::uint64_t, const char*, std::uint64_t) {
                    if (r == 2) fail("consumer says no");
                  },
                  direct);
            }).find("consumer says no") != std::string::npos);
      // A file shorter than the last range: an error naming the file, "truncated".
      spit(path, bytes.substr(0, bytes.size() - 5));
      const std::string msg = error_of([&] {
        ckpt::read_pipelined(
            path, ranges, piece, [](auto...) {}, direct);
      });
      CHECK_THAT(msg, Catch::Contains(path) && Catch::Contains("truncated"));
      fs::remove(path);
    }
}

TEST_CASE("safetensors parser rejects damaged headers with one clear error") {
  const std::string f = "x.safetensors";
  auto err = [&](const std::string& file_bytes) {
    return error_of([&] { ckpt::parse_safetensors(file_bytes, file_bytes.size(), f); });
  };
  const std::string data(16, '\0');
  CHECK_THAT(err("abc"), Catch::Contains("too short"));
  std::string huge = header_bytes("{}");
  huge[5] = 1;  // length 2^40 + 2
  CHECK_THAT(err(huge), Catch::Contains("larger than the file"));
  CHECK_THAT(err(header_bytes("{nope") + data), Catch::Contains("not valid JSON"));
  CHECK_THAT(
      err(header_bytes(R"({"t":{"dtype":"BF17","shape":[4],"data_offsets":[0,16]}})") + data),
      Catch::Contains("tensor 't'") && Catch::Contains("unknown dtype 'BF17'"));
  CHECK_THAT(err(header_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,32]}})") + data),
             Catch::Contains("out of bounds"));
  CHECK_THAT(err(header_bytes(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})") +
                 data),
             Catch::Contains("overlap"));
  CHECK_THAT(err(header_bytes(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})") + data),
             Catch::Contains("needs 12 bytes"));
  CHECK_THAT(
      err(header_bytes(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,16]}})") + data),
      Catch::Contains("not a non-negative integer"));
  CHECK_THAT(err(header_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[8,0]}})") + data),
             Catch::Contains("end before they begin"));
  CHECK(err(header_bytes(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})") + data) ==
        "");
}

TEST_CASE("corruption table: one clear error naming file and tensor, no partial load") {
  mpi();
  SECTION("intact checkpoint loads bit for bit") {
    Fixture fx;
    CHECK(fx.load() == "");
    CHECK(std::memcmp(fx.w.data(), fx.w2.data(), 24 * 4) == 0);
    CHECK(std::memcmp(fx.b.data(), fx.b2.data(), 5 * 4) == 0);
    CHECK(ckpt::verify_checkpoint(fx.dir, ckpt::read_meta(fx.dir)).empty());
  }
  SECTION("flipped byte in a shard") {
    Fixture fx;
    std::string bytes = slurp(fx.shard());
    const ckpt::StHeader h = ckpt::read_safetensors_header(fx.shard());
    bytes[h.data_start + h.find("param/b")->begin + 2] ^= 0x10;
    spit(fx.shard(), bytes);
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/b"));
    CHECK_THAT(msg, Catch::Contains("XXH3-64"));
    const auto problems = ckpt::verify_checkpoint(fx.dir, ckpt::read_meta(fx.dir));
    REQUIRE(problems.size() == 1);
    CHECK(names(problems[0], fx.shard(), "param/b"));
  }
  SECTION("truncated shard") {
    Fixture fx;
    const std::string bytes = slurp(fx.shard());
    spit(fx.shard(), bytes.substr(0, bytes.size() - 6));
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/"));
    CHECK_THAT(msg, Catch::Contains("out of bounds"));
    CHECK(fx.untouched());
  }
  SECTION("missing shard") {
    Fixture fx;
    fs::remove(fx.shard());
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json missing") {
    Fixture fx;
    fs::remove(fx.meta_path());
    const std::string msg = fx.load();
    CHECK_THAT(msg, Catch::Contains(fx.dir) && Catch::Contains("no meta.json"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json garbled") {
    Fixture fx;
    spit(fx.meta_path(), slurp(fx.meta_path()).substr(0, 100));
    const std::string msg = fx.load();
    CHECK_THAT(msg, Catch::Contains(fx.meta_path()) && Catch::Contains("not valid JSON"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json with wrong sizes: global shape") {
    Fixture fx;
    fx.edit_meta([](json& j) { j["tensors"]["param/w"]["shape"] = {7, 4}; });
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.meta_path(), "param/w"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json with wrong sizes: a shard's flat range") {
    Fixture fx;
    fx.edit_meta([](json& j) { j["tensors"]["param/b"]["shards"][0]["flat_range"] = {0, 4}; });
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.meta_path(), "param/b"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json: box outside the tensor, overlapping shards") {
    Fixture fx;
    fx.edit_meta([](json& j) { j["tensors"]["param/w"]["shards"][1]["box_offset"] = {2, 0}; });
    std::string msg = fx.load();
    CHECK(names(msg, fx.meta_path(), "param/w"));
    CHECK_THAT(msg, Catch::Contains("overlap"));
    fx.edit_meta([](json& j) { j["tensors"]["param/w"]["shards"][1]["box_offset"] = {4, 0}; });
    msg = fx.load();
    CHECK_THAT(msg, Catch::Contains("lies outside"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json: unknown dtype") {
    Fixture fx;
    fx.edit_meta([](json& j) { j["tensors"]["param/b"]["dtype"] = "F8"; });
    const std::string msg = fx.load();
    CHECK(names(msg, fx.meta_path(), "param/b"));
    CHECK_THAT(msg, Catch::Contains("unknown dtype"));
    CHECK(fx.untouched());
  }
  SECTION("meta.json: shard file name with .. or /") {
    for (const char* bad :
         {"../rank_00000.safetensors", "/etc/passwd", "sub/rank_00000.safetensors"}) {
      Fixture fx;
      fx.edit_meta([&](json& j) { j["tensors"]["param/b"]["shards"][0]["file"] = bad; });
      const std::string msg = fx.load();
      INFO(msg);
      CHECK(names(msg, fx.meta_path(), "param/b"));
      CHECK_THAT(msg, Catch::Contains("not a plain file name"));
      CHECK(fx.untouched());
    }
  }
  SECTION("safetensors header length larger than the file") {
    Fixture fx;
    std::string bytes = slurp(fx.shard());
    bytes[6] = 0x7f;
    spit(fx.shard(), bytes);
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/"));
    CHECK_THAT(msg, Catch::Contains("larger than the file"));
    CHECK(fx.untouched());
  }
  SECTION("overlapping data_offsets") {
    Fixture fx;
    fx.edit_header([](json& h) { h["param/b"]["data_offsets"] = {0, 20}; });
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/"));
    CHECK_THAT(msg, Catch::Contains("overlap"));
    CHECK(fx.untouched());
  }
  SECTION("out-of-bounds data_offsets") {
    Fixture fx;
    fx.edit_header([](json& h) { h["param/b"]["data_offsets"] = {200, 220}; });
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/b"));
    CHECK_THAT(msg, Catch::Contains("out of bounds"));
    CHECK(fx.untouched());
  }
  SECTION("unknown dtype in the shard header") {
    Fixture fx;
    fx.edit_header([](json& h) { h["param/b"]["dtype"] = "Q4"; });
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(names(msg, fx.shard(), "param/b"));
    CHECK_THAT(msg, Catch::Contains("unknown dtype 'Q4'"));
    CHECK(fx.untouched());
  }
}

TEST_CASE("export writes one unsharded file of the parameters") {
  mpi();
  Fixture fx;
  const std::string out = fx.root + "/export.safetensors";
  CHECK(ckpt::export_tensors(fx.dir, ckpt::read_meta(fx.dir), out) == 2);
  const ckpt::StHeader h = ckpt::read_safetensors_header(out);
  REQUIRE(h.find("w"));
  REQUIRE(h.find("b"));
  CHECK(h.find("w")->shape == Shape{6, 4});
  const std::string bytes = slurp(out);
  CHECK(std::memcmp(bytes.data() + h.data_start + h.find("w")->begin, fx.w.data(), 96) == 0);
  CHECK(std::memcmp(bytes.data() + h.data_start + h.find("b")->begin, fx.b.data(), 20) == 0);
}

TEST_CASE("fingerprint versions: format 2 records its version, format 1 reads as v1") {
  mpi();
  Fixture fx;
  auto fp_hex = [&](const char* name, const std::vector<float>& v, FpVersion ver) {
    return hex64(fingerprint_range(name, v, 0, ver));
  };
  auto loads_exactly = [&] {
    const std::string msg = fx.load();
    INFO(msg);
    CHECK(msg == "");
    CHECK(std::memcmp(fx.w.data(), fx.w2.data(), 24 * 4) == 0);
    CHECK(ckpt::verify_checkpoint(fx.dir, ckpt::read_meta(fx.dir)).empty());
  };
  SECTION("written as format 2 with fingerprint_version 2") {
    const json j = json::parse(slurp(fx.meta_path()));
    CHECK(j["format_version"] == 2);
    CHECK(j["fingerprint_version"] == 2);
    CHECK(ckpt::read_meta(fx.dir).fingerprint_version == FpVersion::v2);
    CHECK(j["tensors"]["param/b"]["fingerprint"] == fp_hex("param/b", fx.b, FpVersion::v2));
    loads_exactly();
  }
  SECTION("a format-1 checkpoint (v1 fingerprints, no version field) loads and verifies") {
    fx.edit_meta([&](json& j) {
      j["format_version"] = 1;
      j.erase("fingerprint_version");
      j["tensors"]["param/w"]["fingerprint"] = fp_hex("param/w", fx.w, FpVersion::v1);
      j["tensors"]["param/b"]["fingerprint"] = fp_hex("param/b", fx.b, FpVersion::v1);
    });
    CHECK(ckpt::read_meta(fx.dir).fingerprint_version == FpVersion::v1);
    loads_exactly();
    CHECK(ckpt::export_tensors(fx.dir, ckpt::read_meta(fx.dir), fx.root + "/e.safetensors") == 2);
  }
  SECTION("v2 fingerprints under a format-1 meta.json fail the fingerprint check") {
    fx.edit_meta([&](json& j) {
      j["format_version"] = 1;
      j.erase("fingerprint_version");
    });
    const std::string msg = fx.load();
    INFO(msg);
    CHECK_THAT(msg, Catch::Contains("fingerprint of tensor 'param/"));
  }
  SECTION("format 2 without a valid fingerprint_version, or format 3, is refused") {
    fx.edit_meta([](json& j) { j.erase("fingerprint_version"); });
    CHECK_THAT(fx.load(), Catch::Contains("fingerprint_version"));
    fx.edit_meta([](json& j) { j["fingerprint_version"] = 3; });
    CHECK_THAT(fx.load(), Catch::Contains("fingerprint version 3"));
    fx.edit_meta([](json& j) {
      j["fingerprint_version"] = 2;
      j["format_version"] = 3;
    });
    CHECK_THAT(fx.load(), Catch::Contains("format_version 3 is not supported"));
    CHECK(fx.untouched());
  }
  SECTION("save with v1 fingerprints records version 1 and loads") {
    ckpt::SaveOptions opt{fx.root, 2, 0, -1};
    opt.fingerprint_version = FpVersion::v1;
    const ckpt::Meta before = ckpt::read_meta(fx.dir);
    std::vector<StatePiece> src = fx.dst;
    src[0].data = fx.w.data();
    src[1].data = fx.b.data();
    fx.dir = ckpt::save(mpi().world(), opt, src,
                        {{"param/w", fingerprint_range("param/w", fx.w, 0, FpVersion::v1)},
                         {"param/b", fingerprint_range("param/b", fx.b, 0, FpVersion::v1)}},
                        before.run);
    CHECK(ckpt::read_meta(fx.dir).fingerprint_version == FpVersion::v1);
    loads_exactly();
  }
}

// Not run by default ([.] hides it): tests/reference/safetensors_reader.py runs it to get a
// checkpoint with known values (the formulas are repeated in the Python reader).
TEST_CASE("write the interop checkpoint into $LOCKSTEP_CKPT_INTEROP_DIR", "[.interop]") {
  const char* env = std::getenv("LOCKSTEP_CKPT_INTEROP_DIR");
  REQUIRE(env != nullptr);
  mpi();
  // param/w [6, 4]: value 0.25 i - 3, saved as two TP boxes split on dim 1 ([6, 2] each).
  // param/b [5]: value -1.5 i, saved as two ZeRO flat segments [0, 3) and [3, 5).
  // adam_m/w [6, 4]: value 0.125 i, whole.
  std::vector<float> w(24), b(5), m(24);
  for (int i = 0; i < 24; ++i) w[i] = 0.25f * static_cast<float>(i) - 3.0f;
  for (int i = 0; i < 5; ++i) b[i] = -1.5f * static_cast<float>(i);
  for (int i = 0; i < 24; ++i) m[i] = 0.125f * static_cast<float>(i);
  std::vector<float> wbox[2];
  std::vector<StatePiece> src;
  for (int h = 0; h < 2; ++h) {
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 2; ++c) wbox[h].push_back(w[static_cast<std::size_t>(r * 4 + 2 * h + c)]);
    StatePiece p;
    p.name = "param/w";
    p.global_shape = {6, 4};
    p.box_offset = {0, 2 * h};
    p.box_shape = {6, 2};
    p.flat_end = 12;
    p.data = wbox[h].data();
    src.push_back(p);
  }
  for (int h = 0; h < 2; ++h) {
    StatePiece p;
    p.name = "param/b";
    p.global_shape = p.box_shape = {5};
    p.box_offset = {0};
    p.flat_begin = h == 0 ? 0 : 3;
    p.flat_end = h == 0 ? 3 : 5;
    p.data = b.data() + p.flat_begin;
    src.push_back(p);
  }
  StatePiece pm;
  pm.name = "adam_m/w";
  pm.global_shape = pm.box_shape = {6, 4};
  pm.box_offset = {0, 0};
  pm.flat_end = 24;
  pm.data = m.data();
  src.push_back(pm);
  const std::map<std::string, std::uint64_t> fps = {{"param/w", fingerprint_range("param/w", w)},
                                                    {"param/b", fingerprint_range("param/b", b)},
                                                    {"adam_m/w", fingerprint_range("adam_m/w", m)}};
  fs::remove_all(env);
  const std::string dir = ckpt::save(mpi().world(), {env, 3, 0, -1}, src, fps,
                                     {{"note", "interop fixture"}, {"step", 3}});
  std::printf("%s\n", dir.c_str());
}
