// Collectives on float32 buffers (and exact uint64 ones for fingerprints), chosen by the
// determinism mode of docs/design.md section 1.
//
// Determinism contract (invariant mode, docs/design.md section 2): tree_allreduce over a
// communicator of P = 2^k ranks returns, on every rank, exactly
//     lockstep::tree_sum({buf of rank 0, ..., buf of rank P-1})
// i.e. the canonical pairwise tree over ranks in rank order: at step d = 1, 2, 4, ... rank
// r and its partner r^d both compute (lower group's value) + (upper group's value). When
// each rank holds an aligned subtree of a canonical sum (a power-of-two number of whole
// blocks), the result equals the single-process csum bit for bit. Both algorithms below
// (recursive doubling; recursive-halving reduce-scatter + allgather) evaluate that same tree
// per element, so they give identical bits, as do all message sizes, piece sizes and
// thresholds in TreeOptions. Non-power-of-two communicators gather every contribution of
// a segment on one rank and fold it with tree_sum in rank order: still identical bits on
// every rank and run to run (G1/G2), but rank shards are then not aligned subtrees, so the
// communicator reports itself as not layout-invariant.
//
// deterministic mode uses MPI_Allreduce / MPI_Reduce_scatter_block: Open MPI 4.1 picks its
// algorithm (and so the summation order) from the message size and the rank count only
// (coll_tuned fixed decision rules), so the same layout and sizes give the same bits (G1/G2)
// but another layout may not. fast mode uses the same vendor calls.
// allgather and broadcast move bits without arithmetic and are exact in every mode.
//
// Waiting: every collective waits through the progress watchdog (runtime/watchdog.hpp,
// watched_wait): point-to-point steps, data movement and the integer reductions are posted
// as their nonblocking forms; the vendor float reductions stay the blocking calls above
// (Open MPI's nonblocking forms run other algorithms, hence other bits) behind a watched
// arrival barrier. None of this changes a bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "runtime/comm.hpp"
#include "runtime/determinism.hpp"

namespace lockstep {

enum class TreeAlgorithm {
  automatic,  // doubling below TreeOptions::halving_min_bytes, halving from there up
  doubling,   // recursive doubling on the full buffer: log2(P) exchanges of n floats
  halving,    // reduce-scatter by recursive halving (distance ascending) + allgather
};

// Performance knobs of the tree collectives. None of them changes bits.
struct TreeOptions {
  std::size_t halving_min_bytes = std::size_t{32} << 10;  // automatic: halving from here up
  std::size_t piece_bytes = std::size_t{256} << 10;       // exchange granularity (cache-sized)
  // Pieces grow past piece_bytes so that one exchange has at most about this many: every
  // piece is a rendezvous handshake, which costs most when ranks share busy cores.
  std::size_t max_pieces = 8;
};

// ---- invariant-mode (canonical tree) collectives -------------------------------------

// In place: buf becomes the canonical tree sum of every rank's buf (see contract above).
// Any length works (segments may be uneven or empty); every rank passes the same length.
void tree_allreduce(const Communicator& comm, std::span<float> buf,
                    TreeAlgorithm algorithm = TreeAlgorithm::automatic,
                    const TreeOptions& options = {});

// send holds P equal segments (send.size() == P * recv.size(), else a lockstep::Error);
// rank r receives segment r of the canonical tree sum over ranks. Power-of-two P uses
// recursive halving with distance ascending (adjacent ranks combine first, as in the
// canonical tree); rank r's bits equal the matching slice of tree_allreduce.
void tree_reduce_scatter(const Communicator& comm, std::span<const float> send,
                         std::span<float> recv, const TreeOptions& options = {});

// The floats of comm.scratch() (the communicator's grow-only buffer, runtime/comm.hpp) that one
// tree_allreduce / tree_reduce_scatter of n floats (send's length) over P ranks needs: what a
// job's memory estimate counts (launch/train/memory_estimate.cpp). Non-power-of-two P uses
// buffers of its own call instead (freed when it returns): 0.
std::size_t tree_allreduce_scratch(int P, std::size_t n, const TreeOptions& options = {});
std::size_t tree_reduce_scatter_scratch(int P, std::size_t n, const TreeOptions& options = {});

// ---- exact data movement ---------------------------------------------------------------

// all = concatenation of every rank's `mine` in rank order (all.size() == P * mine.size()).
void allgather(const Communicator& comm, std::span<const float> mine, std::span<float> all);
// Every rank's buf becomes root's buf.
void broadcast(const Communicator& comm, std::span<float> buf, int root);
// Sends `mine` to rank `partner` and receives its buffer into `theirs` (exact copies; the
// partner calls exchange with this rank).
void exchange(const Communicator& comm, int partner, std::span<const float> mine,
              std::span<float> theirs);

// ---- vendor (MPI) reductions: deterministic / fast modes -------------------------------

void vendor_allreduce(const Communicator& comm, std::span<float> buf);
void vendor_reduce_scatter(const Communicator& comm, std::span<const float> send,
                           std::span<float> recv);

// ---- dispatch by mode ------------------------------------------------------------------

// invariant -> tree_allreduce; deterministic, fast -> vendor_allreduce.
void allreduce_sum(Determinism mode, const Communicator& comm, std::span<float> buf,
                   const TreeOptions& options = {});
// invariant -> tree_reduce_scatter; deterministic, fast -> vendor_reduce_scatter.
void reduce_scatter_sum(Determinism mode, const Communicator& comm, std::span<const float> send,
                        std::span<float> recv, const TreeOptions& options = {});

// ---- exact integer reductions (fingerprints, counters) ---------------------------------

enum class IntOp { sum, max, min, bxor };  // sum is modulo 2^64: order-free and exact
void allreduce_u64(const Communicator& comm, std::span<std::uint64_t> buf, IntOp op);
std::uint64_t allreduce_u64(const Communicator& comm, std::uint64_t value, IntOp op);

// ---- bitwise comparison ----------------------------------------------------------------

struct BitDiff {
  std::int64_t differing = 0;  // elements whose bits differ (+0.0 vs -0.0 counts)
  std::uint64_t max_ulp = 0;   // largest distance in units in the last place (0 for +-0)
  std::int64_t first = -1;     // index of the first differing element, -1 if none
};
// Elementwise bit comparison of two equally long float arrays (throws otherwise).
BitDiff bit_diff(std::span<const float> a, std::span<const float> b);
// True on every rank iff every rank's buf has the same length and the same bits as rank
// 0's (exact: broadcasts rank 0's copy). Collective.
bool identical_across_ranks(const Communicator& comm, std::span<const float> buf);

}  // namespace lockstep
