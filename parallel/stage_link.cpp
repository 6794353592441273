#include "parallel/stage_link.hpp"

#include <chrono>
#include <limits>
#include <string>

#include "runtime/error.hpp"
#include "runtime/watchdog.hpp"

namespace lockstep {
namespace {

// Forward activations travel with even tags, their gradients with odd ones.
int tag_of(bool forward, std::int64_t microbatch) {
  check(microbatch >= 0 && microbatch < (std::numeric_limits<int>::max() >> 2),
        "pipeline: microbatch index " + std::to_string(microbatch) + " out of the MPI tag range",
        "use fewer microbatches per step");
  return static_cast<int>(2 * microbatch + (forward ? 0 : 1));
}

int count_of(std::int64_t n) {
  check(n >= 0 && n <= std::numeric_limits<int>::max(),
        "pipeline: a stage transfer of " + std::to_string(n) + " floats exceeds MPI's int count",
        "use a smaller microbatch (parallel.microbatch)");
  return static_cast<int>(n);
}

}  // namespace

StageLink::StageLink(const Grid& grid) : comm_(grid.pp_comm()) {
  const int s = grid.pp_rank(), p = grid.pp_size();
  if (s > 0) prev_ = s - 1;
  if (s + 1 < p) next_ = s + 1;
}

StageLink::~StageLink() {
  for (auto& r : recvs_) MPI_Cancel(&r.req);
  for (auto& r : recvs_) MPI_Request_free(&r.req);
  if (!sends_.empty())
    MPI_Waitall(static_cast<int>(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE);
}

void StageLink::post_recv(bool forward, std::int64_t microbatch, float* dst, std::int64_t n) {
  const int src = forward ? prev_ : next_;
  check(src >= 0,
        std::string("pipeline: stage ") + std::to_string(comm_.rank()) + " has no " +
            (forward ? "previous" : "next") + " stage to receive from",
        "a bug in the schedule (parallel/pipeline_schedule.hpp)");
  Pending p{microbatch, forward, MPI_REQUEST_NULL};
  check_mpi(MPI_Irecv(dst, count_of(n), MPI_FLOAT, src, tag_of(forward, microbatch), comm_.handle(),
                      &p.req),
            "MPI_Irecv", comm_.handle());
  recvs_.push_back(p);
}

void StageLink::wait_recv(bool forward, std::int64_t microbatch) {
  for (std::size_t i = 0; i < recvs_.size(); ++i) {
    if (recvs_[i].forward != forward || recvs_[i].microbatch != microbatch) continue;
    MPI_Request req = recvs_[i].req;
    recvs_.erase(recvs_.begin() + static_cast<std::ptrdiff_t>(i));
    const auto t0 = std::chrono::steady_clock::now();
    watchdog::watched_wait(&req, 1, comm_,
                           forward ? "pipeline recv (activations)" : "pipeline recv (gradients)");
    waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  fail("pipeline: no receive posted for microbatch " + std::to_string(microbatch),
       "a bug in the schedule (parallel/pipeline_schedule.hpp)");
}

void StageLink::send(bool forward, std::int64_t microbatch, const float* src, std::int64_t n) {
  const int dst = forward ? next_ : prev_;
  check(dst >= 0,
        std::string("pipeline: stage ") + std::to_string(comm_.rank()) + " has no " +
            (forward ? "next" : "previous") + " stage to send to",
        "a bug in the schedule (parallel/pipeline_schedule.hpp)");
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(src, count_of(n), MPI_FLOAT, dst, tag_of(forward, microbatch), comm_.handle(),
                      &req),
            "MPI_Isend", comm_.handle());
  sends_.push_back(req);
}

void StageLink::post_recv_forward(std::int64_t microbatch, float* dst, std::int64_t n) {
  post_recv(true, microbatch, dst, n);
}
void StageLink::wait_recv_forward(std::int64_t microbatch) {
  wait_recv(true, microbatch);
}
void StageLink::post_recv_backward(std::int64_t microbatch, float* dst, std::int64_t n) {
  post_recv(false, microbatch, dst, n);
}
void StageLink::wait_recv_backward(std::int64_t microbatch) {
  wait_recv(false, microbatch);
}
void StageLink::send_forward(std::int64_t microbatch, const float* src, std::int64_t n) {
  send(true, microbatch, src, n);
}
void StageLink::send_backward(std::int64_t microbatch, const float* src, std::int64_t n) {
  send(false, microbatch, src, n);
}

void StageLink::wait_sends() {
  if (sends_.empty()) return;
  const auto t0 = std::chrono::steady_clock::now();
  watchdog::watched_wait(sends_.data(), static_cast<int>(sends_.size()), comm_, "pipeline send");
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  sends_.clear();
}

double StageLink::take_wait_seconds() {
  const double w = waited_;
  waited_ = 0;
  return w;
}

}  // namespace lockstep
