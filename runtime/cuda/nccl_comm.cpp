// NCCL bootstrap through MPI and the mode-dependent all-reduce of runtime/cuda/nccl_comm.hpp.
#include "runtime/cuda/nccl_comm.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/cuda/kernels.hpp"
#include "runtime/error.hpp"

namespace lockstep::cuda {

void check_nccl(ncclResult_t rc, std::string_view call, std::source_location loc) {
  if (rc == ncclSuccess) return;
  std::string hint = "NCCL_DEBUG=INFO shows what NCCL tried";
  if (rc == ncclUnhandledCudaError)
    hint = "a CUDA call inside NCCL failed: is every rank's device selected and healthy?";
  else if (rc == ncclSystemError || rc == ncclRemoteError)
    hint = "a network or peer problem: check that every rank is alive (NCCL_DEBUG=INFO)";
  else if (rc == ncclInvalidArgument || rc == ncclInvalidUsage)
    hint = "a Lockstep bug: every rank must call the same collectives with the same sizes";
  fail("NCCL call " + std::string(call) + " failed: " + ncclGetErrorString(rc) + " (" +
           ncclGetLastError(nullptr) + ")",
       hint, loc);
}

void apply_nccl_environment(Determinism mode) {
  if (mode != Determinism::deterministic) return;
  const char* algo = std::getenv("NCCL_ALGO");
  check(algo == nullptr || std::strcmp(algo, "Ring") == 0 || std::strcmp(algo, "ring") == 0,
        std::string("deterministic mode needs NCCL_ALGO=Ring but the environment has NCCL_ALGO=") +
            (algo ? algo : ""),
        "unset NCCL_ALGO; the launcher sets it");
  check(::setenv("NCCL_ALGO", "Ring", 1) == 0, "setenv(NCCL_ALGO) failed");
}

NcclComm::NcclComm(const Communicator& comm, Determinism mode, const Stream& stream)
    : mode_(mode),
      stream_(stream.get()),
      rank_(comm.rank()),
      size_(comm.size()),
      name_(comm.describe()) {
  apply_nccl_environment(mode);
  ncclUniqueId id{};
  if (comm.rank() == 0) LOCKSTEP_NCCL_CHECK(ncclGetUniqueId(&id));
  check_mpi(MPI_Bcast(&id, int(sizeof id), MPI_BYTE, 0, comm.handle()), "MPI_Bcast(ncclUniqueId)",
            comm.handle());
  LOCKSTEP_NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
}

NcclComm::~NcclComm() {
  if (comm_) ncclCommDestroy(comm_);
}

void NcclComm::allreduce_sum(float* buf, std::int64_t n) {
  if (mode_ == Determinism::invariant) return tree_allreduce(buf, n);
  check(n >= 0, "NcclComm::allreduce_sum: negative length on " + name_);
  if (n == 0) return;
  LOCKSTEP_NCCL_CHECK(
      ncclAllReduce(buf, buf, std::size_t(n), ncclFloat32, ncclSum, comm_, stream_));
}

void NcclComm::tree_allreduce(float* buf, std::int64_t n) {
  check(size_ > 0 && (size_ & (size_ - 1)) == 0,
        "NcclComm::tree_allreduce on " + name_ +
            ": the canonical tree over ranks needs a power-of-two group",
        "use 1, 2, 4, 8 ... ranks in this group for invariant mode");
  check(n >= 0, "NcclComm::tree_allreduce: negative length on " + name_);
  if (n == 0 || size_ == 1) return;
  if (recv_.size() < std::size_t(n)) recv_ = DeviceBuffer<float>(std::size_t(n), "tree recv");
  for (int d = 1; d < size_; d <<= 1) {
    const int partner = rank_ ^ d;
    LOCKSTEP_NCCL_CHECK(ncclGroupStart());
    LOCKSTEP_NCCL_CHECK(ncclSend(buf, std::size_t(n), ncclFloat32, partner, comm_, stream_));
    LOCKSTEP_NCCL_CHECK(
        ncclRecv(recv_.data(), std::size_t(n), ncclFloat32, partner, comm_, stream_));
    LOCKSTEP_NCCL_CHECK(ncclGroupEnd());
    // (lower group's value) + (upper group's value), the same expression on both partners.
    const bool lower = (rank_ & d) == 0;
    tree_add(stream_, lower ? buf : recv_.data(), lower ? recv_.data() : buf, buf, n);
  }
}

}  // namespace lockstep::cuda
