// MPI for Lockstep: the process-lifetime context (MPI_Init_thread / MPI_Finalize as RAII),
// a Communicator wrapper, checked MPI calls, and run_ranks(), the per-rank entry point that
// turns an exception on any rank into one line on stderr plus MPI_Abort, so no rank is
// ever left waiting in a collective. Communicator::barrier waits through the progress
// watchdog (runtime/watchdog.hpp).
// Determinism contract: none by itself (nothing here computes). Every communicator reports
// whether its size is a power of two; only then can the tree collectives of
// runtime/collectives.hpp combine aligned subtrees so that the bits do not depend on the
// layout (docs/design.md section 2). Every MPI call goes through check_mpi(): communicators use
// MPI_ERRORS_RETURN and a failed call becomes a lockstep::Error naming the call, the
// communicator and the rank.
#pragma once

#include <mpi.h>

#include <functional>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

// Throws a lockstep::Error unless rc == MPI_SUCCESS. The message names `call`, the
// communicator (its MPI name, e.g. "world", "tp", "dp"), this process's rank in it and in
// MPI_COMM_WORLD, and MPI's own error string.
void check_mpi(int rc, std::string_view call, MPI_Comm comm,
               std::source_location loc = std::source_location::current());

class Communicator {
 public:
  // A non-owning wrapper of MPI_COMM_WORLD (named "world").
  static Communicator world();
  // Wraps `comm`; if `owned`, MPI_Comm_free runs on destruction. Sets MPI_ERRORS_RETURN
  // and, if `name` is not empty, the communicator's MPI name.
  Communicator(MPI_Comm comm, std::string name, bool owned);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;

  // MPI_Comm_split (collective over this communicator). Ranks with equal `color` form one
  // new communicator, ordered by `key` (ties by rank here). Every rank gets a communicator.
  Communicator split(int color, int key, const std::string& name) const;

  MPI_Comm handle() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& name() const { return name_; }
  // "dp (rank 1 of 2)"
  std::string describe() const;

  // Layout invariance of the tree collectives needs a power-of-two group (docs/design.md
  // section 2). Non-power-of-two groups still reduce deterministically (G1/G2).
  bool power_of_two() const { return size_ > 0 && (size_ & (size_ - 1)) == 0; }
  bool layout_invariant() const { return power_of_two(); }
  // Empty when layout_invariant(); otherwise one sentence saying why not.
  std::string invariance_reason() const;

  void barrier() const;

  // Scratch memory for this communicator's collectives (at least n floats, reused across
  // calls so large collectives do not pay for fresh pages every time). Contents are
  // undefined; the pointer stays valid until the next scratch() call. Like the
  // communicator itself, not for concurrent use from several threads.
  float* scratch(std::size_t n) const;
  // Frees the scratch memory.
  void release_scratch() const { std::vector<float>().swap(scratch_); }
  // The floats the scratch memory holds now (the largest n asked for since its release).
  std::size_t scratch_floats() const { return scratch_.size(); }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::string name_;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 0;
  mutable std::vector<float> scratch_;
};

// The MPI process context: MPI_Init_thread on construction (MPI_THREAD_FUNNELED by
// default: OpenMP threads compute, only the main thread calls MPI), MPI_Finalize on
// destruction. One per process; constructing a second one throws. It also sets the host heap's
// policy (runtime/host_memory.hpp, host_heap_policy).
class Context {
 public:
  Context(int* argc, char*** argv, int required_thread_level = MPI_THREAD_FUNNELED);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Communicator& world() const { return world_; }
  int rank() const { return world_.rank(); }
  int size() const { return world_.size(); }
  int thread_level() const { return thread_level_; }
  // A short label for error lines, "rank0" until set (the grid sets e.g. "tp1-dp0").
  const std::string& tag() const { return tag_; }
  void set_tag(std::string tag) { tag_ = std::move(tag); }

 private:
  int thread_level_ = 0;
  Communicator world_;
  std::string tag_;
};

// True when the process was started by a launcher (mpirun/mpiexec/srun: their rank
// variables are set). A program started by hand runs as an MPI singleton of size 1.
bool launched_by_mpirun();

// Prints `lockstep: error on rank <r> (<tag>): <message>` as one line on stderr, then
// MPI_Abort(MPI_COMM_WORLD, exit_code) (mpirun exits with it; launch/train/exit_status.hpp
// says what each code means). For a lockstep::Error the message ends with where it was
// detected. Never returns.
[[noreturn]] void abort_job(int rank, const std::string& tag, const std::string& message,
                            int exit_code = 1);

// Prints `lockstep: error: <message>` as one line on stderr, for failures before or
// outside MPI (bad command line, MPI failed to start). Returns the exit code to use (2).
int report_startup_error(const std::string& message);

// The per-rank entry point: creates the Context, runs body(ctx), finalizes and returns
// body's exit code. If body throws on any rank, that rank prints one error line
// (abort_job) and aborts the whole job, so no other rank hangs. If MPI cannot start, prints
// one line (report_startup_error) and returns non-zero.
int run_ranks(int argc, char** argv, const std::function<int(Context&)>& body);

}  // namespace lockstep
