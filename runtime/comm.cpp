#include "runtime/comm.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <utility>

#include "runtime/error.hpp"
#include "runtime/host_memory.hpp"
#include "runtime/watchdog.hpp"

namespace lockstep {
namespace {

std::string comm_name(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return "MPI_COMM_NULL";
  char name[MPI_MAX_OBJECT_NAME] = {};
  int len = 0;
  if (MPI_Comm_get_name(comm, name, &len) != MPI_SUCCESS || len == 0) return "unnamed";
  return std::string(name, static_cast<std::size_t>(len));
}

int world_rank_or_minus_one() {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return -1;
  int r = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    return "MPI error code " + std::to_string(rc);
  return std::string(text, static_cast<std::size_t>(len));
}

}  // namespace

void check_mpi(int rc, std::string_view call, MPI_Comm comm, std::source_location loc) {
  if (rc == MPI_SUCCESS) return;
  std::string who = "communicator '" + comm_name(comm) + "'";
  int rank = -1, size = 0;
  if (comm != MPI_COMM_NULL && MPI_Comm_rank(comm, &rank) == MPI_SUCCESS &&
      MPI_Comm_size(comm, &size) == MPI_SUCCESS) {
    who += " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  }
  who += ", world rank " + std::to_string(world_rank_or_minus_one());
  fail(std::string(call) + " failed on " + who + ": " + mpi_error_string(rc),
       "a peer rank may have died or called a different collective; check every rank's log "
       "for the first error, and that all ranks run the same build and configuration",
       loc);
}

// ---- Communicator ------------------------------------------------------------------------

Communicator Communicator::world() {
  return Communicator(MPI_COMM_WORLD, "world", false);
}

Communicator::Communicator(MPI_Comm comm, std::string name, bool owned)
    : comm_(comm), name_(std::move(name)), owned_(owned) {
  check(comm != MPI_COMM_NULL, "cannot wrap MPI_COMM_NULL as communicator '" + name_ + "'",
        "create the communicator before wrapping it");
  check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", comm_);
  if (!name_.empty())
    check_mpi(MPI_Comm_set_name(comm_, name_.c_str()), "MPI_Comm_set_name", comm_);
  check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", comm_);
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", comm_);
}

Communicator::~Communicator() {
  if (owned_ && comm_ != MPI_COMM_NULL) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&comm_);  // a destructor cannot throw; the rc is moot here
  }
}

Communicator::Communicator(Communicator&& o) noexcept
    : comm_(std::exchange(o.comm_, MPI_COMM_NULL)),
      name_(std::move(o.name_)),
      owned_(std::exchange(o.owned_, false)),
      rank_(o.rank_),
      size_(o.size_),
      scratch_(std::move(o.scratch_)) {}

Communicator& Communicator::operator=(Communicator&& o) noexcept {
  if (this != &o) {
    Communicator dead(std::move(*this));  // frees the old handle if owned
    comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
    name_ = std::move(o.name_);
    owned_ = std::exchange(o.owned_, false);
    rank_ = o.rank_;
    size_ = o.size_;
    scratch_ = std::move(o.scratch_);
  }
  return *this;
}

Communicator Communicator::split(int color, int key, const std::string& name) const {
  check(color >= 0,
        "MPI_Comm_split of " + describe() + " into '" + name + "' got negative color " +
            std::to_string(color),
        "colors must be >= 0 so that every rank gets a communicator");
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split", comm_);
  return Communicator(out, name, true);
}

std::string Communicator::describe() const {
  return name_ + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")";
}

std::string Communicator::invariance_reason() const {
  if (layout_invariant()) return {};
  return "communicator '" + name_ + "' has " + std::to_string(size_) +
         " ranks, not a power of two: shards are not aligned subtrees of the canonical sum, "
         "so G3/G4 are lost; G1/G2 hold (reductions stay deterministic)";
}

float* Communicator::scratch(std::size_t n) const {
  if (scratch_.size() < n) {
    std::vector<float>().swap(scratch_);  // release first: never hold old and new at once
    scratch_.resize(n);
  }
  return scratch_.data();
}

void Communicator::barrier() const {
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier", comm_);
  watchdog::watched_wait(&req, 1, *this, "MPI_Barrier");
}

// ---- Context -----------------------------------------------------------------------------

namespace {
Communicator init_world(int* argc, char*** argv, int required, int* provided) {
  int init = 0;
  MPI_Initialized(&init);
  check(!init, "MPI is already initialized; a second lockstep::Context was created",
        "create exactly one Context per process, in main");
  int rc = MPI_Init_thread(argc, argv, required, provided);
  if (rc != MPI_SUCCESS) {
    fail("MPI_Init_thread failed: " + mpi_error_string(rc),
         "start the program with mpirun -np N (Open MPI), and check that the MPI installation "
         "works: mpirun -np 2 hostname");
  }
  if (*provided < required) {
    fail("MPI provides thread level " + std::to_string(*provided) + " but " +
             std::to_string(required) + " is required",
         "use an MPI library built with thread support (Open MPI provides "
         "MPI_THREAD_MULTIPLE)");
  }
  return Communicator::world();
}
}  // namespace

Context::Context(int* argc, char*** argv, int required_thread_level)
    : world_(init_world(argc, argv, required_thread_level, &thread_level_)),
      tag_("rank" + std::to_string(world_.rank())) {
  host_heap_policy();
}

Context::~Context() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

// ---- job-level error handling -----------------------------------------------------------

bool launched_by_mpirun() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"}) {
    if (std::getenv(var)) return true;
  }
  return false;
}

void abort_job(int rank, const std::string& tag, const std::string& message, int exit_code) {
  std::fprintf(stderr, "lockstep: error on rank %d (%s): %s\n", rank, tag.c_str(), message.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

int report_startup_error(const std::string& message) {
  std::fprintf(stderr, "lockstep: error: %s\n", message.c_str());
  std::fflush(stderr);
  return 2;
}

namespace {
std::string describe_exception(const std::exception& e) {
  if (auto* le = dynamic_cast<const Error*>(&e))
    return std::string(le->what()) + " [at " + le->where() + "]";
  return e.what();
}
}  // namespace

int run_ranks(int argc, char** argv, const std::function<int(Context&)>& body) {
  std::unique_ptr<Context> ctx;
  try {
    ctx = std::make_unique<Context>(&argc, &argv);
  } catch (const std::exception& e) {
    return report_startup_error(describe_exception(e));
  }
  int code = 0;
  try {
    code = body(*ctx);
  } catch (const std::exception& e) {
    abort_job(ctx->rank(), ctx->tag(), describe_exception(e));
  } catch (...) {
    abort_job(ctx->rank(), ctx->tag(), "unknown exception");
  }
  return code;  // ctx's destructor finalizes MPI
}

}  // namespace lockstep
