// The TP x DP process grid of Megatron: world = TP x DP with TP innermost, so global rank
// = dp_rank * tp_size + tp_rank. Each rank knows its coordinates, a printable tag
// ("tp1-dp0"), and two sub-communicators made by MPI_Comm_split with rank order kept:
// tp_comm (the ranks sharing this dp index) and dp_comm (the ranks sharing this tp index).
// Determinism contract: the grid fixes which ranks reduce together and in which order
// (sub-communicator rank order == tp/dp index order), which is what the tree collectives
// need. It reports per group whether the size is a power of two; if not, that group's
// reductions are deterministic (G1/G2) but not layout-invariant (G3/G4), and
// invariance_reason() says why.
#pragma once

#include <string>

#include "runtime/comm.hpp"

namespace lockstep {

class Grid {
 public:
  // Throws a lockstep::Error (no MPI call made, so every rank throws alike) if tp < 1 or
  // world.size() is not divisible by tp; the message names both numbers and the hint
  // lists the valid tp values. Collective over `world` otherwise (two MPI_Comm_split).
  static Grid create(const Communicator& world, int tp);
  // The same check without MPI: throws for a bad (world_size, tp) pair.
  static void validate(int world_size, int tp);

  int world_rank() const { return world_rank_; }
  int world_size() const { return tp_size_ * dp_size_; }
  int tp_size() const { return tp_size_; }
  int dp_size() const { return dp_size_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  // "tp1-dp0"
  const std::string& tag() const { return tag_; }
  // Global rank of grid coordinate (tp_rank, dp_rank).
  int rank_of(int tp_rank, int dp_rank) const { return dp_rank * tp_size_ + tp_rank; }

  const Communicator& tp_comm() const { return tp_comm_; }
  const Communicator& dp_comm() const { return dp_comm_; }

  bool tp_power_of_two() const { return tp_comm_.power_of_two(); }
  bool dp_power_of_two() const { return dp_comm_.power_of_two(); }
  // Both groups are powers of two: the tree collectives keep G3/G4.
  bool layout_invariant() const { return tp_power_of_two() && dp_power_of_two(); }
  // Empty when layout_invariant(); else e.g. "TP=3 is not a power of two; ...".
  std::string invariance_reason() const;
  // "TP=2 x DP=2 (rank 3 = tp1-dp1)"
  std::string describe() const;

 private:
  Grid(int world_rank, int tp_size, int dp_size, Communicator tp, Communicator dp);
  int world_rank_, tp_size_, dp_size_, tp_rank_, dp_rank_;
  std::string tag_;
  Communicator tp_comm_;
  Communicator dp_comm_;
};

}  // namespace lockstep
