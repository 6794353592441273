#include "runtime/collectives.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/csum.hpp"
#include "runtime/error.hpp"
#include "runtime/watchdog.hpp"

namespace lockstep {
namespace {

constexpr int kTagHalving = 0x4c53;  // point-to-point tags used inside the collectives
constexpr int kTagGather = 0x4c54;
constexpr int kTagDoubling = 0x4c55;
constexpr int kTagExchange = 0x4c56;
// MPI counts are int; larger transfers go in slices of this many elements.
constexpr std::size_t kMaxCount = std::size_t{1} << 30;

int log2_exact(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

int bit_reverse(int x, int bits) {
  int y = 0;
  for (int i = 0; i < bits; ++i) y |= ((x >> i) & 1) << (bits - 1 - i);
  return y;
}

int as_count(std::size_t n, const Communicator& comm, const char* what) {
  check(n <= static_cast<std::size_t>(INT_MAX),
        std::string(what) + " of " + std::to_string(n) + " elements on " + comm.describe() +
            " exceeds MPI's int count",
        "split the buffer into pieces below 2^31 elements");
  return static_cast<int>(n);
}

// mine = (lower rank's value) + (upper rank's value), elementwise. Float addition is
// commutative, but NaN payloads are not, so the operand order is fixed anyway; it is the
// order of tree_sum (left subtree + right subtree).
void add_ordered(float* __restrict mine, const float* __restrict theirs, std::size_t n,
                 bool i_am_lower) {
  if (i_am_lower) {
    for (std::size_t i = 0; i < n; ++i) mine[i] = mine[i] + theirs[i];
  } else {
    for (std::size_t i = 0; i < n; ++i) mine[i] = theirs[i] + mine[i];
  }
}

// Sends ns floats and receives nr floats with `partner`, in slices MPI can count.
void sendrecv(const Communicator& comm, int partner, int tag, const float* send, std::size_t ns,
              float* recv, std::size_t nr) {
  std::size_t done_s = 0, done_r = 0;
  do {
    const std::size_t cs = std::min(kMaxCount, ns - done_s), cr = std::min(kMaxCount, nr - done_r);
    MPI_Request req[2];
    check_mpi(MPI_Irecv(recv + done_r, static_cast<int>(cr), MPI_FLOAT, partner, tag, comm.handle(),
                        &req[0]),
              "MPI_Irecv", comm.handle());
    check_mpi(MPI_Isend(send + done_s, static_cast<int>(cs), MPI_FLOAT, partner, tag, comm.handle(),
                        &req[1]),
              "MPI_Isend", comm.handle());
    watchdog::watched_wait(req, 2, comm, "MPI_Sendrecv");
    done_s += cs;
    done_r += cr;
  } while (done_s < ns || done_r < nr);
}

// One pairwise step: send [send, send+ns) to partner, receive partner's partial sums for
// [keep, keep+nk) and fold them into keep. Both sides cut their ranges into pieces by the
// same rule (piece k of a range of length L is [k*piece, min(L,(k+1)*piece))), so pieces
// match. The exchange of piece k+1 is posted before piece k is added (two receive buffers),
// so the handshake of the next piece overlaps the arithmetic and each piece is added while
// it is still in cache. Piece k+1 of `send` is sent before piece k+1 of `keep` is written,
// so send may equal keep (recursive doubling).
void exchange_fold(const Communicator& comm, int partner, int tag, bool i_am_lower, float* keep,
                   std::size_t nk, const float* send, std::size_t ns, float* tmp,
                   std::size_t piece) {
  const std::size_t pieces = std::max<std::size_t>(1, (std::max(nk, ns) + piece - 1) / piece);
  const std::size_t slot = std::min(nk, piece);  // tmp holds 2 * piece floats
  if (pieces == 1) {                             // one piece: nothing to overlap
    sendrecv(comm, partner, tag, send, ns, tmp, nk);
    add_ordered(keep, tmp, nk, i_am_lower);
    return;
  }
  MPI_Request req[2][2];
  auto post = [&](std::size_t k) {
    const std::size_t ko = std::min(nk, k * piece), kn = std::min(nk, ko + piece) - ko;
    const std::size_t so = std::min(ns, k * piece), sn = std::min(ns, so + piece) - so;
    MPI_Request* r = req[k % 2];
    check_mpi(MPI_Irecv(tmp + (k % 2) * slot, static_cast<int>(kn), MPI_FLOAT, partner, tag,
                        comm.handle(), &r[0]),
              "MPI_Irecv", comm.handle());
    check_mpi(
        MPI_Isend(send + so, static_cast<int>(sn), MPI_FLOAT, partner, tag, comm.handle(), &r[1]),
        "MPI_Isend", comm.handle());
  };
  post(0);
  for (std::size_t k = 0; k < pieces; ++k) {
    watchdog::watched_wait(req[k % 2], 2, comm, "MPI_Waitall");
    if (k + 1 < pieces) post(k + 1);
    const std::size_t ko = std::min(nk, k * piece), kn = std::min(nk, ko + piece) - ko;
    add_ordered(keep + ko, tmp + (k % 2) * slot, kn, i_am_lower);
  }
}

// Piece length (elements) for a collective over n elements; a function of the options and
// n only, so every rank cuts its ranges the same way.
std::size_t piece_elems(const TreeOptions& o, std::size_t n) {
  const std::size_t by_count =
      (n + 2 * o.max_pieces - 1) / std::max<std::size_t>(1, 2 * o.max_pieces);
  return std::clamp<std::size_t>(std::max(o.piece_bytes / sizeof(float), by_count), 1024,
                                 kMaxCount);
}

// exchange_fold's two receive pieces for a collective over n elements.
std::size_t fold_scratch(std::size_t n, std::size_t piece) { return 2 * std::min(n, piece); }

// Recursive doubling on the whole buffer, distance 1, 2, 4, ...
void doubling(const Communicator& comm, std::span<float> buf, const TreeOptions& o) {
  const std::size_t piece = piece_elems(o, buf.size());
  float* tmp = comm.scratch(fold_scratch(buf.size(), piece));
  const int r = comm.rank();
  for (int d = 1; d < comm.size(); d <<= 1) {
    const int partner = r ^ d;
    exchange_fold(comm, partner, kTagDoubling, (r & d) == 0, buf.data(), buf.size(), buf.data(),
                  buf.size(), tmp, piece);
  }
}

// The buffer is cut into P chunks [bound[c], bound[c+1]). Step s = 0, 1, ... (distance
// d = 2^s, ascending) halves the chunk range each rank is responsible for: the rank whose
// bit s is 0 keeps the lower half of its current range, its partner r^d the upper half.
// Because the halves are contiguous in chunk position, no packing is needed; rank r ends
// with chunk position bit_reverse(r) fully reduced. Each element is combined over aligned
// rank groups of size 2, 4, ... with the lower group on the left: the canonical tree.
// Returns the chunk ranges kept at each step (for the allgather that undoes it).
struct Range {
  int lo, hi;  // chunk positions
};
// tmp: 2 * min(piece, total length) floats of scratch.
std::vector<Range> halving(const Communicator& comm, float* buf,
                           const std::vector<std::size_t>& bound, float* tmp, std::size_t piece) {
  const int P = comm.size(), r = comm.rank(), L = log2_exact(P);
  std::vector<Range> kept;
  Range cur{0, P};
  for (int s = 0; s < L; ++s) {
    const int mid = (cur.lo + cur.hi) / 2;
    const bool lower = ((r >> s) & 1) == 0;
    const Range keep = lower ? Range{cur.lo, mid} : Range{mid, cur.hi};
    const Range give = lower ? Range{mid, cur.hi} : Range{cur.lo, mid};
    exchange_fold(comm, r ^ (1 << s), kTagHalving, lower, buf + bound[keep.lo],
                  bound[keep.hi] - bound[keep.lo], buf + bound[give.lo],
                  bound[give.hi] - bound[give.lo], tmp, piece);
    kept.push_back(keep);
    cur = keep;
  }
  return kept;
}

// Undoes halving()'s partition: steps in reverse, each rank sends the range it holds and
// receives its partner's straight into place. Exact (no arithmetic).
void gather_back(const Communicator& comm, float* buf, const std::vector<std::size_t>& bound,
                 const std::vector<Range>& kept) {
  const int r = comm.rank();
  for (int s = static_cast<int>(kept.size()) - 1; s >= 0; --s) {
    const Range mine = kept[static_cast<std::size_t>(s)];
    const int width = mine.hi - mine.lo;
    const Range theirs =
        ((r >> s) & 1) == 0 ? Range{mine.hi, mine.hi + width} : Range{mine.lo - width, mine.lo};
    sendrecv(comm, r ^ (1 << s), kTagGather, buf + bound[mine.lo], bound[mine.hi] - bound[mine.lo],
             buf + bound[theirs.lo], bound[theirs.hi] - bound[theirs.lo]);
  }
}

std::vector<std::size_t> balanced_bounds(std::size_t n, int P) {
  std::vector<std::size_t> b(static_cast<std::size_t>(P) + 1);
  for (int c = 0; c <= P; ++c)
    b[static_cast<std::size_t>(c)] = n * static_cast<std::size_t>(c) / static_cast<std::size_t>(P);
  return b;
}

// Any P (used for non-powers of two): segment j of every rank goes to rank j
// (MPI_Alltoallv, exact), rank j folds the P copies with tree_sum in rank order into
// out. Returns nothing; out has bound[r+1]-bound[r] elements.
void gather_fold_segment(const Communicator& comm, const float* send,
                         const std::vector<std::size_t>& bound, float* out) {
  const int P = comm.size(), r = comm.rank();
  const std::size_t mine =
      bound[static_cast<std::size_t>(r) + 1] - bound[static_cast<std::size_t>(r)];
  std::vector<int> scount(P), sdispl(P), rcount(P), rdispl(P);
  for (int j = 0; j < P; ++j) {
    scount[j] = as_count(bound[j + 1] - bound[j], comm, "segment");
    sdispl[j] = as_count(bound[j], comm, "segment offset");
    rcount[j] = as_count(mine, comm, "segment");
    rdispl[j] = as_count(mine * static_cast<std::size_t>(j), comm, "gathered segments");
  }
  std::vector<float> parts(mine * static_cast<std::size_t>(P));
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(MPI_Ialltoallv(send, scount.data(), sdispl.data(), MPI_FLOAT, parts.data(),
                           rcount.data(), rdispl.data(), MPI_FLOAT, comm.handle(), &req),
            "MPI_Ialltoallv", comm.handle());
  watchdog::watched_wait(&req, 1, comm, "MPI_Alltoallv");
  std::vector<const float*> ptrs(static_cast<std::size_t>(P));
  for (int j = 0; j < P; ++j) ptrs[j] = parts.data() + mine * static_cast<std::size_t>(j);
  // The pow2 tree over ranks under either contract: for P = 2^k both shapes are this tree, and
  // a non-power-of-two P is deterministic only (its shards are not nodes), so keeping pow2
  // here keeps the bits of runs made before the halving contract.
  tree_sum(TreeShape::pow2, ptrs, static_cast<std::int64_t>(mine), out);
}

void check_same_length_hint(bool ok, const std::string& what) {
  check(ok, what, "every rank must pass buffers of the same length to a collective");
}

}  // namespace

void tree_allreduce(const Communicator& comm, std::span<float> buf, TreeAlgorithm algorithm,
                    const TreeOptions& options) {
  const int P = comm.size();
  if (P == 1 || buf.empty()) return;
  const std::size_t n = buf.size();
  if (!comm.power_of_two()) {
    auto bound = balanced_bounds(n, P);
    const std::size_t lo = bound[comm.rank()], len = bound[comm.rank() + 1] - lo;
    std::vector<float> mine(len);
    gather_fold_segment(comm, buf.data(), bound, mine.data());
    std::vector<int> count(P), displ(P);
    for (int j = 0; j < P; ++j) {
      count[j] = as_count(bound[j + 1] - bound[j], comm, "segment");
      displ[j] = as_count(bound[j], comm, "segment offset");
    }
    std::copy(mine.begin(), mine.end(), buf.begin() + static_cast<std::ptrdiff_t>(lo));
    MPI_Request req = MPI_REQUEST_NULL;
    check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf.data(), count.data(), displ.data(),
                              MPI_FLOAT, comm.handle(), &req),
              "MPI_Iallgatherv", comm.handle());
    watchdog::watched_wait(&req, 1, comm, "MPI_Allgatherv");
    return;
  }
  if (algorithm == TreeAlgorithm::automatic) {
    algorithm = n * sizeof(float) >= options.halving_min_bytes ? TreeAlgorithm::halving
                                                               : TreeAlgorithm::doubling;
  }
  if (algorithm == TreeAlgorithm::doubling) {
    doubling(comm, buf, options);
    return;
  }
  const auto bound = balanced_bounds(n, P);
  const std::size_t piece = piece_elems(options, n);
  const auto kept = halving(comm, buf.data(), bound, comm.scratch(fold_scratch(n, piece)), piece);
  gather_back(comm, buf.data(), bound, kept);
}

