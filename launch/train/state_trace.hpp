// The per-step state fingerprints of trace.jsonl (docs/design.md section 5) and the
// cross-replica guard (verify.replica_check_interval). Every step, each state group
// (param/, grad/, adam_m/, adam_v/) is fingerprinted over logical tensors: every rank
// hashes the pieces it owns (launch/train/grad_sync.hpp: one owner per logical element), and one
// integer allreduce over the world adds them up (sum mod 2^64; xor for verify.hash =
// torch-xor). Lockstep fingerprints are of verify.fingerprint_version (verify/fingerprint.hpp
// FpVersion; checkpoints record it). "rng" and "data" hash the random-stream coordinates and the
// data-order state. The owned pieces are cut into chunks of at most kChunk elements and the chunks
// of a whole call (param + adam_m + adam_v after the update) are spread over the rank's threads;
// the chunk sums are added per piece mod 2^64 (xor for torch-xor), so neither the chunking nor the
// thread count can change a value. The guard: on its steps every rank hashes all of its local
// parameters (XXH3-64 of each piece's bytes, runtime/hash.hpp: every byte checked, several times
// cheaper than the fingerprint) and the DP replicas of each piece compare them with exact integer
// collectives; a mismatch stops the job with the step, the tensor and the ranks. Under pipeline
// parallelism the stages that hold copies of one parameter (the tied embedding on the first and
// the last stage) compare them the same way. Determinism
// contract: the fingerprints are functions of the logical state only, so in invariant mode they are
// identical on every layout; hashing reads state and never writes it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "launch/train/grad_sync.hpp"
#include "runtime/grid.hpp"
#include "runtime/state_piece.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep {

using Fingerprints = std::vector<std::pair<std::string, std::uint64_t>>;

class StateTrace {
 public:
  static constexpr std::int64_t kChunk = std::int64_t{1} << 15;  // elements per work unit

  // state_interval: fingerprint the state groups on steps that are multiples of it (0:
  // never; the trace then has rng and data only); guard_interval likewise for the guard.
  StateTrace(GradSync& sync, const Communicator& world, const Grid& grid, HashKind kind,
             FpVersion version, std::int64_t state_interval, std::int64_t guard_interval,
             int threads);

  // The version of every lockstep fingerprint this trace and checkpoint_fingerprints() give.
  FpVersion fp_version() const { return version_; }

  // Right after the gradient reduction (before clipping): hash the reduced gradients.
  void after_reduce(std::int64_t step);
  // After the update: hash parameters and AdamW moments, run the replica guard when due
  // (throws lockstep::Error on a mismatch), add everything up over the world. Returns the
  // trace's fp entries in canonical order: param/*, grad/*, adam_m/*, adam_v/*, rng, data.
  Fingerprints finish(std::int64_t step, std::uint64_t rng_fp, std::uint64_t data_fp);

  // Seconds this rank spent hashing (state pieces and the guard's parameter hashes, not the
  // collectives) since the last call; the trainer reports it per step as verify_ms.
  double take_hash_seconds() {
    const double s = hash_seconds_;
    hash_seconds_ = 0;
    return s;
  }
  // The same work's CPU seconds summed over the threads that did it (thread CPU clocks per
  // chunk): a measure that machine load does not inflate.
  double take_hash_cpu_seconds() {
    const double s = hash_cpu_seconds_;
    hash_cpu_seconds_ = 0;
    return s;
  }

  // The lockstep logical fingerprints (of fp_version()) of the checkpointed groups (param/,
  // adam_m/, adam_v/) as of the last finish(); computed now if the trace hash is torch-xor.
  std::map<std::string, std::uint64_t> checkpoint_fingerprints();
  // The pieces a checkpoint holds: param/*, adam_m/*, adam_v/* (owners flagged).
  std::vector<StatePiece> checkpoint_pieces();

 private:
  // The owner pieces' hashes of each group (0 for pieces this rank does not own), all groups'
  // chunks in one parallel loop over the rank's threads.
  std::vector<std::vector<std::uint64_t>> hash_owned(
      const std::vector<const std::vector<StatePiece>*>& groups, HashKind kind);
  // XXH3-64 of every local parameter piece, compared across the DP replicas.
  void guard(std::int64_t step);
  void guard_replicas(std::int64_t step, const std::vector<std::uint64_t>& local);
  void guard_stages(std::int64_t step, const std::vector<std::uint64_t>& local);

  GradSync& sync_;
  const Communicator& world_;
  const Grid& grid_;
  HashKind kind_;
  FpVersion version_;
  std::int64_t state_interval_, guard_interval_;
  bool state_due_ = false;
  int threads_;
  std::vector<StatePiece> grad_, param_, m_, v_;
  std::vector<std::uint64_t> grad_local_;
  Fingerprints last_;
  double hash_seconds_ = 0, hash_cpu_seconds_ = 0;
};

// CPU seconds of this process, all threads (CLOCK_PROCESS_CPUTIME_ID); metrics.jsonl's
// cpu_ms, against which verify_cpu_ms is read.
double process_cpu_seconds();

// Fingerprints of the random-stream coordinates (seed, next step) and the data order state.
std::uint64_t rng_fingerprint(std::uint64_t seed, std::int64_t next_step);
std::uint64_t data_fingerprint(const std::string& sampler_json);

}  // namespace lockstep
