// Tests of the layout-invariant fingerprint (verify/fingerprint.hpp, docs/design.md section 5):
// shards of every split add up to the whole, any change of bits, position or name changes
// it; torch_xor_hash against hand values; both recomputed independently by
// tests/reference/fingerprint_ref.py (Python standard library only).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "runtime/isa.hpp"
#include "runtime/state_piece.hpp"
#include "runtime/tensor.hpp"
#include "tests/support/test_data.hpp"
#include "verify/fingerprint.hpp"
#include "verify/fingerprint_kernel.hpp"

using namespace lockstep;
using lockstep::testing::mixed_floats;

namespace {

Tensor make_f32(const Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::zeros(DType::f32, shape, "t");
  auto v = mixed_floats(static_cast<std::size_t>(t.numel()), seed);
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  return t;
}

// The contributions of every shard of `whole` split along `dim` into n pieces: each shard
// once as a contiguous copy and once as a strided view into `whole`.
std::uint64_t sum_of_shards(const std::string& name, const Tensor& whole, int dim, int n,
                            bool strided, FpVersion v = kFpVersionLatest) {
  std::uint64_t sum = 0;
  const std::int64_t len = whole.shape()[dim] / n;
  for (int k = 0; k < n; ++k) {
    Tensor local = whole.slice(dim, k * len, len);
    if (!strided) local = local.clone();
    local.set_shard(ShardDesc::split(whole.shape(), dim, n, k));
    sum += fingerprint(name, local, v);
  }
  return sum;
}

std::uint64_t splitmix_next(std::uint64_t& s) {
  return lockstep::testing::splitmix64(s);
}

// The data of fingerprint_ref.py: top 32 bits of splitmix64 outputs, no Inf/NaN.
std::vector<float> ref_data(std::size_t n, std::uint64_t seed) {
  std::vector<float> out(n);
  std::uint64_t s = seed;
  for (auto& x : out) {
    std::uint32_t u = static_cast<std::uint32_t>(splitmix_next(s) >> 32);
    if (((u >> 23) & 0xffu) == 0xffu) u &= ~(1u << 23);
    std::memcpy(&x, &u, 4);
  }
  return out;
}

// The source tree (tests/CMakeLists.txt defines it; __FILE__ can be relative, e.g. under
// ccache's base_dir).
std::string source_root() {
  return LOCKSTEP_SOURCE_DIR;
}

}  // namespace

TEST_CASE("mix64 and fingerprint have the documented values") {
  // Values printed by tests/reference/fingerprint_ref.py (independent Python).
  CHECK(fingerprint_mix_v1(0x0123456789abcdefull, 0xfedcba9876543210ull) == 0xf965a36452048402ull);
  CHECK(fingerprint_mix_v2(0x0123456789abcdefull, 0xfedcba98ull) == 0xd744eba15e216c2aull);
  CHECK(fingerprint_mix(FpVersion::v1, 1, 2) == fingerprint_mix_v1(1, 2));
  CHECK(fingerprint_mix(FpVersion::v2, 1, 2) == fingerprint_mix_v2(1, 2));
  auto d5 = ref_data(5, 1);
  // fingerprint_ref.py 0 5 1 (key 0), through the raw definition and through fingerprint():
  std::uint64_t fp1 = 0, fp2 = 0;
  for (std::size_t i = 0; i < d5.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &d5[i], 4);
    fp1 += fingerprint_mix_v1(0 ^ i, u);
    fp2 += fingerprint_mix_v2(0 ^ i, u);
  }
  CHECK(fp1 == 0xd083c39d6ea813efull);
  CHECK(fp2 == 0x0463a72d47dc8a41ull);
  CHECK(detail::fingerprint_f32(FpVersion::v1, 0, d5.data(), 5, 0) == fp1);
  CHECK(detail::fingerprint_f32(FpVersion::v2, 0, d5.data(), 5, 0) == fp2);
  Tensor t = Tensor::view(d5.data(), DType::f32, {5});
  CHECK(torch_xor_hash(t) == 0xc2e11a1d60000000ull);
  // The version numbers are checked where they are read.
  CHECK(fp_version_from_int(1, "x") == FpVersion::v1);
  CHECK(fp_version_from_int(2, "x") == FpVersion::v2);
  CHECK(kFpVersionLatest == FpVersion::v2);
  CHECK_THROWS_AS(fp_version_from_int(3, "x"), lockstep::Error);
  CHECK_THROWS_AS(fp_version_from_int(0, "x"), lockstep::Error);
}