void tree_reduce_scatter(const Communicator& comm, std::span<const float> send,
                         std::span<float> recv, const TreeOptions& options) {
  const int P = comm.size();
  const std::size_t m = recv.size();
  check(send.size() == m * static_cast<std::size_t>(P),
        "tree_reduce_scatter on " + comm.describe() + ": send has " + std::to_string(send.size()) +
            " elements, expected " + std::to_string(P) + " x " + std::to_string(m),
        "send must hold one equal segment per rank; pad the buffer to a multiple of the "
        "group size or use tree_allreduce for uneven lengths");
  if (P == 1) {
    std::copy(send.begin(), send.end(), recv.begin());
    return;
  }
  std::vector<std::size_t> bound(static_cast<std::size_t>(P) + 1);
  for (int c = 0; c <= P; ++c) bound[c] = m * static_cast<std::size_t>(c);
  if (!comm.power_of_two()) {
    gather_fold_segment(comm, send.data(), bound, recv.data());
    return;
  }
  // Work copy in bit-reversed segment order: position q holds segment bit_reverse(q), so
  // halving's contiguous halves are exactly "the segments whose index bit s equals my bit
  // s", and rank r ends at position bit_reverse(r) holding segment r.
  const int L = log2_exact(P);
  const std::size_t piece = piece_elems(options, send.size());
  float* work = comm.scratch(send.size() + fold_scratch(send.size(), piece));
  for (int q = 0; q < P; ++q) {
    const float* src = send.data() + m * static_cast<std::size_t>(bit_reverse(q, L));
    std::copy(src, src + m, work + m * static_cast<std::size_t>(q));
  }
  halving(comm, work, bound, work + send.size(), piece);
  const float* mine = work + m * static_cast<std::size_t>(bit_reverse(comm.rank(), L));
  std::copy(mine, mine + m, recv.begin());
}

