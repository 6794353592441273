// Tests of runtime/hash.hpp: xxh3_64 and Xxh3Stream give XXH3_64bits' value (seed 0) bit for
// bit on every implementation this CPU can run (libxxhash, xxHash inline compiled for
// AVX-512, and the run-time dispatch between them), at every length around XXH3's internal
// boundaries and at unaligned addresses; streaming in odd-sized pieces equals one shot;
// hex64's format is unchanged. The reference is the system libxxhash called directly.
#include <catch2/catch.hpp>

#include <xxhash.h>  // the library itself (no XXH_INLINE_ALL): the reference

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/hash.hpp"
#include "runtime/isa.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;

namespace {

// Pseudo-random bytes (splitmix64), so no length or offset sees a trivial pattern.
std::vector<unsigned char> random_bytes(std::size_t n) {
  std::vector<unsigned char> out(n);
  std::uint64_t s = 0x9e3779b97f4a7c15ull;
  for (auto& b : out) b = static_cast<unsigned char>(lockstep::testing::splitmix64(s));
  return out;
}

// Every implementation this CPU can run, the dispatching one last.
std::vector<const detail::Xxh3Impl*> impls() {
  std::vector<const detail::Xxh3Impl*> out{&detail::xxh3_libxxhash()};
  if (isa_supported(Isa::avx512)) out.push_back(&detail::xxh3_avx512());
  out.push_back(&detail::xxh3_dispatch());
  return out;
}

std::vector<std::size_t> lengths() {
  std::vector<std::size_t> out;
  for (std::size_t n = 0; n <= 300; ++n) out.push_back(n);
  for (std::size_t n : {std::size_t{1024}, std::size_t{4096 + 1}, std::size_t{(1u << 20) + 7}})
    out.push_back(n);
  return out;
}

// Feeds [data, data + n) to update() in pieces whose sizes cycle through `pieces`.
template <class Update>
void feed(const unsigned char* data, std::size_t n, const std::vector<std::size_t>& pieces,
          Update&& update) {
  std::size_t at = 0;
  for (std::size_t k = 0; at < n; ++k) {
    const std::size_t len = std::min(pieces[k % pieces.size()], n - at);
    update(data + at, len);
    at += len;
  }
}

const std::vector<std::size_t> kPieces{1, 7, 63, 64, 65, 4095, std::size_t{1} << 20};

}  // namespace

TEST_CASE("the reference: libxxhash's XXH3_64bits of known inputs") {
  // xxHash's published value for the empty input (seed 0).
  CHECK(XXH3_64bits(nullptr, 0) == 0x2d06800538d394c2ull);
  CHECK(xxh3_64(nullptr, 0) == 0x2d06800538d394c2ull);
}

TEST_CASE("xxh3_64 dispatches to AVX-512 exactly when the CPU has it") {
  const std::string want = best_isa() == Isa::avx512 ? "avx512" : "libxxhash";
  CHECK(detail::xxh3_dispatch().name == want);
  if (!isa_supported(Isa::avx512)) WARN("no AVX-512 on this CPU: only libxxhash was checked");
}

TEST_CASE(
    "every implementation == libxxhash XXH3_64bits, every length 0..300 and large, "
    "offsets 0..3") {
  const auto buf = random_bytes((std::size_t{1} << 20) + 7 + 3);
  for (const detail::Xxh3Impl* impl : impls())
    for (std::size_t n : lengths())
      for (std::size_t off = 0; off < 4; ++off) {
        INFO(impl->name << ": bytes " << n << " offset " << off);
        const std::uint64_t want = XXH3_64bits(buf.data() + off, n);
        REQUIRE(impl->hash(buf.data() + off, n) == want);
        if (impl == &detail::xxh3_dispatch()) REQUIRE(xxh3_64(buf.data() + off, n) == want);
      }
}

TEST_CASE("streaming in odd-sized pieces == one shot, on every implementation") {
  const auto buf = random_bytes(3 * (std::size_t{1} << 20) + 12345);
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{240}, std::size_t{241}, std::size_t{1024},
        std::size_t{4096 + 1}, std::size_t{(1u << 20) + 7}, buf.size() - 3})
    for (std::size_t off : {std::size_t{0}, std::size_t{3}}) {
      INFO("bytes " << n << " offset " << off);
      const unsigned char* data = buf.data() + off;
      const std::uint64_t want = XXH3_64bits(data, n);
      for (const detail::Xxh3Impl* impl : impls()) {
        INFO(impl->name);
        // One piece size at a time, then all of them mixed.
        std::vector<std::vector<std::size_t>> schedules;
        for (std::size_t p : kPieces) schedules.push_back({p});
        schedules.push_back(kPieces);
        for (const auto& sched : schedules) {
          void* st = impl->create();
          feed(data, n, sched, [&](const void* d, std::size_t len) { impl->update(st, d, len); });
          CHECK(impl->digest(st) == want);
          CHECK(impl->digest(st) == want);  // digest() leaves the state as it was
          impl->destroy(st);
        }
      }
      Xxh3Stream s;
      feed(data, n, kPieces, [&](const void* d, std::size_t len) { s.update(d, len); });
      CHECK(s.digest() == want);
      CHECK(s.digest() == xxh3_64(data, n));
    }
}

TEST_CASE("Xxh3Stream: digest mid-stream is the prefix's hash, and the stream goes on") {
  const auto buf = random_bytes(2 * (std::size_t{1} << 20) + 99);
  Xxh3Stream s;
  CHECK(s.digest() == XXH3_64bits(nullptr, 0));
  std::size_t at = 0;
  for (std::size_t k = 0; at < buf.size(); ++k) {
    const std::size_t len = std::min(kPieces[k % kPieces.size()] * 3 + 1, buf.size() - at);
    s.update(buf.data() + at, len);
    at += len;
    INFO("prefix " << at);
    REQUIRE(s.digest() == XXH3_64bits(buf.data(), at));
  }
}

TEST_CASE("hex64: 16 lowercase hex digits, unchanged") {
  CHECK(hex64(0) == "0000000000000000");
  CHECK(hex64(1) == "0000000000000001");
  CHECK(hex64(0x2d06800538d394c2ull) == "2d06800538d394c2");
  CHECK(hex64(0x0123456789ABCDEFull) == "0123456789abcdef");
  CHECK(hex64(~std::uint64_t{0}) == "ffffffffffffffff");
}