TEST_CASE("fingerprint and torch_xor_hash agree with the independent Python reference") {
  const std::string script = source_root() + "/tests/reference/fingerprint_ref.py";
  REQUIRE(!source_root().empty());
  const std::string name = "param/blocks.0.attn.qkv.weight";
  const std::uint64_t key = fingerprint_key(name);
  for (auto [n, seed] : {std::pair<std::size_t, std::uint64_t>{1000, 42}, {4097, 7}}) {
    const auto data = ref_data(n, seed);
    const std::string cmd = "/usr/bin/python3 " + script + " " + hex64(key) + " " +
                            std::to_string(n) + " " + std::to_string(seed);
    FILE* pipe = popen(cmd.c_str(), "r");
    REQUIRE(pipe != nullptr);
    char buf[256];
    std::string out;
    while (std::fgets(buf, sizeof buf, pipe)) out += buf;
    const int rc = pclose(pipe);
    INFO(cmd << "\n" << out);
    REQUIRE(rc == 0);
    Tensor t =
        Tensor::view(const_cast<float*>(data.data()), DType::f32, {static_cast<std::int64_t>(n)});
    CHECK(out.find("fp1  " + hex64(fingerprint(name, t, FpVersion::v1)) + "\n") !=
          std::string::npos);
    CHECK(out.find("fp2  " + hex64(fingerprint(name, t, FpVersion::v2)) + "\n") !=
          std::string::npos);
    CHECK(out.find("fp2  " + hex64(fingerprint(name, t)) + "\n") != std::string::npos);
    CHECK(out.find("xor  " + hex64(torch_xor_hash(t)) + "\n") != std::string::npos);
    CHECK(out.find("mix1 f965a36452048402\n") != std::string::npos);
    CHECK(out.find("mix2 d744eba15e216c2a\n") != std::string::npos);
  }
}

TEST_CASE("shards of every split add up to the whole tensor's fingerprint") {
  const FpVersion v = GENERATE(FpVersion::v1, FpVersion::v2);
  INFO("version " << static_cast<int>(v));
  const std::string name = "param/w";
  const Tensor w = make_f32({8, 12}, 11);
  const std::uint64_t whole = fingerprint(name, w, v);
  for (int dim : {0, 1})
    for (int n : {1, 2, 4})
      for (bool strided : {false, true}) {
        INFO("dim " << dim << " n " << n << " strided " << strided);
        CHECK(sum_of_shards(name, w, dim, n, strided, v) == whole);
      }
  // 3-D, split on the middle and last dims.
  const Tensor x = make_f32({3, 8, 4}, 12);
  const std::uint64_t whole3 = fingerprint(name, x, v);
  for (int dim : {0, 1, 2})
    for (int n : {1, 2, 4}) {
      if (x.shape()[dim] % n) continue;
      CHECK(sum_of_shards(name, x, dim, n, true, v) == whole3);
      CHECK(sum_of_shards(name, x, dim, n, false, v) == whole3);
    }
  // A 2x2 grid of blocks (rows split 2 ways, then columns 2 ways), each block fingerprinted
  // row by row through fingerprint_range at its logical offsets.
  std::uint64_t sum = 0;
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const Tensor block = w.slice(0, a * 4, 4).slice(1, b * 6, 6);  // strided view
      for (int r = 0; r < 4; ++r) {
        const Tensor row = block.slice(0, r, 1).clone();
        sum += fingerprint_range(name, std::span<const float>(row.data<float>(), 6),
                                 static_cast<std::uint64_t>((a * 4 + r) * 12 + b * 6), v);
      }
    }
  CHECK(sum == whole);
  // fingerprint_range over contiguous pieces of the flattened tensor.
  const float* p = w.data<float>();
  CHECK(fingerprint_range(name, std::span<const float>(p, 50), 0, v) +
            fingerprint_range(name, std::span<const float>(p + 50, 46), 50, v) ==
        whole);
}

TEST_CASE("fingerprint sees every change of bits, position and name") {
  const FpVersion v = GENERATE(FpVersion::v1, FpVersion::v2);
  INFO("version " << static_cast<int>(v));
  const Tensor w = make_f32({6, 10}, 13);
  const std::uint64_t base = fingerprint("param/w", w, v);
  CHECK(fingerprint("param/w2", w, v) != base);
  CHECK(fingerprint("grad/w", w, v) != base);
  SECTION("swap two different elements") {
    Tensor c = w.clone();
    float* d = c.data<float>();
    d[3] = 1.5f;
    d[17] = -2.25f;
    const std::uint64_t before = fingerprint("param/w", c, v);
    std::swap(d[3], d[17]);
    CHECK(fingerprint("param/w", c, v) != before);
    CHECK(torch_xor_hash(c) == torch_xor_hash(c.clone()));  // order-blind, by design
  }
  SECTION("every single bit flip of one element") {
    Tensor c = w.clone();
    for (int b = 0; b < 32; ++b) {
      std::uint32_t u;
      std::memcpy(&u, c.data<float>() + 7, 4);
      u ^= 1u << b;
      std::memcpy(c.data<float>() + 7, &u, 4);
      CHECK(fingerprint("param/w", c, v) != base);
      u ^= 1u << b;
      std::memcpy(c.data<float>() + 7, &u, 4);
    }
    CHECK(fingerprint("param/w", c, v) == base);
  }
  SECTION("+0.0 vs -0.0") {
    Tensor c = w.clone();
    c.data<float>()[5] = 0.0f;
    const std::uint64_t pos = fingerprint("param/w", c, v);
    c.data<float>()[5] = -0.0f;
    CHECK(fingerprint("param/w", c, v) != pos);
  }
  SECTION("transposed layout of the same values") {
    Tensor t = Tensor::view(w.raw(), DType::f32, {10, 6}, {1, 10}, "wt");
    CHECK(fingerprint("param/w", t.clone(), v) != base);
  }
}

