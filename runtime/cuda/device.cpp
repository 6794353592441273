// Checked CUDA runtime calls, device selection and the RAII stream/buffer of
// runtime/cuda/device.hpp. Host code only (compiled by the host compiler against cudart).
#include "runtime/cuda/device.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/error.hpp"

namespace lockstep::cuda {

namespace {

std::string hint_for(cudaError_t rc) {
  switch (rc) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return "this machine has no usable NVIDIA GPU or driver; run on a GPU machine or use the "
             "CPU path (the default device)";
    case cudaErrorMemoryAllocation:
      return "device memory is exhausted: reduce the microbatch or the model, or use more ranks";
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidValue:
      return "a kernel launch or call got an invalid size; this is a Lockstep bug, please report "
             "the shapes";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
      return "the binary has no code for this GPU: rebuild with its architecture (the build embeds "
             "sm_90a code and compute_80 PTX)";
    default:
      return "check the GPU with nvidia-smi; CUDA_LAUNCH_BLOCKING=1 pins an asynchronous error to "
             "its launch";
  }
}

int world_rank() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  int r = 0;
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

}  // namespace

void check_cuda(cudaError_t rc, std::string_view call, std::source_location loc) {
  if (rc == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call reports its own
  fail("CUDA call " + std::string(call) + " failed on rank " + std::to_string(world_rank()) + ": " +
           cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) + ")",
       hint_for(rc), loc);
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

bool gpu_available() {
  return device_count() > 0;
}

std::string no_gpu_reason() {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (rc != cudaSuccess) return std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
  if (n == 0) return "cudaGetDeviceCount reports 0 devices";
  return {};
}

int local_rank() {
  if (const char* s = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) return std::atoi(s);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return 0;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) !=
      MPI_SUCCESS)
    fail("MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed while finding the local rank",
         "set OMPI_COMM_WORLD_LOCAL_RANK or launch with mpirun");
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

int select_device(int local) {
  const int n = device_count();
  check(n > 0,
        "rank " + std::to_string(world_rank()) +
            ": this build has the CUDA backend but this machine has no usable GPU (" +
            no_gpu_reason() + ")",
        "run with the CPU device (the default), or on a machine with an NVIDIA GPU and driver");
  check(local >= 0, "select_device: negative local rank " + std::to_string(local));
  const int dev = local % n;
  LOCKSTEP_CUDA_CHECK(cudaSetDevice(dev));
  return dev;
}

std::string describe_device() {
  int dev = 0;
  LOCKSTEP_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  LOCKSTEP_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB)", p.name, p.major,
                p.minor, p.multiProcessorCount, double(p.totalGlobalMem) / double(1u << 30),
                p.l2CacheSize >> 20);
  return buf;
}

Stream::Stream() {
  LOCKSTEP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);
}

void Stream::synchronize() const {
  LOCKSTEP_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void* device_alloc_bytes(std::size_t bytes, const std::string& name) {
  void* p = nullptr;
  const cudaError_t rc = cudaMalloc(&p, bytes);
  if (rc != cudaSuccess)
    check_cuda(rc, "cudaMalloc(" + std::to_string(bytes) + " bytes for " +
                       (name.empty() ? std::string("an unnamed buffer") : name) + ")");
  return p;
}

void device_free_bytes(void* p) noexcept {
  if (p) cudaFree(p);
}

void copy_bytes(void* dst, const void* src, std::size_t bytes, std::size_t have, bool to_device,
                const Stream& stream, const std::string& name) {
  check(bytes == have,
        std::string(to_device ? "upload to" : "download from") + " device buffer '" + name +
            "': host span has " + std::to_string(bytes) + " bytes, the buffer " +
            std::to_string(have),
        "pass a host span of exactly the buffer's size");
  if (bytes == 0) return;
  LOCKSTEP_CUDA_CHECK(cudaMemcpyAsync(
      dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream.get()));
  if (!to_device) stream.synchronize();
}

}  // namespace lockstep::cuda
