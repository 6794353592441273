// Tensors: float32, int32 and uint16 arrays with shape and strides (row-major by default),
// 64-byte-aligned owning storage, non-owning views, and a shard descriptor that tells each
// local tensor where it sits in the logical (unsharded) tensor.
// Determinism contract: a tensor holds bits and never computes; the shard descriptor's
// logical coordinates are what Philox init, fingerprints and checkpoints key on, so they
// are independent of the layout that produced the local piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lockstep {

enum class DType : std::uint8_t { f32, i32, u16 };

std::size_t dtype_size(DType t);
// The safetensors spelling: "F32", "I32", "U16".
const char* dtype_name(DType t);
DType parse_dtype(const std::string& name);

template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<std::uint16_t>() {
  return DType::u16;
}

using Shape = std::vector<std::int64_t>;
std::string shape_str(const Shape& s);  // "[4096, 256]"
std::int64_t shape_numel(const Shape& s);
Shape contiguous_strides(const Shape& s);

// 64-byte-aligned, zero-initialized bytes (runtime/host_memory.hpp: 2 MiB and more on huge
// pages). Alignment keeps vector loads aligned and makes a buffer's bits independent of
// where the allocator happened to put it.
class Storage {
 public:
  explicit Storage(std::size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// Where a local tensor sits in its logical tensor. partition_dim == -1 means the local
// tensor is the whole logical tensor (replicated); otherwise the logical tensor is split
// into num_shards equal contiguous pieces along partition_dim and this is piece `index`.
struct ShardDesc {
  Shape global_shape;
  Shape global_offset;  // logical index of local element [0, 0, ...]
  int partition_dim = -1;
  int num_shards = 1;
  int index = 0;

  static ShardDesc whole(const Shape& global_shape);
  // Throws if global_shape[dim] is not divisible by num_shards (names both numbers).
  static ShardDesc split(const Shape& global_shape, int dim, int num_shards, int index);
  Shape local_shape() const;
  bool is_whole() const { return partition_dim < 0; }
  bool operator==(const ShardDesc&) const = default;
};

class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled, contiguous.
  static Tensor zeros(DType dtype, const Shape& shape, std::string name = {});
  // Non-owning view over memory someone else keeps alive.
  static Tensor view(void* data, DType dtype, const Shape& shape, Shape strides = {},
                     std::string name = {});

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int i) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const { return strides_ == contiguous_strides(shape_); }
  bool owns_storage() const { return storage_ != nullptr; }
  bool defined() const { return data_ != nullptr || numel() == 0; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  const ShardDesc& shard() const { return shard_; }
  // Throws unless desc.local_shape() equals this tensor's shape.
  void set_shard(ShardDesc desc);

  void* raw() const { return data_; }
  // Points a non-owning view at other memory holding the same shape (the training loop moves
  // the model's gradient views between buffers); throws on an owning tensor.
  void rebind(void* data);
  // Typed access; throws if T does not match dtype() (names the tensor).
  template <class T>
  T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(data_);
  }
  // Element offset (in elements) of a multi-index; bounds-checked.
  std::int64_t offset_of(const std::vector<std::int64_t>& idx) const;

  // A view of [start, start+len) along `dim`, sharing storage (keeps it alive).
  Tensor slice(int dim, std::int64_t start, std::int64_t len) const;
  // A view with another shape over the same contiguous elements.
  Tensor reshape(const Shape& shape) const;
  // A contiguous owning copy.
  Tensor clone() const;
  // Bitwise equality of dtype, shape and element bits (not of strides or names).
  bool bitwise_equal(const Tensor& other) const;

  std::string describe() const;  // "tensor 'name' f32[4, 8]"

 private:
  void check_dtype(DType want) const;
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Shape shape_;
  Shape strides_;  // in elements
  ShardDesc shard_;
  std::string name_;
};

}  // namespace lockstep