TEST_CASE("integer dtypes: shards sum, bits zero-extended") {
  Tensor i = Tensor::zeros(DType::i32, {4, 6}, "tokens");
  Tensor u = Tensor::zeros(DType::u16, {4, 6}, "tokens16");
  for (int k = 0; k < 24; ++k) {
    i.data<std::int32_t>()[k] = (k % 3 == 0) ? -k - 1 : k * 1000;
    u.data<std::uint16_t>()[k] = static_cast<std::uint16_t>(65535 - k * 7);
  }
  for (const Tensor* t : {&i, &u}) {
    const std::uint64_t whole = fingerprint("data/x", *t);
    CHECK(sum_of_shards("data/x", *t, 1, 2, true) == whole);
    CHECK(sum_of_shards("data/x", *t, 0, 4, false) == whole);
  }
  std::uint64_t ref = 0;
  for (int k = 0; k < 24; ++k)
    ref += fingerprint_mix_v2(fingerprint_key("data/x") ^ static_cast<std::uint64_t>(k),
                              static_cast<std::uint32_t>(i.data<std::int32_t>()[k]));
  CHECK(fingerprint("data/x", i) == ref);
  CHECK(fingerprint_range("data/x", std::span<const std::int32_t>(i.data<std::int32_t>(), 24)) ==
        ref);
}

TEST_CASE("torch_xor_hash: hand-computed values") {
  float f[] = {1.0f, -2.0f};
  CHECK(torch_xor_hash(Tensor::view(f, DType::f32, {2})) == 0xfff0000000000000ull);
  float g[] = {0.5f, 0.5f, -0.0f};  // equal pairs cancel; -0.0 is the sign bit
  CHECK(torch_xor_hash(Tensor::view(g, DType::f32, {3})) == 0x8000000000000000ull);
  float h[] = {0.1f};  // float64 of 0.1f: 0x3fb99999a0000000
  CHECK(torch_xor_hash(Tensor::view(h, DType::f32, {1})) == 0x3fb99999a0000000ull);
  std::int32_t i[] = {-1, 5};
  CHECK(torch_xor_hash(Tensor::view(i, DType::i32, {2})) == (0xffffffffffffffffull ^ 5ull));
  std::uint16_t u[] = {65535, 1};
  CHECK(torch_xor_hash(Tensor::view(u, DType::u16, {2})) == 0xfffeull);
  CHECK(torch_xor_hash(Tensor::zeros(DType::f32, {0})) == 0);
  // Strided view: same elements, same hash.
  Tensor w = make_f32({4, 6}, 3);
  CHECK(torch_xor_hash(w.slice(1, 2, 3)) == torch_xor_hash(w.slice(1, 2, 3).clone()));
}

TEST_CASE("a shard descriptor outside the logical shape is an error") {
  Tensor t = Tensor::zeros(DType::f32, {2, 4}, "x");
  ShardDesc d = ShardDesc::split({2, 8}, 1, 2, 1);
  t.set_shard(d);
  CHECK_NOTHROW(fingerprint("x", t));
  d.global_offset = {0, 6};  // runs past column 8
  Tensor u = Tensor::zeros(DType::f32, {2, 4}, "x");
  u.set_shard(d);
  CHECK_THROWS_AS(fingerprint("x", u), lockstep::Error);
}