std::size_t tree_allreduce_scratch(int P, std::size_t n, const TreeOptions& options) {
  if (P <= 1 || (P & (P - 1)) != 0 || n == 0) return 0;
  return fold_scratch(n, piece_elems(options, n));  // doubling and halving alike
}

std::size_t tree_reduce_scatter_scratch(int P, std::size_t n, const TreeOptions& options) {
  if (P <= 1 || (P & (P - 1)) != 0) return 0;
  return n + fold_scratch(n, piece_elems(options, n));  // the work copy, then halving's pieces
}

void allgather(const Communicator& comm, std::span<const float> mine, std::span<float> all) {
  check_same_length_hint(all.size() == mine.size() * static_cast<std::size_t>(comm.size()),
                         "allgather on " + comm.describe() + ": output has " +
                             std::to_string(all.size()) + " elements, expected " +
                             std::to_string(comm.size()) + " x " + std::to_string(mine.size()));
  const int c = as_count(mine.size(), comm, "allgather");
  MPI_Request req = MPI_REQUEST_NULL;
  check_mpi(
      MPI_Iallgather(mine.data(), c, MPI_FLOAT, all.data(), c, MPI_FLOAT, comm.handle(), &req),
      "MPI_Iallgather", comm.handle());
  watchdog::watched_wait(&req, 1, comm, "MPI_Allgather");
}

