// An NCCL communicator over the ranks of a lockstep::Communicator, bootstrapped through MPI
// (rank 0 makes the ncclUniqueId, MPI_Bcast sends it), with all-reduce chosen by mode:
//   invariant:     tree_allreduce, built from ncclSend/ncclRecv: recursive doubling over a
//                  power-of-two communicator where, at distance d = 1, 2, 4, ..., rank r and
//                  r^d both compute (lower group's value) + (upper group's value) with
//                  cuda::tree_add — the tree of runtime/collectives.hpp's tree_allreduce, so
//                  the GPU result equals lockstep::tree_sum over ranks bit for bit.
//   deterministic: ncclAllReduce with NCCL_ALGO=Ring (NCCL's ring order is fixed by the rank
//                  count, channel count and protocol, so the same layout gives the same bits).
//   fast:          ncclAllReduce with whatever NCCL picks.
// NCCL reads its environment when the first communicator is created, so
// apply_nccl_environment() must run (the constructor calls it) before any NCCL handle exists
// in the process; it refuses an environment that contradicts the mode.
// Determinism contract: as above; every call runs on the rank's one stream.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <source_location>
#include <span>
#include <string_view>

#include "runtime/comm.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/determinism.hpp"

namespace lockstep::cuda {

// Throws lockstep::Error unless rc == ncclSuccess (call text, file:line, ncclGetErrorString,
// ncclGetLastError, a hint).
void check_nccl(ncclResult_t rc, std::string_view call,
                std::source_location loc = std::source_location::current());
#define LOCKSTEP_NCCL_CHECK(call) ::lockstep::cuda::check_nccl((call), #call)

// deterministic: sets NCCL_ALGO=Ring (refuses another value already set); invariant and fast:
// nothing. Call before the first NCCL communicator of the process.
void apply_nccl_environment(Determinism mode);

class NcclComm {
 public:
  // Collective over comm. Each rank must have selected its device (select_device) first.
  NcclComm(const Communicator& comm, Determinism mode, const Stream& stream);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // In place over n device floats, by mode (see above). Every rank passes the same n.
  // Invariant mode needs a power-of-two communicator (a lockstep::Error says so otherwise).
  void allreduce_sum(float* buf, std::int64_t n);
  // The invariant-mode tree explicitly (any mode may call it).
  void tree_allreduce(float* buf, std::int64_t n);

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  ncclComm_t comm_ = nullptr;
  Determinism mode_;
  cudaStream_t stream_;
  int rank_ = 0, size_ = 0;
  std::string name_;
  DeviceBuffer<float> recv_;  // the partner's buffer during tree_allreduce
};

}  // namespace lockstep::cuda
