// The CUDA device layer: checked CUDA runtime calls, device selection by local rank, one
// compute stream per rank, and an RAII device buffer (plain cudaMalloc).
// Determinism contract: none by itself (nothing here computes). Everything a rank launches
// goes to its one Stream in program order, so kernels never race for a reduction order; the
// stream is created non-blocking so the legacy default stream can never interleave.
// Without a usable GPU (no device, no driver) every entry point that needs one throws a
// lockstep::Error saying so; device_count() and gpu_available() answer without throwing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <string_view>

namespace lockstep::cuda {

// Throws lockstep::Error unless rc == cudaSuccess. The message names the call, where in our
// code it was made (file:line), CUDA's error name and string, and a hint for the common causes
// (no device / no driver, out of memory, a bad launch).
void check_cuda(cudaError_t rc, std::string_view call,
                std::source_location loc = std::source_location::current());

}  // namespace lockstep::cuda

// LOCKSTEP_CUDA_CHECK(cudaMemcpy(...)): the call's text goes into the message.
#define LOCKSTEP_CUDA_CHECK(call) ::lockstep::cuda::check_cuda((call), #call)
// After a kernel launch: catches launch-configuration errors at the launch site.
#define LOCKSTEP_CUDA_CHECK_LAUNCH(kernel_name) \
  ::lockstep::cuda::check_cuda(cudaGetLastError(), "launch of " kernel_name)

namespace lockstep::cuda {

// Number of CUDA devices; 0 when there is none or no driver (never throws).
int device_count();
// True when at least one device is usable.
bool gpu_available();
// Why no GPU is usable (CUDA's own error string), or "" when one is.
std::string no_gpu_reason();

// The rank's index among the ranks of its node: OMPI_COMM_WORLD_LOCAL_RANK, else
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) when MPI is initialized, else 0.
int local_rank();

// Selects device local_rank % device_count() for this process and returns its index. Throws a
// lockstep::Error naming the rank when there is no GPU ("this build has the CUDA backend but
// this machine has no usable GPU: ..."), with a hint to run the CPU path instead.
int select_device(int local_rank);

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, L2 60 MiB)" for the current device.
std::string describe_device();

// One compute stream (non-blocking). One per rank; everything of a rank runs on it.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// Untyped helpers behind DeviceBuffer (device.cpp). copy_bytes checks bytes == have (the
// buffer's size) and names the buffer when not.
void* device_alloc_bytes(std::size_t bytes, const std::string& name);
void device_free_bytes(void* p) noexcept;
void copy_bytes(void* dst, const void* src, std::size_t bytes, std::size_t have, bool to_device,
                const Stream& stream, const std::string& name);

// n elements of T in device memory (cudaMalloc; freed on destruction). Contents undefined
// until written.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n, std::string name = {}) : n_(n), name_(std::move(name)) {
    if (n_ > 0) ptr_ = static_cast<T*>(device_alloc_bytes(n_ * sizeof(T), name_));
  }
  ~DeviceBuffer() { device_free_bytes(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), n_(o.n_), name_(std::move(o.name_)) {
    o.ptr_ = nullptr;
    o.n_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      device_free_bytes(ptr_);
      ptr_ = o.ptr_;
      n_ = o.n_;
      name_ = std::move(o.name_);
      o.ptr_ = nullptr;
      o.n_ = 0;
    }
    return *this;
  }

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  std::size_t size() const { return n_; }
  const std::string& name() const { return name_; }

  // Host -> device (src.size() must equal size()); asynchronous on `stream`.
  void upload(std::span<const T> src, const Stream& stream) {
    copy_bytes(ptr_, src.data(), src.size() * sizeof(T), n_ * sizeof(T), true, stream, name_);
  }
  // Device -> host (dst.size() must equal size()); synchronizes `stream` before returning.
  void download(std::span<T> dst, const Stream& stream) const {
    copy_bytes(dst.data(), ptr_, dst.size() * sizeof(T), n_ * sizeof(T), false, stream, name_);
  }

 private:
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
  std::string name_;
};

}  // namespace lockstep::cuda