void broadcast(const Communicator& comm, std::span<float> buf, int root) {
  check(root >= 0 && root < comm.size(),
        "broadcast root " + std::to_string(root) + " is not a rank of " + comm.describe(),
        "the root must be in [0, size)");
  for (std::size_t done = 0; done < buf.size(); done += kMaxCount) {
    const std::size_t c = std::min(kMaxCount, buf.size() - done);
    MPI_Request req = MPI_REQUEST_NULL;
    check_mpi(
        MPI_Ibcast(buf.data() + done, static_cast<int>(c), MPI_FLOAT, root, comm.handle(), &req),
        "MPI_Ibcast", comm.handle());
    watchdog::watched_wait(&req, 1, comm, "MPI_Bcast");
  }
}

void exchange(const Communicator& comm, int partner, std::span<const float> mine,
              std::span<float> theirs) {
  sendrecv(comm, partner, kTagExchange, mine.data(), mine.size(), theirs.data(), theirs.size());
}

// The vendor float reductions stay blocking: coll/tuned's algorithm is what their bits are
// pinned to (the MPI_I* forms run other algorithms, e.g. at np 3 MPI_Iallreduce of 10000
// floats differs from MPI_Allreduce in ~5% of the elements). A watched arrival gate in front
// catches a rank that never comes (runtime/watchdog.hpp).
void vendor_allreduce(const Communicator& comm, std::span<float> buf) {
  watchdog::arrival_gate(comm, "MPI_Allreduce");
  for (std::size_t done = 0; done < buf.size(); done += kMaxCount) {
    const std::size_t c = std::min(kMaxCount, buf.size() - done);
    check_mpi(MPI_Allreduce(MPI_IN_PLACE, buf.data() + done, static_cast<int>(c), MPI_FLOAT,
                            MPI_SUM, comm.handle()),
              "MPI_Allreduce", comm.handle());
  }
}

