// The point-to-point link between neighbouring pipeline stages (docs/design.md section 8):
// the forward sends a microbatch's residual stream [T, d_model] to the next stage, the
// backward sends its gradient to the previous one. Every transfer is an MPI_Isend /
// MPI_Irecv on the grid's pp_comm, tagged by microbatch and direction, so a receive can be
// posted early (before the compute that precedes its use) and no pair of stages can deadlock
// on each other's sends; waits go through the progress watchdog (runtime/watchdog.hpp).
// Determinism contract: transfers are exact copies of float32 buffers; no arithmetic.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "runtime/grid.hpp"

namespace lockstep {

class StageLink {
 public:
  explicit StageLink(const Grid& grid);
  ~StageLink();  // completes what is still posted (a destructor after an error aborts anyway)
  StageLink(const StageLink&) = delete;
  StageLink& operator=(const StageLink&) = delete;

  bool has_prev() const { return prev_ >= 0; }
  bool has_next() const { return next_ >= 0; }

  // Receives from the previous stage (forward activations) or the next (their gradients)
  // into dst[n]; post_* returns at once, wait_* blocks until that microbatch's data is in dst.
  void post_recv_forward(std::int64_t microbatch, float* dst, std::int64_t n);
  void wait_recv_forward(std::int64_t microbatch);
  void post_recv_backward(std::int64_t microbatch, float* dst, std::int64_t n);
  void wait_recv_backward(std::int64_t microbatch);
  // Sends src[n] to the next stage (forward) or the previous one (backward); src must stay
  // unchanged until wait_sends().
  void send_forward(std::int64_t microbatch, const float* src, std::int64_t n);
  void send_backward(std::int64_t microbatch, const float* src, std::int64_t n);
  // Completes every send posted so far.
  void wait_sends();
  // Seconds spent waiting for receives and sends since the last call (the stage's share of
  // the pipeline bubble plus transfer time; steady clock).
  double take_wait_seconds();

 private:
  struct Pending {
    std::int64_t microbatch;
    bool forward;
    MPI_Request req;
  };
  void post_recv(bool forward, std::int64_t microbatch, float* dst, std::int64_t n);
  void wait_recv(bool forward, std::int64_t microbatch);
  void send(bool forward, std::int64_t microbatch, const float* src, std::int64_t n);

  const Communicator& comm_;
  int prev_ = -1, next_ = -1;  // pp_comm ranks of the neighbours (-1: none)
  std::vector<Pending> recvs_;
  std::vector<MPI_Request> sends_;
  double waited_ = 0;
};

}  // namespace lockstep