TEST_CASE("every ISA path of the float32 sum gives the scalar sum") {
  // The AVX-512 kernel runs blocks of 16 vector + 3 (v1) or 1 (v2) scalar elements, then
  // 8-lane steps,
  // then a scalar tail: sizes around every boundary, odd start offsets (unaligned loads),
  // logical indices near 2^32 and 2^64 (wrap-around of the index vector).
  const std::vector<float> v = mixed_floats(70001, 99);
  std::vector<std::size_t> sizes = {0,  1,  7,  8,  9,  15, 16, 17, 18,   19,   20,    26,   27,
                                    28, 37, 38, 39, 45, 46, 57, 64, 1037, 4096, 65536, 69999};
  for (std::size_t n : sizes)
    for (std::size_t off : {std::size_t{0}, std::size_t{1}, std::size_t{2}})
      for (std::uint64_t first : {0ull, 3ull, 1ull << 40, (1ull << 32) - 5, ~0ull - 20})
        for (FpVersion ver : {FpVersion::v1, FpVersion::v2}) {
          const float* d = v.data() + off;
          INFO("n " << n << " offset " << off << " first " << first << " version "
                    << static_cast<int>(ver));
          const std::uint64_t ref = detail::fingerprint_f32_scalar(ver, 0x1234, d, n, first);
          CHECK(detail::fingerprint_f32(ver, 0x1234, d, n, first) == ref);
          if (isa_supported(Isa::avx512))
            CHECK(detail::fingerprint_f32_avx512(ver, 0x1234, d, n, first) == ref);
        }
}

TEST_CASE("a state piece's fingerprint is its logical elements' share") {
  // A [6, 10] tensor; TP split on dim 1 into 2 boxes of [6, 5]; each box cut into 3 flat
  // segments (ZeRO at DP 3, last one short). All pieces together == the whole tensor.
  const std::vector<float> whole = mixed_floats(60, 5);
  Tensor t = Tensor::zeros(DType::f32, {6, 10});
  std::copy(whole.begin(), whole.end(), t.data<float>());
  const std::uint64_t ref = fingerprint("adam_m/w", t);
  std::uint64_t sum = 0;
  for (int box = 0; box < 2; ++box) {
    std::vector<float> local(30);
    for (int r = 0; r < 6; ++r)
      for (int c = 0; c < 5; ++c) local[r * 5 + c] = whole[r * 10 + box * 5 + c];
    for (int seg = 0; seg < 3; ++seg) {
      StatePiece p;
      p.name = "adam_m/w";
      p.global_shape = {6, 10};
      p.box_offset = {0, box * 5};
      p.box_shape = {6, 5};
      p.flat_begin = seg * 11;
      p.flat_end = std::min<std::int64_t>(30, (seg + 1) * 11);
      p.data = local.data() + p.flat_begin;
      sum += fingerprint(p);
    }
  }
  CHECK(sum == ref);
}

TEST_CASE("state pieces: the contiguous fast path and merged runs give the per-element sum") {
  // [4, 6, 5] split 2 ways on each dim in turn (dim 0: whole rows, one contiguous range per
  // piece; dims 1 and 2: runs of rows), each box cut into 3 flat segments; a 1-D tensor too.
  const std::vector<float> whole = mixed_floats(120, 8);
  Tensor t = Tensor::zeros(DType::f32, {4, 6, 5});
  std::copy(whole.begin(), whole.end(), t.data<float>());
  const std::uint64_t ref = fingerprint("adam_v/x", t);
  for (int dim = 0; dim < 3; ++dim) {
    const Shape g = {4, 6, 5};
    std::uint64_t sum = 0;
    for (int half = 0; half < 2; ++half) {
      Shape box = g, off = {0, 0, 0};
      box[dim] = dim == 2 ? (half == 0 ? 3 : 2) : g[dim] / 2;
      off[dim] = half == 0 ? 0 : (dim == 2 ? 3 : g[dim] / 2);
      std::vector<float> local;
      for (std::int64_t a = 0; a < box[0]; ++a)
        for (std::int64_t b = 0; b < box[1]; ++b)
          for (std::int64_t c = 0; c < box[2]; ++c)
            local.push_back(whole[((a + off[0]) * 6 + b + off[1]) * 5 + c + off[2]]);
      const std::int64_t n = static_cast<std::int64_t>(local.size());
      for (int seg = 0; seg < 3; ++seg) {
        StatePiece p;
        p.name = "adam_v/x";
        p.global_shape = g;
        p.box_offset = off;
        p.box_shape = box;
        p.flat_begin = seg * (n / 3 + 1);
        p.flat_end = std::min<std::int64_t>(n, (seg + 1) * (n / 3 + 1));
        p.data = local.data() + p.flat_begin;
        sum += fingerprint(p);
      }
    }
    INFO("split on dim " << dim);
    CHECK(sum == ref);
  }
  Tensor v = Tensor::view(const_cast<float*>(whole.data()), DType::f32, {120});
  StatePiece p;
  p.name = "adam_v/x";
  p.global_shape = {120};
  p.box_offset = {40};
  p.box_shape = {80};
  p.flat_begin = 7;
  p.flat_end = 61;
  p.data = const_cast<float*>(whole.data()) + 47;
  CHECK(fingerprint(p) ==
        fingerprint_range("adam_v/x", std::span<const float>(whole.data() + 47, 54), 47));
  CHECK(fingerprint("adam_v/x", v) != 0);
}
