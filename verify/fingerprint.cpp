#include "verify/fingerprint.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "runtime/isa.hpp"
#include "verify/fingerprint_kernel.hpp"

namespace lockstep {

namespace {

template <class T>
std::uint64_t element_bits(const char* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  if constexpr (std::is_same_v<T, float>) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    return u;
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return static_cast<std::uint32_t>(x);
  } else {
    return static_cast<std::uint16_t>(x);
  }
}

template <class T>
std::uint64_t torch_upcast_bits(const char* p) {
  T x;
  std::memcpy(&x, p, sizeof x);
  if constexpr (std::is_same_v<T, float>) {
    const double d = static_cast<double>(x);
    std::uint64_t u;
    std::memcpy(&u, &d, sizeof u);
    return u;
  } else if constexpr (std::is_same_v<T, std::int32_t>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(x));
  } else {
    return static_cast<std::uint64_t>(x);
  }
}

// The definition, element by element: sum of mix64(key ^ (first + j), bits(data[j])).
template <class T>
std::uint64_t scalar_sum(FpVersion v, std::uint64_t key, const T* data, std::size_t n,
                         std::uint64_t first) {
  std::uint64_t sum = 0;
  for (std::size_t j = 0; j < n; ++j)
    sum += fingerprint_mix(v, key ^ (first + j),
                           element_bits<T>(reinterpret_cast<const char*>(data + j)));
  return sum;
}

template <class T>
std::uint64_t range_sum(FpVersion v, std::uint64_t key, std::span<const T> data,
                        std::uint64_t first) {
  if constexpr (std::is_same_v<T, float>)
    return detail::fingerprint_f32(v, key, data.data(), data.size(), first);
  else
    return scalar_sum(v, key, data.data(), data.size(), first);
}

