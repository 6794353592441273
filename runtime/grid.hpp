// The TP x DP x PP process grid of Megatron: world = TP x DP x PP with TP innermost and PP
// outermost, so global rank = (pp_rank * dp_size + dp_rank) * tp_size + tp_rank. Each rank
// knows its coordinates, a printable tag ("tp1-dp0", or "tp1-dp0-pp1" when PP > 1), and three
// sub-communicators made by MPI_Comm_split with rank order kept: tp_comm (the ranks sharing
// this dp and pp index), dp_comm (sharing this tp and pp index: one pipeline stage's DP group)
// and pp_comm (sharing this tp and dp index: the stages of one pipeline, in stage order).
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
  // Throws a lockstep::Error (no MPI call made, so every rank throws alike) if tp < 1,
  // pp < 1 or world.size() is not divisible by tp x pp; the message names the numbers and
  // the hint lists the valid values. Collective over `world` otherwise (three
  // MPI_Comm_split).
  static Grid create(const Communicator& world, int tp, int pp = 1);
  // The same check without MPI: throws for a bad (world_size, tp, pp) triple.
  static void validate(int world_size, int tp, int pp = 1);

  int world_rank() const { return world_rank_; }
  int world_size() const { return tp_size_ * dp_size_ * pp_size_; }
  int tp_size() const { return tp_size_; }
  int dp_size() const { return dp_size_; }
  int pp_size() const { return pp_size_; }
  int tp_rank() const { return tp_rank_; }
  int dp_rank() const { return dp_rank_; }
  int pp_rank() const { return pp_rank_; }
  // "tp1-dp0" ("tp1-dp0-pp1" when PP > 1)
  const std::string& tag() const { return tag_; }
  // The tag of any world rank of this grid.
  std::string tag_of(int world_rank) const;
  // Global rank of grid coordinate (tp_rank, dp_rank) in this rank's pipeline stage.
  int rank_of(int tp_rank, int dp_rank) const { return rank_of(tp_rank, dp_rank, pp_rank_); }
  int rank_of(int tp_rank, int dp_rank, int pp_rank) const {
    return (pp_rank * dp_size_ + dp_rank) * tp_size_ + tp_rank;
  }

  const Communicator& tp_comm() const { return tp_comm_; }
  const Communicator& dp_comm() const { return dp_comm_; }
  const Communicator& pp_comm() const { return pp_comm_; }

  bool tp_power_of_two() const { return tp_comm_.power_of_two(); }
  bool dp_power_of_two() const { return dp_comm_.power_of_two(); }
  // Both groups are powers of two: the tree collectives keep G3/G4.
  bool layout_invariant() const { return tp_power_of_two() && dp_power_of_two(); }
  // Empty when layout_invariant(); else e.g. "TP=3 is not a power of two; ...".
  std::string invariance_reason() const;
  // "TP=2 x DP=2 (rank 3 = tp1-dp1)" ("TP=2 x DP=1 x PP=2 (rank 3 = tp1-dp0-pp1)")
  std::string describe() const;

 private:
  Grid(int world_rank, int tp_size, int dp_size, int pp_size, Communicator tp, Communicator dp,
       Communicator pp);
  int world_rank_, tp_size_, dp_size_, pp_size_, tp_rank_, dp_rank_, pp_rank_;
  std::string tag_;
  Communicator tp_comm_;
  Communicator dp_comm_;
  Communicator pp_comm_;
};

}  // namespace lockstep
