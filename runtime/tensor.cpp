#include "runtime/tensor.hpp"

#include <cstring>

#include "runtime/error.hpp"
#include "runtime/host_memory.hpp"

namespace lockstep {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::i32:
      return 4;
    case DType::u16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::i32:
      return "I32";
    case DType::u16:
      return "U16";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  if (name == "F32") return DType::f32;
  if (name == "I32") return DType::i32;
  if (name == "U16") return DType::u16;
  fail("unsupported dtype '" + name + "'", "Lockstep tensors are F32, I32 or U16");
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::int64_t shape_numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Shape contiguous_strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

Storage::Storage(std::size_t bytes) : data_(host_alloc(bytes, true)), bytes_(bytes) {}

Storage::~Storage() {
  host_free(data_, bytes_);
}

ShardDesc ShardDesc::whole(const Shape& global_shape) {
  ShardDesc d;
  d.global_shape = global_shape;
  d.global_offset = Shape(global_shape.size(), 0);
  return d;
}

ShardDesc ShardDesc::split(const Shape& global_shape, int dim, int num_shards, int index) {
  check(dim >= 0 && dim < static_cast<int>(global_shape.size()),
        "partition dim " + std::to_string(dim) + " out of range for shape " +
            shape_str(global_shape));
  check(num_shards >= 1 && index >= 0 && index < num_shards,
        "shard index " + std::to_string(index) + " of " + std::to_string(num_shards) +
            " is out of range");
  check(global_shape[dim] % num_shards == 0,
        "cannot split dim " + std::to_string(dim) + " of size " +
            std::to_string(global_shape[dim]) + " (shape " + shape_str(global_shape) + ") into " +
            std::to_string(num_shards) + " equal shards",
        "choose a tensor-parallel size that divides this dimension");
  ShardDesc d = whole(global_shape);
  d.partition_dim = dim;
  d.num_shards = num_shards;
  d.index = index;
  d.global_offset[dim] = global_shape[dim] / num_shards * index;
  return d;
}

Shape ShardDesc::local_shape() const {
  Shape s = global_shape;
  if (partition_dim >= 0) s[partition_dim] /= num_shards;
  return s;
}

Tensor Tensor::zeros(DType dtype, const Shape& shape, std::string name) {
  for (auto d : shape)
    check(d >= 0, "negative dimension in shape " + shape_str(shape) + " for tensor '" + name + "'");
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.storage_ =
      std::make_shared<Storage>(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  t.data_ = t.storage_->data();
  t.shard_ = ShardDesc::whole(shape);
  t.name_ = std::move(name);
  return t;
}

Tensor Tensor::view(void* data, DType dtype, const Shape& shape, Shape strides, std::string name) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = strides.empty() ? contiguous_strides(shape) : std::move(strides);
  check(t.strides_.size() == shape.size(), "view of '" + name +
                                               "': " + std::to_string(t.strides_.size()) +
                                               " strides for shape " + shape_str(shape));
  t.data_ = data;
  t.shard_ = ShardDesc::whole(shape);
  t.name_ = std::move(name);
  return t;
}

void Tensor::rebind(void* data) {
  check(storage_ == nullptr, describe() + ": rebind of an owning tensor",
        "only views (Tensor::view) can be pointed at other memory");
  data_ = data;
}

std::int64_t Tensor::dim(int i) const {
  check(i >= 0 && i < rank(), describe() + ": no dimension " + std::to_string(i));
  return shape_[i];
}

void Tensor::set_shard(ShardDesc desc) {
  check(desc.local_shape() == shape_,
        describe() + ": shard descriptor implies local shape " + shape_str(desc.local_shape()),
        "the local tensor must have exactly the shard's shape");
  shard_ = std::move(desc);
}

std::int64_t Tensor::offset_of(const std::vector<std::int64_t>& idx) const {
  check(idx.size() == shape_.size(), describe() + ": index of rank " + std::to_string(idx.size()) +
                                         " for rank " + std::to_string(rank()));
  std::int64_t off = 0;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    check(idx[i] >= 0 && idx[i] < shape_[i], describe() + ": index " + std::to_string(idx[i]) +
                                                 " out of range in dim " + std::to_string(i));
    off += idx[i] * strides_[i];
  }
  return off;
}

Tensor Tensor::slice(int d, std::int64_t start, std::int64_t len) const {
  check(d >= 0 && d < rank() && start >= 0 && len >= 0 && start + len <= shape_[d],
        describe() + ": slice [" + std::to_string(start) + ", " + std::to_string(start + len) +
            ") of dim " + std::to_string(d) + " is out of range");
  Tensor t = *this;
  t.shape_[d] = len;
  t.data_ = static_cast<char*>(data_) +
            start * strides_[d] * static_cast<std::int64_t>(dtype_size(dtype_));
  t.shard_ = ShardDesc::whole(t.shape_);
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  check(is_contiguous(), describe() + ": reshape needs a contiguous tensor", "clone() it first");
  check(shape_numel(shape) == numel(),
        describe() + ": cannot reshape to " + shape_str(shape) + " (different element count)");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  t.shard_ = ShardDesc::whole(shape);
  return t;
}

namespace {
// Visits every element in row-major logical order, calling f(src_byte_ptr).
template <class F>
void for_each_element(const Tensor& t, F&& f) {
  const std::int64_t n = t.numel();
  if (n == 0) return;
  const std::size_t es = dtype_size(t.dtype());
  std::vector<std::int64_t> idx(t.rank(), 0);
  for (std::int64_t e = 0; e < n; ++e) {
    std::int64_t off = 0;
    for (int i = 0; i < t.rank(); ++i) off += idx[i] * t.strides()[i];
    f(static_cast<const char*>(t.raw()) + off * static_cast<std::int64_t>(es));
    for (int i = t.rank() - 1; i >= 0; --i) {
      if (++idx[i] < t.shape()[i]) break;
      idx[i] = 0;
    }
  }
}
}  // namespace

Tensor Tensor::clone() const {
  Tensor out = zeros(dtype_, shape_, name_);
  const std::size_t es = dtype_size(dtype_);
  if (is_contiguous()) {
    if (nbytes()) std::memcpy(out.data_, data_, nbytes());
  } else {
    char* dst = static_cast<char*>(out.data_);
    for_each_element(*this, [&](const char* src) {
      std::memcpy(dst, src, es);
      dst += es;
    });
  }
  out.shard_ = ShardDesc::whole(shape_);
  return out;
}

bool Tensor::bitwise_equal(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_) return false;
  Tensor a = is_contiguous() ? *this : clone();
  Tensor b = other.is_contiguous() ? other : other.clone();
  return nbytes() == 0 || std::memcmp(a.data_, b.data_, nbytes()) == 0;
}

void Tensor::check_dtype(DType want) const {
  check(want == dtype_, describe() + " accessed as " + dtype_name(want),
        "use the element type matching the tensor's dtype");
}

std::string Tensor::describe() const {
  return "tensor '" + name_ + "' " + dtype_name(dtype_) + shape_str(shape_);
}

}  // namespace lockstep
