// load(): plan every read (validating names, shapes and shard headers before touching a
// destination byte), then execute it shard by shard (O_DIRECT reads pipelined with the chunk
// hash checks and the copies), then compare the fingerprints summed over the job with
// meta.json.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/direct_io.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep::ckpt {
namespace {

namespace fs = std::filesystem;

// Size of the pieces read_pipelined hands over (rounded down to whole chunks): one O_DIRECT
// read each. 2 MiB read faster than 8 or 32 MiB on the test disk (QD1 reads: a smaller
// request finishes sooner, so the next one is issued sooner) and still gives each OpenMP
// thread a 1 MiB chunk to hash.
constexpr std::uint64_t kReadPieceBytes = std::uint64_t{2} << 20;

struct Run {
  std::int64_t logical, local, len;
};

std::vector<Run> runs_of(const StatePiece& g) {
  std::vector<Run> out;
  for_each_run(g, [&](std::int64_t logical, std::int64_t local, std::int64_t len) {
    if (!out.empty() && out.back().logical + out.back().len == logical &&
        out.back().local + out.back().len == local)
      out.back().len += len;
    else
      out.push_back({logical, local, len});
  });
  return out;
}

// A copy of `len` floats: shard element `src` -> piece element `dst` (logical index
// `logical`).
struct Segment {
  std::int64_t dst, src, len, logical;
};

// Intersection of two run lists sorted by logical index, coalesced where both sides and the
// logical index stay contiguous.
std::vector<Segment> intersect(const std::vector<Run>& piece, const std::vector<Run>& shard) {
  std::vector<Segment> out;
  std::size_t i = 0, j = 0;
  while (i < piece.size() && j < shard.size()) {
    const Run& a = piece[i];
    const Run& b = shard[j];
    const std::int64_t lo = std::max(a.logical, b.logical);
    const std::int64_t hi = std::min(a.logical + a.len, b.logical + b.len);
    if (lo < hi) {
      const Segment s{a.local + (lo - a.logical), b.local + (lo - b.logical), hi - lo, lo};
      if (!out.empty() && out.back().dst + out.back().len == s.dst &&
          out.back().src + out.back().len == s.src &&
          out.back().logical + out.back().len == s.logical)
        out.back().len += s.len;
      else
        out.push_back(s);
    }
    if (a.logical + a.len <= b.logical + b.len)
      ++i;
    else
      ++j;
  }
  return out;
}

struct Target {
  const StatePiece* piece;
  std::size_t index;  // of the piece in read_pieces' list
  std::vector<Segment> segments;
};

struct ShardPlan {
  const TensorRecord* tensor;
  const ShardRecord* shard;
  const StEntry* entry;
  std::vector<Target> targets;
};

std::string shard_where(const std::string& path, const TensorRecord& t, const ShardRecord& s) {
  return "checkpoint shard '" + path + "' (tensor '" + t.name + "', key '" + s.key + "')";
}

}  // namespace

