#include "runtime/grid.hpp"

#include <utility>

#include "runtime/error.hpp"

namespace lockstep {
namespace {
std::string divisors(int n) {
  std::string out;
  for (int d = 1; d <= n; ++d) {
    if (n % d) continue;
    if (!out.empty()) out += ", ";
    out += std::to_string(d);
  }
  return out;
}
bool pow2(int n) {
  return n > 0 && (n & (n - 1)) == 0;
}
}  // namespace

void Grid::validate(int world_size, int tp, int pp) {
  check(world_size >= 1, "world size " + std::to_string(world_size) + " is not positive",
        "start the job with mpirun -np N, N >= 1");
  check(tp >= 1, "tensor-parallel size tp=" + std::to_string(tp) + " must be at least 1",
        "set parallel.tp to one of the divisors of the rank count " + std::to_string(world_size) +
            ": " + divisors(world_size));
  check(pp >= 1, "pipeline-parallel size pp=" + std::to_string(pp) + " must be at least 1",
        "set parallel.pp to one of the divisors of the rank count " + std::to_string(world_size) +
            ": " + divisors(world_size));
  const std::string dims = pp > 1 ? "TP=" + std::to_string(tp) + " x DP x PP=" + std::to_string(pp)
                                  : "TP=" + std::to_string(tp) + " x DP";
  check(world_size % (tp * pp) == 0,
        "cannot arrange " + std::to_string(world_size) + " ranks as " + dims + ": " +
            std::to_string(world_size) + " is not divisible by " + std::to_string(tp * pp),
        pp > 1 ? "change mpirun -np to a multiple of tp x pp = " + std::to_string(tp * pp)
               : "set parallel.tp to one of the divisors of " + std::to_string(world_size) + ": " +
                     divisors(world_size) + ", or change mpirun -np to a multiple of " +
                     std::to_string(tp));
}

Grid Grid::create(const Communicator& world, int tp, int pp) {
  validate(world.size(), tp, pp);
  const int r = world.rank(), dp = world.size() / (tp * pp);
  const int tp_rank = r % tp, dp_rank = (r / tp) % dp, pp_rank = r / (tp * dp);
  // Key = world rank keeps rank order: tp_comm rank == tp_rank, dp_comm rank == dp_rank,
  // pp_comm rank == pp_rank.
  Communicator tpc = world.split(r / tp, r, "tp");
  Communicator dpc = world.split(pp_rank * tp + tp_rank, r, "dp");
  Communicator ppc = world.split(r % (tp * dp), r, "pp");
  check(tpc.rank() == tp_rank && dpc.rank() == dp_rank && ppc.rank() == pp_rank,
        "grid sub-communicators out of order on world rank " + std::to_string(r) +
            ": tp_comm rank " + std::to_string(tpc.rank()) + " (want " + std::to_string(tp_rank) +
            "), dp_comm rank " + std::to_string(dpc.rank()) + " (want " + std::to_string(dp_rank) +
            "), pp_comm rank " + std::to_string(ppc.rank()) + " (want " + std::to_string(pp_rank) +
            ")",
        "MPI_Comm_split must order by key; this MPI library is misbehaving");
  return Grid(r, tp, dp, pp, std::move(tpc), std::move(dpc), std::move(ppc));
}

Grid::Grid(int world_rank, int tp_size, int dp_size, int pp_size, Communicator tp, Communicator dp,
           Communicator pp)
    : world_rank_(world_rank),
      tp_size_(tp_size),
      dp_size_(dp_size),
      pp_size_(pp_size),
      tp_rank_(world_rank % tp_size),
      dp_rank_((world_rank / tp_size) % dp_size),
      pp_rank_(world_rank / (tp_size * dp_size)),
      tag_(tag_of(world_rank)),
      tp_comm_(std::move(tp)),
      dp_comm_(std::move(dp)),
      pp_comm_(std::move(pp)) {}

std::string Grid::tag_of(int world_rank) const {
  const int t = world_rank % tp_size_, d = (world_rank / tp_size_) % dp_size_,
            p = world_rank / (tp_size_ * dp_size_);
  return "tp" + std::to_string(t) + "-dp" + std::to_string(d) +
         (pp_size_ > 1 ? "-pp" + std::to_string(p) : "");
}

std::string Grid::invariance_reason() const {
  std::string out;
  for (auto [label, n] : {std::pair<const char*, int>{"TP", tp_size_}, {"DP", dp_size_}}) {
    if (pow2(n)) continue;
    if (!out.empty()) out += "; ";
    out += std::string(label) + "=" + std::to_string(n) +
           " is not a power of two, so its shards are not aligned subtrees of the canonical "
           "sum";
  }
  if (!out.empty()) out += "; G3/G4 lost, G1/G2 hold";
  return out;
}

std::string Grid::describe() const {
  return "TP=" + std::to_string(tp_size_) + " x DP=" + std::to_string(dp_size_) +
         (pp_size_ > 1 ? " x PP=" + std::to_string(pp_size_) : "") + " (rank " +
         std::to_string(world_rank_) + " = " + tag_ + ")";
}

}  // namespace lockstep
