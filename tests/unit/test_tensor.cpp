// Tensors: alignment, views, slices, shard descriptors and the errors they raise.
#include <catch2/catch.hpp>

#include <cstdint>

#include "runtime/aligned_vector.hpp"
#include "runtime/error.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/isa.hpp"
#include "runtime/tensor.hpp"

using namespace lockstep;

TEST_CASE("owning tensors are 64-byte aligned, zero-filled and typed") {
  for (DType dt : {DType::f32, DType::i32, DType::u16}) {
    Tensor t = Tensor::zeros(dt, {3, 5}, "w");
    REQUIRE(reinterpret_cast<std::uintptr_t>(t.raw()) % 64 == 0);
    REQUIRE(t.numel() == 15);
    REQUIRE(t.nbytes() == 15 * dtype_size(dt));
    REQUIRE(t.is_contiguous());
    REQUIRE(t.owns_storage());
    const auto* bytes = static_cast<const unsigned char*>(t.raw());
    for (std::size_t i = 0; i < t.nbytes(); ++i) REQUIRE(bytes[i] == 0);
    REQUIRE(parse_dtype(dtype_name(dt)) == dt);
  }
  Tensor t = Tensor::zeros(DType::f32, {2}, "w");
  REQUIRE_THROWS_WITH(t.data<std::int32_t>(), Catch::Contains("'w'") && Catch::Contains("I32"));
  REQUIRE_THROWS_AS(parse_dtype("BF16"), Error);
}

TEST_CASE("host memory: small blocks from malloc, large ones mapped on 2 MiB boundaries") {
  // Sizes around the 2 MiB switch, an odd byte count and a block spanning several huge pages.
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{100}, kHostHugeBlock - 4,
                            kHostHugeBlock, kHostHugeBlock + 4097, 5 * kHostHugeBlock + 12}) {
    INFO("bytes " << bytes);
    auto* p = static_cast<unsigned char*>(host_alloc(bytes, true));
    const auto addr = reinterpret_cast<std::uintptr_t>(p);
    REQUIRE(addr % 64 == 0);
    if (kHostMapsLargeBlocks && bytes >= kHostHugeBlock) REQUIRE(addr % kHostHugeBlock == 0);
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
    REQUIRE(nonzero == 0);
    for (std::size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i * 7 + 1);
    for (std::size_t i = 0; i < bytes; i += 4093)
      REQUIRE(p[i] == static_cast<unsigned char>(i * 7 + 1));
    host_free(p, bytes);
  }
  host_free(nullptr, kHostHugeBlock);  // a no-op, as free(nullptr)
  // A size that an overflowed element count gives is refused, not wrapped.
  REQUIRE_THROWS_AS(host_alloc(SIZE_MAX, false), Error);
  REQUIRE_THROWS_AS(host_alloc(SIZE_MAX - kHostHugeBlock, true), Error);
  // A vector that grows across the switch keeps its values (allocate, copy, deallocate).
  AlignedVector<float> v;
  for (int i = 0; i < (3 << 20) / 4; ++i) v.push_back(static_cast<float>(i));
  REQUIRE(reinterpret_cast<std::uintptr_t>(v.data()) % 64 == 0);
  for (int i = 0; i < (3 << 20) / 4; i += 997)
    REQUIRE(v[static_cast<std::size_t>(i)] == static_cast<float>(i));
  // A tensor over the switch is zero-filled like a small one.
  Tensor t = Tensor::zeros(DType::f32, {1024, 1024}, "big");
  REQUIRE(t.owns_storage());
  const float* f = t.data<float>();
  std::int64_t nonzero = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) nonzero += f[i] != 0.0f;
  REQUIRE(nonzero == 0);
}

TEST_CASE("views, slices, reshape and clone share or copy exactly the right bits") {
  Tensor t = Tensor::zeros(DType::f32, {4, 6}, "x");
  float* p = t.data<float>();
  for (int i = 0; i < 24; ++i) p[i] = static_cast<float>(i);
  Tensor s = t.slice(1, 2, 3);  // columns 2..4: strided
  REQUIRE(s.shape() == Shape{4, 3});
  REQUIRE_FALSE(s.is_contiguous());
  REQUIRE(s.data<float>()[s.offset_of({1, 0})] == 8.0f);
  Tensor c = s.clone();
  REQUIRE(c.is_contiguous());
  REQUIRE(c.data<float>()[3] == 8.0f);
  REQUIRE(c.bitwise_equal(s));
  Tensor r = t.reshape({6, 4});
  REQUIRE(r.data<float>() == p);
  REQUIRE_THROWS_AS(t.reshape({5, 5}), Error);
  REQUIRE_THROWS_AS(s.reshape({12}), Error);
  REQUIRE_THROWS_AS(t.slice(0, 3, 2), Error);
  REQUIRE_THROWS_AS(t.offset_of({4, 0}), Error);

  float raw[6] = {1, 2, 3, 4, 5, 6};
  Tensor v = Tensor::view(raw, DType::f32, {2, 3}, {}, "raw");
  REQUIRE_FALSE(v.owns_storage());
  v.data<float>()[0] = 9;
  REQUIRE(raw[0] == 9);
  Tensor v2 = v.clone();
  v2.data<float>()[1] = -0.0f;
  REQUIRE_FALSE(v2.bitwise_equal(v));
}

TEST_CASE("bitwise_equal distinguishes +0.0 from -0.0") {
  float a[1] = {0.0f}, b[1] = {-0.0f};
  REQUIRE_FALSE(Tensor::view(a, DType::f32, {1}).bitwise_equal(Tensor::view(b, DType::f32, {1})));
}

TEST_CASE("shard descriptors place a local tensor in its logical tensor") {
  ShardDesc d = ShardDesc::split({1024, 256}, 0, 4, 3);
  REQUIRE(d.local_shape() == Shape{256, 256});
  REQUIRE(d.global_offset == Shape{768, 0});
  Tensor t = Tensor::zeros(DType::f32, {256, 256}, "fc1.weight");
  t.set_shard(d);
  REQUIRE(t.shard().index == 3);
  REQUIRE_THROWS_AS(Tensor::zeros(DType::f32, {128, 256}, "bad").set_shard(d), Error);
  REQUIRE_THROWS_WITH(ShardDesc::split({1000, 3}, 1, 2, 0), Catch::Contains("into 2 equal"));
  REQUIRE(ShardDesc::whole({3, 4}).is_whole());
}

TEST_CASE("ISA dispatch knows this CPU and validates kernel contexts") {
  REQUIRE(isa_supported(Isa::scalar));
  REQUIRE(supported_isas().front() == Isa::scalar);
  REQUIRE(isa_supported(best_isa()));
  REQUIRE(parse_isa("auto") == best_isa());
  REQUIRE_THROWS_WITH(parse_isa("neon"), Catch::Contains("neon"));
  REQUIRE_THROWS_AS(validate(KernelCtx{Isa::scalar, 0, 64}), Error);
  REQUIRE_THROWS_AS(validate(KernelCtx{Isa::scalar, 1, 0}), Error);
  validate(KernelCtx::best());
}