namespace {

// read_pieces(); with `fps` (one per piece), also the fingerprints of the owner pieces,
// computed on each copied range right after its copy (cache-hot, overlapping the reads)
// where every element of the piece is written exactly once by the copies, else afterwards
// from the piece's memory.
void read_pieces_impl(const std::string& ckpt_dir, const Meta& meta,
                      const std::vector<const StatePiece*>& pieces,
                      std::vector<std::uint64_t>* fps) {
  // ---- phase 1: plan and validate (no destination byte is written) ----
  for (const StatePiece* p : pieces) {
    auto it = meta.tensors.find(p->name);
    check(it != meta.tensors.end(),
          "tensor '" + p->name + "' is not in checkpoint '" + ckpt_dir + "'",
          "the model or optimizer differs from the one that saved it");
    check(it->second.global_shape == p->global_shape,
          "tensor '" + p->name + "' has shape " + shape_str(p->global_shape) + " here but " +
              shape_str(it->second.global_shape) + " in checkpoint '" + ckpt_dir + "'",
          "the model configuration differs from the one that saved the checkpoint");
    check_piece(*p);
  }
  std::map<std::string, StHeader> headers;
  std::vector<ShardPlan> plans;
  std::map<const ShardRecord*, std::size_t> plan_of;
  std::vector<std::int64_t> covered(pieces.size(), 0);  // elements written, per piece
  for (std::size_t pi = 0; pi < pieces.size(); ++pi) {
    const StatePiece* p = pieces[pi];
    if (p->size() == 0) continue;
    const TensorRecord& t = meta.tensors.at(p->name);
    const std::vector<Run> pruns = runs_of(*p);
    const std::int64_t plo = pruns.front().logical;
    const std::int64_t phi = pruns.back().logical + pruns.back().len;
    for (const ShardRecord& s : t.shards) {
      if (s.size() == 0) continue;
      const std::vector<Run> sruns = runs_of(shard_geometry(t, s));
      if (sruns.back().logical + sruns.back().len <= plo || sruns.front().logical >= phi) continue;
      std::vector<Segment> segs = intersect(pruns, sruns);
      if (segs.empty()) continue;
      auto [pit, fresh] = plan_of.emplace(&s, plans.size());
      if (fresh) {
        const std::string path = (fs::path(ckpt_dir) / s.file).string();
        auto h = headers.find(s.file);
        if (h == headers.end()) {
          try {
            h = headers.emplace(s.file, read_safetensors_header(path)).first;
          } catch (const Error& e) {
            fail(shard_where(path, t, s) + ": " + e.what());
          }
        }
        const StEntry* e = h->second.find(s.key);
        check(e != nullptr, shard_where(path, t, s) + ": the key is not in the file",
              "the shard file does not belong to this meta.json");
        check(e->dtype == DType::f32 && e->bytes() == static_cast<std::uint64_t>(s.size()) * 4,
              shard_where(path, t, s) + ": the file holds " + dtype_name(e->dtype) + " " +
                  shape_str(e->shape) + " but meta.json expects " + std::to_string(s.size()) +
                  " F32 elements",
              "the shard file does not belong to this meta.json");
        plans.push_back({&t, &s, e, {}});
      }
      for (const Segment& g : segs) covered[pi] += g.len;
      plans[pit->second].targets.push_back({p, pi, std::move(segs)});
    }
  }
  // ---- phase 2: read, hash-check, scatter (file by file, in file order) ----
  // Each shard's needed bytes (all of them, or the chunks its targets touch) are read by
  // read_pipelined's helper thread (O_DIRECT, a few pieces ahead) while this thread checks
  // every chunk's XXH3-64 against meta.json and only then copies the chunk's bytes into the
  // pieces (chunks of a piece in parallel on the OpenMP threads). The chunk hashes cover
  // every byte read, so no byte reaches a destination unchecked.
  std::sort(plans.begin(), plans.end(), [](const ShardPlan& a, const ShardPlan& b) {
    return a.shard->file != b.shard->file ? a.shard->file < b.shard->file
                                          : a.entry->begin < b.entry->begin;
  });
  const std::uint64_t cb = meta.chunk_bytes;
  check(cb > 0, "checkpoint '" + ckpt_dir + "': chunk_bytes is 0", "meta.json is damaged");
  const std::uint64_t piece_bytes = std::max<std::uint64_t>(1, kReadPieceBytes / cb) * cb;
  // Fingerprint while copying: owner pieces written exactly once (the shards partition the
  // tensor, so covered == size means no gap and no overlap), whole elements per chunk.
  std::vector<char> fused(pieces.size(), 0);
  if (fps) {
    fps->assign(pieces.size(), 0);
    for (std::size_t pi = 0; pi < pieces.size(); ++pi)
      fused[pi] = pieces[pi]->owner && covered[pi] == pieces[pi]->size() && cb % 4 == 0;
  }
  // A byte copy: shard bytes [src, src + len) -> dst; fingerprinted into (*fps)[fp] unless
  // fp == npos, the first element having logical index `logical`.
  constexpr std::size_t npos = ~std::size_t{0};
  struct Copy {
    char* dst;
    std::uint64_t src, len, logical;
    std::size_t fp;
    const std::string* name;
  };
  struct Job {
    const ShardPlan* plan;
    std::uint64_t rb, re;            // byte range of the shard read (chunk-aligned start)
    std::vector<Copy> copies;        // sorted by src
    std::vector<std::uint64_t> end;  // running max of copies[i].src + len (monotone)
  };
  for (std::size_t first = 0; first < plans.size();) {
    const std::string& name = plans[first].shard->file;
    std::size_t last = first;
    while (last < plans.size() && plans[last].shard->file == name) ++last;
    const std::string path = (fs::path(ckpt_dir) / name).string();
    const StHeader& header = headers.at(name);
    check(File(path, "r").size() == header.file_size,
          "checkpoint shard '" + path + "' changed size while loading");
    std::vector<Job> jobs;
    std::vector<ReadRange> ranges;
    for (std::size_t k = first; k < last; ++k) {
      const ShardPlan& plan = plans[k];
      const ShardRecord& s = *plan.shard;
      const std::uint64_t bytes = static_cast<std::uint64_t>(s.size()) * 4;
      Job job{&plan, 0, bytes, {}, {}};
      std::uint64_t lo = bytes, hi = 0;
      for (const Target& t : plan.targets)
        for (const Segment& g : t.segments) {
          const auto src = static_cast<std::uint64_t>(g.src) * 4;
          const auto len = static_cast<std::uint64_t>(g.len) * 4;
          job.copies.push_back({reinterpret_cast<char*>(t.piece->data + g.dst), src, len,
                                static_cast<std::uint64_t>(g.logical),
                                fused[t.index] ? t.index : npos, &t.piece->name});
          lo = std::min(lo, src);
          hi = std::max(hi, src + len);
        }
      job.rb = lo / cb * cb;
      job.re = std::min(bytes, (hi + cb - 1) / cb * cb);
      std::sort(job.copies.begin(), job.copies.end(),
                [](const Copy& a, const Copy& b) { return a.src < b.src; });
      std::uint64_t run = 0;
      for (const Copy& c : job.copies) job.end.push_back(run = std::max(run, c.src + c.len));
      ranges.push_back({header.data_start + plan.entry->begin + job.rb, job.re - job.rb});
      jobs.push_back(std::move(job));
    }
    read_pipelined(
        path, ranges, piece_bytes,
        [&](std::size_t r, std::uint64_t at, const char* data, std::uint64_t n) {
          const Job& job = jobs[r];
          const ShardRecord& s = *job.plan->shard;
          const std::uint64_t bytes = static_cast<std::uint64_t>(s.size()) * 4;
          const std::uint64_t b0 = job.rb + at;  // shard byte of data[0], chunk-aligned
          const auto nchunks = static_cast<std::int64_t>((n + cb - 1) / cb);
          std::int64_t bad = nchunks;  // lowest failing chunk of this piece
          std::uint64_t bad_hash = 0;
#pragma omp parallel for schedule(static, 1)
          for (std::int64_t k = 0; k < nchunks; ++k) {
            const std::uint64_t c0 = b0 + static_cast<std::uint64_t>(k) * cb;
            const std::uint64_t c1 = std::min({c0 + cb, bytes, b0 + n});
            const char* src = data + (c0 - b0);
            const std::uint64_t h = xxh3_64(src, c1 - c0);
            if (h != s.chunks[c0 / cb]) {
#pragma omp critical(lockstep_ckpt_load_bad)
              if (k < bad) {
                bad = k;
                bad_hash = h;
              }
              continue;
            }
            // Copies overlapping [c0, c1): from the first whose running end passes c0, up to the
            // first starting at or after c1.
            auto i = static_cast<std::size_t>(
                std::partition_point(job.end.begin(), job.end.end(),
                                     [&](std::uint64_t e) { return e <= c0; }) -
                job.end.begin());
            for (; i < job.copies.size() && job.copies[i].src < c1; ++i) {
              const Copy& cp = job.copies[i];
              const std::uint64_t x0 = std::max(c0, cp.src), x1 = std::min(c1, cp.src + cp.len);
              if (x0 >= x1) continue;
              std::memcpy(cp.dst + (x0 - cp.src), src + (x0 - c0), x1 - x0);
              if (cp.fp == npos) continue;
              const std::uint64_t f = fingerprint_range(
                  *cp.name,
                  std::span<const float>(reinterpret_cast<const float*>(cp.dst + (x0 - cp.src)),
                                         static_cast<std::size_t>((x1 - x0) / 4)),
                  cp.logical + (x0 - cp.src) / 4, meta.fingerprint_version);
#pragma omp atomic
              (*fps)[cp.fp] += f;
            }
          }
          if (bad < nchunks) {
            const std::uint64_t c0 = b0 + static_cast<std::uint64_t>(bad) * cb;
            const std::uint64_t c1 = std::min({c0 + cb, bytes, b0 + n});
            fail(shard_where(path, *job.plan->tensor, s) + ": XXH3-64 of bytes [" +
                     std::to_string(c0) + ", " + std::to_string(c1) + ") is " + hex64(bad_hash) +
                     " but meta.json says " + hex64(s.chunks[c0 / cb]),
                 "the shard file is corrupted; restore it or resume from another checkpoint");
          }
        });
    first = last;
  }
  if (fps) {
    const auto n = static_cast<std::int64_t>(pieces.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t k = 0; k < n; ++k) {
      const auto i = static_cast<std::size_t>(k);
      if (pieces[i]->owner && !fused[i])
        (*fps)[i] = fingerprint(*pieces[i], meta.fingerprint_version);
    }
  }
}

}  // namespace

