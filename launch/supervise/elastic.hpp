// Elastic relaunch (`lockstep run --elastic MIN:MAX`): which hosts and how many ranks the
// next attempt of a failed job gets, and on which layout. The pool is the hosts of the
// first launch (hostfile / --host; else this host with MAX slots; inside SLURM the
// allocation's tasks). Before each relaunch every host is probed (a bounded `mpirun -np 1
// --host H true` with the job's --mpi-arg flags; this host always answers), the slot of a
// rank that a signal killed in the failure just before is left out for one launch (how a
// single host shows "a rank is lost"), and hosts that answer again come back (the pool
// grows up to MAX).
// Determinism contract: a layout is chosen only if the checkpoint's layout and the new one
// both keep G3 (config::guarantees), so the resumed trajectory is the uninterrupted one bit
// for bit (G4); without G3 on both, only the same layout as before (G2) qualifies.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/supervise/job_output.hpp"
#include "launch/supervise/launch_plan.hpp"
#include "launch/train/config.hpp"

namespace lockstep::supervise {

struct ElasticRange {
  int min = 0, max = 0;  // ranks; max 0: off
  bool on() const { return max > 0; }
};
// "MIN:MAX" with 1 <= MIN <= MAX (throws naming the text otherwise); "" is off.
ElasticRange parse_elastic(const std::string& text);

// The hosts and slots the next launch may use, and the hosts that did not answer.
struct Availability {
  std::vector<Host> hosts;  // empty: this host (or the SLURM allocation)
  int slots = 0;
  std::vector<std::string> down;
};
Availability probe_pool(const Placement& first, const ElasticRange& range, const RunRequest& r,
                        const std::optional<LostRank>& lost, const std::string& log);

// A rank count and TP size for the relaunch.
struct LayoutChoice {
  int np = 1, tp = 1;
};
// The largest n in [min, max_n] (and its TP: the config's when it divides n, else the
// largest power of two dividing n) whose config validates and keeps G4 with the layout that
// wrote the checkpoint (prev); nothing when no n qualifies.
std::optional<LayoutChoice> choose_layout(const config::Config& cfg, const LayoutChoice& prev,
                                          int min, int max_n);

// The sentence saying why the bits hold across this relaunch.
std::string why_bits_hold(const LayoutChoice& prev, const LayoutChoice& next,
                          const std::string& checkpoint);

}  // namespace lockstep::supervise
