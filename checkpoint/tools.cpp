// verify_checkpoint() and export_tensors(): the library side of `lockstep ckpt verify` and
// `lockstep ckpt export`, usable without MPI.
#include <filesystem>
#include <map>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/file_io.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep::ckpt {
namespace {
namespace fs = std::filesystem;
}

std::vector<std::string> verify_checkpoint(const std::string& ckpt_dir, const Meta& meta,
                                           VerifyStats* stats) {
  std::vector<std::string> problems;
  std::map<std::string, std::pair<bool, StHeader>> headers;  // ok?, header
  VerifyStats st;
  std::vector<float> buf;
  for (const auto& [name, t] : meta.tensors) {
    ++st.tensors;
    std::uint64_t fp = 0;
    bool all_read = true;
    for (const ShardRecord& s : t.shards) {
      ++st.shards;
      const std::string path = (fs::path(ckpt_dir) / s.file).string();
      try {
        auto h = headers.find(s.file);
        if (h == headers.end()) {
          try {
            h = headers.emplace(s.file, std::make_pair(true, read_safetensors_header(path))).first;
          } catch (const Error& e) {
            headers.emplace(s.file, std::make_pair(false, StHeader{}));
            throw;
          }
        }
        check(h->second.first, "checkpoint shard '" + path + "' is unreadable (reported above)");
        const StEntry* e = h->second.second.find(s.key);
        check(e != nullptr, "checkpoint shard '" + path + "' (tensor '" + name + "'): key '" +
                                s.key + "' is not in the file");
        const std::uint64_t bytes = static_cast<std::uint64_t>(s.size()) * 4;
        check(e->dtype == DType::f32 && e->bytes() == bytes,
              "checkpoint shard '" + path + "' (tensor '" + name + "'): the file holds " +
                  dtype_name(e->dtype) + " " + shape_str(e->shape) + ", meta.json expects " +
                  std::to_string(s.size()) + " F32 elements");
        buf.resize(static_cast<std::size_t>(s.size()));
        File f(path, "r");
        f.pread_all(buf.data(), bytes, h->second.second.data_start + e->begin);
        st.bytes += static_cast<std::int64_t>(bytes);
        std::uint64_t hash = 0;
        const std::vector<std::uint64_t> chunks =
            chunk_hashes(buf.data(), bytes, meta.chunk_bytes, &hash);
        check(hash == s.hash, "checkpoint shard '" + path + "' (tensor '" + name +
                                  "'): XXH3-64 is " + hex64(hash) + ", meta.json says " +
                                  hex64(s.hash));
        check(chunks == s.chunks, "checkpoint shard '" + path + "' (tensor '" + name +
                                      "'): chunk hashes differ from meta.json");
        StatePiece g;
        g.name = name;
        g.global_shape = t.global_shape;
        g.box_offset = s.box_offset;
        g.box_shape = s.box_shape;
        g.flat_begin = s.flat_begin;
        g.flat_end = s.flat_end;
        g.data = buf.data();
        fp += fingerprint(g, meta.fingerprint_version);
      } catch (const Error& e) {
        const std::string msg = e.what();
        problems.push_back(msg.find("tensor '" + name + "'") == std::string::npos
                               ? "tensor '" + name + "': " + msg
                               : msg);
        all_read = false;
      }
    }
    if (all_read && fp != t.fingerprint)
      problems.push_back("tensor '" + name + "': fingerprint recomputed from the shards is " +
                         hex64(fp) + ", meta.json says " + hex64(t.fingerprint));
  }
  st.files = static_cast<std::int64_t>(headers.size());
  if (stats) *stats = st;
  return problems;
}

std::int64_t export_tensors(const std::string& ckpt_dir, const Meta& meta,
                            const std::string& out_file, const std::string& prefix) {
  std::vector<std::vector<float>> data;
  std::vector<StatePiece> pieces;
  for (const auto& [name, t] : meta.tensors) {
    if (name.rfind(prefix, 0) != 0) continue;
    data.emplace_back(static_cast<std::size_t>(shape_numel(t.global_shape)));
    StatePiece p;
    p.name = name;
    p.global_shape = t.global_shape;
    p.box_offset = Shape(t.global_shape.size(), 0);
    p.box_shape = t.global_shape;
    p.flat_end = shape_numel(t.global_shape);
    p.data = data.back().data();
    pieces.push_back(std::move(p));
  }
  check(!pieces.empty(), "checkpoint '" + ckpt_dir + "' has no tensor named '" + prefix + "*'",
        "nothing to export");
  std::vector<const StatePiece*> ptrs;
  for (const StatePiece& p : pieces) ptrs.push_back(&p);
  read_pieces(ckpt_dir, meta, ptrs);
  std::vector<StTensor> out;
  for (const StatePiece& p : pieces) {
    const std::uint64_t fp = fingerprint(p, meta.fingerprint_version);
    check(fp == meta.tensors.at(p.name).fingerprint,
          "checkpoint '" + ckpt_dir + "', tensor '" + p.name + "': fingerprint " + hex64(fp) +
              " differs from meta.json's " + hex64(meta.tensors.at(p.name).fingerprint));
    out.push_back({p.name.substr(prefix.size()), DType::f32, p.global_shape, p.data,
                   static_cast<std::uint64_t>(p.size()) * 4});
  }
  write_safetensors(out_file, out);
  return static_cast<std::int64_t>(out.size());
}

}  // namespace lockstep::ckpt