void read_pieces(const std::string& ckpt_dir, const Meta& meta,
                 const std::vector<const StatePiece*>& pieces) {
  read_pieces_impl(ckpt_dir, meta, pieces, nullptr);
}

void load(const Communicator& world, const std::string& ckpt_dir, const Meta& meta,
          const std::vector<StatePiece>& pieces, const std::vector<std::string>& only) {
  auto wanted = [&](const std::string& name) {
    if (only.empty()) return true;
    for (const std::string& p : only)
      if (name.rfind(p, 0) == 0) return true;
    return false;
  };
  std::vector<const StatePiece*> mine;
  for (const StatePiece& p : pieces)
    if (wanted(p.name)) mine.push_back(&p);
  // Per-piece fingerprints (0 for non-owners), computed while loading (see read_pieces_impl);
  // the sums are mod 2^64, so the result does not depend on the thread count or order.
  std::vector<std::uint64_t> piece_fp;
  read_pieces_impl(ckpt_dir, meta, mine, &piece_fp);
  // Fingerprints of the owner pieces, summed over the job, per meta tensor (same order on
  // every rank: meta.json is the same file), plus owner element counts.
  std::vector<std::string> names;
  for (const auto& [name, t] : meta.tensors)
    if (wanted(name)) names.push_back(name);
  std::vector<std::uint64_t> sums(2 * names.size(), 0);
  for (std::size_t k = 0; k < mine.size(); ++k) {
    const StatePiece* p = mine[k];
    if (!p->owner) continue;
    const auto i = static_cast<std::size_t>(std::lower_bound(names.begin(), names.end(), p->name) -
                                            names.begin());
    sums[i] += piece_fp[k];
    sums[names.size() + i] += static_cast<std::uint64_t>(p->size());
  }
  allreduce_u64(world, sums, IntOp::sum);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const TensorRecord& t = meta.tensors.at(names[i]);
    const std::uint64_t count = sums[names.size() + i];
    if (count == 0) continue;  // not part of this job's state (e.g. only={"param/"})
    check(count == static_cast<std::uint64_t>(shape_numel(t.global_shape)),
          "after loading '" + ckpt_dir + "': the owner pieces of tensor '" + t.name + "' hold " +
              std::to_string(count) + " elements, the tensor has " +
              std::to_string(shape_numel(t.global_shape)),
          "every element needs exactly one owner (a bug in the producer of the state pieces)");
    check(sums[i] == t.fingerprint,
          "after loading '" + ckpt_dir + "': fingerprint of tensor '" + t.name + "' is " +
              hex64(sums[i]) + " but meta.json says " + hex64(t.fingerprint),
          "the checkpoint's data does not match its metadata (corrupted or forged meta.json)");
  }
}

}  // namespace lockstep::ckpt