// Calls f(logical_index, element_ptr) for every local element; logical indices come from
// the shard descriptor (local index + global offset, row-major in the global shape).
template <class F>
void for_each_logical(const Tensor& t, F&& f) {
  const ShardDesc& sd = t.shard();
  const int R = t.rank();
  check(static_cast<int>(sd.global_shape.size()) == R &&
            static_cast<int>(sd.global_offset.size()) == R,
        t.describe() + ": shard descriptor of rank " + std::to_string(sd.global_shape.size()) +
            " for a tensor of rank " + std::to_string(R),
        "set_shard() with the logical tensor's shape");
  for (int d = 0; d < R; ++d)
    check(sd.global_offset[d] >= 0 && sd.global_offset[d] + t.shape()[d] <= sd.global_shape[d],
          t.describe() + ": dim " + std::to_string(d) + " at global offset " +
              std::to_string(sd.global_offset[d]) + " runs past the logical shape " +
              shape_str(sd.global_shape),
          "the shard descriptor must place the local tensor inside the logical tensor");
  if (t.numel() == 0) return;
  const std::size_t es = dtype_size(t.dtype());
  const char* base = static_cast<const char*>(t.raw());
  if (R == 0) {
    f(std::uint64_t{0}, base);
    return;
  }
  const Shape gstride = contiguous_strides(sd.global_shape);
  const std::int64_t inner = t.shape()[R - 1];
  const std::int64_t inner_stride = t.strides()[R - 1] * static_cast<std::int64_t>(es);
  std::vector<std::int64_t> idx(R - 1, 0);
  while (true) {
    std::int64_t logical = sd.global_offset[R - 1];
    std::int64_t off = 0;
    for (int d = 0; d < R - 1; ++d) {
      logical += (sd.global_offset[d] + idx[d]) * gstride[d];
      off += idx[d] * t.strides()[d];
    }
    const char* p = base + off * static_cast<std::int64_t>(es);
    for (std::int64_t j = 0; j < inner; ++j)
      f(static_cast<std::uint64_t>(logical + j), p + j * inner_stride);
    int d = R - 2;
    for (; d >= 0; --d) {
      if (++idx[d] < t.shape()[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
}

template <class T>
std::uint64_t fingerprint_typed(FpVersion v, std::uint64_t key, const Tensor& t) {
  std::uint64_t sum = 0;
  for_each_logical(t, [&](std::uint64_t i, const char* p) {
    sum += fingerprint_mix(v, key ^ i, element_bits<T>(p));
  });
  return sum;
}

template <class T>
std::uint64_t xor_typed(const Tensor& t) {
  std::uint64_t acc = 0;
  for_each_logical(t, [&](std::uint64_t, const char* p) { acc ^= torch_upcast_bits<T>(p); });
  return acc;
}

}  // namespace

namespace detail {

std::uint64_t fingerprint_f32_scalar(FpVersion v, std::uint64_t key, const float* data,
                                     std::size_t n, std::uint64_t first) {
  return scalar_sum(v, key, data, n, first);
}

std::uint64_t fingerprint_f32(FpVersion v, std::uint64_t key, const float* data, std::size_t n,
                              std::uint64_t first) {
  static const bool avx512 = best_isa() == Isa::avx512;
  return avx512 ? fingerprint_f32_avx512(v, key, data, n, first)
                : fingerprint_f32_scalar(v, key, data, n, first);
}

}  // namespace detail

std::uint64_t fingerprint_key(std::string_view name) {
  return xxh3_64(name.data(), name.size());
}

std::uint64_t fingerprint(std::string_view name, const Tensor& local, FpVersion v) {
  check(local.defined(), "fingerprint of an undefined tensor '" + std::string(name) + "'");
  const std::uint64_t key = fingerprint_key(name);
  switch (local.dtype()) {
    case DType::f32:
      return fingerprint_typed<float>(v, key, local);
    case DType::i32:
      return fingerprint_typed<std::int32_t>(v, key, local);
    case DType::u16:
      return fingerprint_typed<std::uint16_t>(v, key, local);
  }
  fail(local.describe() + ": no fingerprint for this dtype");
}

std::uint64_t fingerprint_range(std::string_view name, std::span<const float> data,
                                std::uint64_t first, FpVersion v) {
  return range_sum(v, fingerprint_key(name), data, first);
}
std::uint64_t fingerprint_range(std::string_view name, std::span<const std::int32_t> data,
                                std::uint64_t first, FpVersion v) {
  return range_sum(v, fingerprint_key(name), data, first);
}
std::uint64_t fingerprint_range(std::string_view name, std::span<const std::uint16_t> data,
                                std::uint64_t first, FpVersion v) {
  return range_sum(v, fingerprint_key(name), data, first);
}

std::uint64_t torch_xor_hash(const Tensor& t) {
  check(t.defined(), "torch_xor_hash of an undefined tensor");
  // The xor needs no logical indices; iterate the local elements with a whole-tensor view
  // of the same memory so any shard descriptor is accepted.
  Tensor whole = Tensor::view(t.raw(), t.dtype(), t.shape(), t.strides(), t.name());
  switch (t.dtype()) {
    case DType::f32:
      return xor_typed<float>(whole);
    case DType::i32:
      return xor_typed<std::int32_t>(whole);
    case DType::u16:
      return xor_typed<std::uint16_t>(whole);
  }
  fail(t.describe() + ": no torch_xor_hash for this dtype");
}

std::uint64_t fingerprint(const StatePiece& piece, FpVersion v) {
  check_piece(piece);
  const std::uint64_t key = fingerprint_key(piece.name);
  auto range = [&](std::int64_t logical, std::int64_t local, std::int64_t len) {
    return range_sum(v, key,
                     std::span<const float>(piece.data + local, static_cast<std::size_t>(len)),
                     static_cast<std::uint64_t>(logical));
  };
  if (piece.size() <= 0) return 0;
  // A box that spans whole rows of every inner dimension (only dim 0 offset: no TP split, or
  // a split on dim 0) is one contiguous run of logical indices: one kernel call.
  const std::size_t rank = piece.box_shape.size();
  bool contiguous = rank > 0;
  std::int64_t inner = 1;
  for (std::size_t d = 1; d < rank; ++d) {
    contiguous = contiguous && piece.box_shape[d] == piece.global_shape[d];
    inner *= piece.global_shape[d];
  }
  if (contiguous) return range(piece.box_offset[0] * inner + piece.flat_begin, 0, piece.size());
  // Otherwise per run, consecutive runs that continue each other merged (same terms).
  std::uint64_t sum = 0;
  std::int64_t run_logical = 0, run_local = 0, run_len = 0;
  for_each_run(piece, [&](std::int64_t logical, std::int64_t local, std::int64_t len) {
    if (run_len > 0 && logical == run_logical + run_len && local == run_local + run_len) {
      run_len += len;
      return;
    }
    if (run_len > 0) sum += range(run_logical, run_local, run_len);
    run_logical = logical;
    run_local = local;
    run_len = len;
  });
  if (run_len > 0) sum += range(run_logical, run_local, run_len);
  return sum;
}

std::uint64_t torch_xor_hash(std::span<const float> data) {
  std::uint64_t acc = 0;
  for (const float& x : data) acc ^= torch_upcast_bits<float>(reinterpret_cast<const char*>(&x));
  return acc;
}

}  // namespace lockstep
