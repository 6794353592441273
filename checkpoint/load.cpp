// load(): plan every read (validating names, shapes and shard headers before touching a
// destination byte), then execute it shard by shard with hash checks, then compare the
// fingerprints summed over the job with meta.json.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep::ckpt {
namespace {

namespace fs = std::filesystem;

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

// A copy of `len` floats: shard element `src` -> piece element `dst`.
struct Segment {
  std::int64_t dst, src, len;
};

// Intersection of two run lists sorted by logical index, coalesced where both sides stay
// contiguous.
std::vector<Segment> intersect(const std::vector<Run>& piece, const std::vector<Run>& shard) {
  std::vector<Segment> out;
  std::size_t i = 0, j = 0;
  while (i < piece.size() && j < shard.size()) {
    const Run& a = piece[i];
    const Run& b = shard[j];
    const std::int64_t lo = std::max(a.logical, b.logical);
    const std::int64_t hi = std::min(a.logical + a.len, b.logical + b.len);
    if (lo < hi) {
      const Segment s{a.local + (lo - a.logical), b.local + (lo - b.logical), hi - lo};
      if (!out.empty() && out.back().dst + out.back().len == s.dst &&
          out.back().src + out.back().len == s.src)
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

void read_pieces(const std::string& ckpt_dir, const Meta& meta,
                 const std::vector<const StatePiece*>& pieces) {
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
  for (const StatePiece* p : pieces) {
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
      plans[pit->second].targets.push_back({p, std::move(segs)});
    }
  }
  // ---- phase 2: read, hash-check, scatter (file by file, in file order) ----
  std::sort(plans.begin(), plans.end(), [](const ShardPlan& a, const ShardPlan& b) {
    return a.shard->file != b.shard->file ? a.shard->file < b.shard->file
                                          : a.entry->begin < b.entry->begin;
  });
  std::vector<char> staging;
  std::string open_name;
  std::unique_ptr<File> file;
  for (const ShardPlan& plan : plans) {
    const ShardRecord& s = *plan.shard;
    const std::string path = (fs::path(ckpt_dir) / s.file).string();
    if (open_name != s.file) {
      file = std::make_unique<File>(path, "r");
      open_name = s.file;
      check(file->size() == headers.at(s.file).file_size,
            "checkpoint shard '" + path + "' changed size while loading");
    }
    const std::uint64_t base = headers.at(s.file).data_start + plan.entry->begin;
    const std::uint64_t bytes = static_cast<std::uint64_t>(s.size()) * 4;
    auto mismatch = [&](std::uint64_t b, std::uint64_t e, std::uint64_t got, std::uint64_t want) {
      fail(shard_where(path, *plan.tensor, s) + ": XXH3-64 of bytes [" + std::to_string(b) + ", " +
               std::to_string(e) + ") is " + hex64(got) + " but meta.json says " + hex64(want),
           "the shard file is corrupted; restore it or resume from another checkpoint");
    };
    std::int64_t lo = s.size(), hi = 0, covered = 0;
    for (const Target& t : plan.targets)
      for (const Segment& g : t.segments) {
        lo = std::min(lo, g.src);
        hi = std::max(hi, g.src + g.len);
        covered += g.len;
      }
    // Whole shard onto one contiguous destination range: read straight into it.
    if (plan.targets.size() == 1 && plan.targets[0].segments.size() == 1 &&
        plan.targets[0].segments[0].len == s.size()) {
      float* dst = plan.targets[0].piece->data + plan.targets[0].segments[0].dst;
      file->pread_all(dst, bytes, base);
      const std::uint64_t h = xxh3_64(dst, bytes);
      if (h != s.hash) mismatch(0, bytes, h, s.hash);
      continue;
    }
    std::uint64_t rb = 0, re = bytes;  // byte range read into staging
    if (!(lo == 0 && hi == s.size())) {
      rb = static_cast<std::uint64_t>(lo) * 4 / meta.chunk_bytes * meta.chunk_bytes;
      re = std::min(bytes, (static_cast<std::uint64_t>(hi) * 4 + meta.chunk_bytes - 1) /
                               meta.chunk_bytes * meta.chunk_bytes);
    }
    staging.resize(re - rb);
    file->pread_all(staging.data(), re - rb, base + rb);
    if (rb == 0 && re == bytes) {
      const std::uint64_t h = xxh3_64(staging.data(), bytes);
      if (h != s.hash) mismatch(0, bytes, h, s.hash);
    } else {
      for (std::uint64_t c = rb; c < re; c += meta.chunk_bytes) {
        const std::uint64_t n = std::min(meta.chunk_bytes, re - c);
        const std::uint64_t h = xxh3_64(staging.data() + (c - rb), n);
        const std::uint64_t want = s.chunks[c / meta.chunk_bytes];
        if (h != want) mismatch(c, c + n, h, want);
      }
    }
    const float* src = reinterpret_cast<const float*>(staging.data()) - rb / 4;
    for (const Target& t : plan.targets)
      for (const Segment& g : t.segments)
        std::memcpy(t.piece->data + g.dst, src + g.src, static_cast<std::size_t>(g.len) * 4);
    (void)covered;
  }
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
  read_pieces(ckpt_dir, meta, mine);
  // Fingerprints of the owner pieces, summed over the job, per meta tensor (same order on
  // every rank: meta.json is the same file), plus owner element counts.
  std::vector<std::string> names;
  for (const auto& [name, t] : meta.tensors)
    if (wanted(name)) names.push_back(name);
  // Per-piece fingerprints on the OpenMP threads (they dominate the CPU cost of a load);
  // the sums are mod 2^64, so the result does not depend on the thread count or order.
  std::vector<std::uint64_t> piece_fp(mine.size(), 0);
  const auto npieces = static_cast<std::int64_t>(mine.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t k = 0; k < npieces; ++k)
    if (mine[static_cast<std::size_t>(k)]->owner)
      piece_fp[static_cast<std::size_t>(k)] = fingerprint(*mine[static_cast<std::size_t>(k)]);
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