void vendor_reduce_scatter(const Communicator& comm, std::span<const float> send,
                           std::span<float> recv) {
  check(send.size() == recv.size() * static_cast<std::size_t>(comm.size()),
        "vendor_reduce_scatter on " + comm.describe() + ": send has " +
            std::to_string(send.size()) + " elements, expected " + std::to_string(comm.size()) +
            " x " + std::to_string(recv.size()),
        "send must hold one equal segment per rank");
  watchdog::arrival_gate(comm, "MPI_Reduce_scatter_block");
  check_mpi(MPI_Reduce_scatter_block(send.data(), recv.data(),
                                     as_count(recv.size(), comm, "reduce-scatter segment"),
                                     MPI_FLOAT, MPI_SUM, comm.handle()),
            "MPI_Reduce_scatter_block", comm.handle());
}

void allreduce_sum(Determinism mode, const Communicator& comm, std::span<float> buf,
                   const TreeOptions& options) {
  switch (mode) {
    case Determinism::invariant:
      tree_allreduce(comm, buf, TreeAlgorithm::automatic, options);
      return;
    case Determinism::deterministic:  // Open MPI pins the algorithm by size and rank count
    case Determinism::fast:
      vendor_allreduce(comm, buf);
      return;
  }
}

void reduce_scatter_sum(Determinism mode, const Communicator& comm, std::span<const float> send,
                        std::span<float> recv, const TreeOptions& options) {
  switch (mode) {
    case Determinism::invariant:
      tree_reduce_scatter(comm, send, recv, options);
      return;
    case Determinism::deterministic:
    case Determinism::fast:
      vendor_reduce_scatter(comm, send, recv);
      return;
  }
}

void allreduce_u64(const Communicator& comm, std::span<std::uint64_t> buf, IntOp op) {
  const MPI_Op mop = op == IntOp::sum   ? MPI_SUM
                     : op == IntOp::max ? MPI_MAX
                     : op == IntOp::min ? MPI_MIN
                                        : MPI_BXOR;
  for (std::size_t done = 0; done < buf.size(); done += kMaxCount) {
    const std::size_t c = std::min(kMaxCount, buf.size() - done);
    MPI_Request req = MPI_REQUEST_NULL;  // integers: exact in any order, nonblocking is safe
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf.data() + done, static_cast<int>(c), MPI_UINT64_T,
                             mop, comm.handle(), &req),
              "MPI_Iallreduce(MPI_UINT64_T)", comm.handle());
    watchdog::watched_wait(&req, 1, comm, "MPI_Allreduce(MPI_UINT64_T)");
  }
}

std::uint64_t allreduce_u64(const Communicator& comm, std::uint64_t value, IntOp op) {
  allreduce_u64(comm, std::span<std::uint64_t>(&value, 1), op);
  return value;
}

BitDiff bit_diff(std::span<const float> a, std::span<const float> b) {
  check(a.size() == b.size(),
        "bit_diff of arrays of different lengths " + std::to_string(a.size()) + " and " +
            std::to_string(b.size()),
        "compare buffers of equal length");
  auto ordered = [](float f) {  // monotone map of float bits onto integers; +-0 -> 0
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return (u & 0x80000000u) ? -static_cast<std::int64_t>(u & 0x7fffffffu)
                             : static_cast<std::int64_t>(u);
  };
  BitDiff d;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], 4) == 0) continue;
    if (d.first < 0) d.first = static_cast<std::int64_t>(i);
    ++d.differing;
    const std::int64_t x = ordered(a[i]), y = ordered(b[i]);
    d.max_ulp = std::max(d.max_ulp, static_cast<std::uint64_t>(x > y ? x - y : y - x));
  }
  return d;
}

bool identical_across_ranks(const Communicator& comm, std::span<const float> buf) {
  std::uint64_t len = buf.size();
  const bool same_len =
      allreduce_u64(comm, len, IntOp::max) == len && allreduce_u64(comm, len, IntOp::min) == len;
  if (!same_len) return false;
  std::vector<float> root(buf.begin(), buf.end());
  broadcast(comm, root, 0);
  const std::uint64_t same =
      buf.empty() || std::memcmp(root.data(), buf.data(), buf.size() * sizeof(float)) == 0;
  return allreduce_u64(comm, same, IntOp::min) == 1;
}

}  // namespace lockstep
