#include "checkpoint/meta.hpp"

#include <algorithm>
#include <filesystem>

#include "checkpoint/file_io.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"
#include "runtime/state_piece.hpp"

namespace lockstep::ckpt {
namespace {

using json = nlohmann::json;

constexpr std::int64_t kMaxDim = std::int64_t{1} << 48;
constexpr std::int64_t kMaxRuns = std::int64_t{1} << 24;
const char* kHint = "meta.json is damaged or was not written by this version of Lockstep";

std::string where(const std::string& file, const std::string& tensor) {
  return "checkpoint metadata '" + file + "'" +
         (tensor.empty() ? "" : ", tensor '" + tensor + "'") + ": ";
}

const json& field(const json& obj, const char* key, const std::string& at) {
  check(obj.is_object() && obj.contains(key), at + "missing field '" + key + "'", kHint);
  return obj[key];
}

std::int64_t get_int(const json& v, const std::string& at, const char* what, std::int64_t lo,
                     std::int64_t hi) {
  check(v.is_number_integer(), at + what + " is " + v.dump() + ", not an integer", kHint);
  if (v.is_number_unsigned())
    check(v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi),
          at + what + " = " + v.dump() + " is out of range", kHint);
  const std::int64_t x = v.get<std::int64_t>();
  check(x >= lo && x <= hi, at + what + " = " + v.dump() + " is out of range", kHint);
  return x;
}

std::uint64_t get_hex(const json& v, const std::string& at, const char* what) {
  check(v.is_string() && v.get<std::string>().size() == 16,
        at + what + " is " + v.dump() + ", not 16 hex digits", kHint);
  std::uint64_t x = 0;
  for (char c : v.get<std::string>()) {
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    check(d >= 0, at + what + " is " + v.dump() + ", not 16 lowercase hex digits", kHint);
    x = (x << 4) | static_cast<std::uint64_t>(d);
  }
  return x;
}

Shape get_shape(const json& v, const std::string& at, const char* what) {
  check(v.is_array() && v.size() <= 8, at + what + " is not an array of at most 8 dims", kHint);
  Shape s;
  std::int64_t numel = 1;
  for (const json& d : v) {
    const std::int64_t n = get_int(d, at, what, 0, kMaxDim);
    check(n == 0 || numel <= kMaxDim / n, at + what + " " + v.dump() + " has too many elements",
          kHint);
    numel *= n;
    s.push_back(n);
  }
  return s;
}

bool safe_file_name(const std::string& f) {
  return !f.empty() && f.size() <= 255 && f.find('/') == std::string::npos &&
         f.find('\\') == std::string::npos && f.find("..") == std::string::npos &&
         f.find('\0') == std::string::npos && f != ".";
}

// Every logical element of `t` must be held by exactly one shard.
void check_coverage(const TensorRecord& t, const std::string& file) {
  const std::string at = where(file, t.name);
  std::int64_t runs_estimate = 0;
  for (const ShardRecord& s : t.shards) {
    const std::int64_t row = s.box_shape.empty() ? 1 : s.box_shape.back();
    if (s.size() == 0) continue;
    runs_estimate += s.size() / std::max<std::int64_t>(row, 1) + 2;
    check(
        runs_estimate <= kMaxRuns,
        at + "shards are too fragmented to check (more than " + std::to_string(kMaxRuns) + " rows)",
        kHint);
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;  // [logical begin, end)
  runs.reserve(static_cast<std::size_t>(runs_estimate));
  for (const ShardRecord& s : t.shards) {
    const StatePiece g = shard_geometry(t, s);
    for_each_run(g, [&](std::int64_t logical, std::int64_t, std::int64_t len) {
      if (!runs.empty() && runs.back().second == logical)
        runs.back().second += len;
      else
        runs.emplace_back(logical, logical + len);
    });
  }
  std::sort(runs.begin(), runs.end());
  std::int64_t next = 0;
  for (const auto& [b, e] : runs) {
    check(b >= next, at + "shards overlap at logical element " + std::to_string(b), kHint);
    check(b == next, at + "no shard holds logical element " + std::to_string(next), kHint);
    next = e;
  }
  check(next == shape_numel(t.global_shape),
        at + "no shard holds logical element " + std::to_string(next) + " (of " +
            std::to_string(shape_numel(t.global_shape)) + ")",
        kHint);
}

}  // namespace

std::int64_t Meta::total_bytes() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : tensors)
    n += shape_numel(t.global_shape) * static_cast<std::int64_t>(dtype_size(t.dtype));
  return n;
}

StatePiece shard_geometry(const TensorRecord& t, const ShardRecord& s) {
  StatePiece g;
  g.name = t.name;
  g.global_shape = t.global_shape;
  g.box_offset = s.box_offset;
  g.box_shape = s.box_shape;
  g.flat_begin = s.flat_begin;
  g.flat_end = s.flat_end;
  return g;
}

std::vector<std::uint64_t> chunk_hashes(const void* data, std::uint64_t bytes,
                                        std::uint64_t chunk_bytes, std::uint64_t* whole,
                                        const ChunkSink& emit) {
  std::vector<std::uint64_t> out;
  out.reserve(static_cast<std::size_t>((bytes + chunk_bytes - 1) / chunk_bytes));
  const char* p = static_cast<const char*>(data);
  Xxh3Stream all;
  for (std::uint64_t off = 0; off < bytes; off += chunk_bytes) {
    const std::uint64_t n = std::min(chunk_bytes, bytes - off);
    out.push_back(xxh3_64(p + off, n));
    if (whole) all.update(p + off, n);
    if (emit) emit(p + off, n);
  }
  if (whole) *whole = all.digest();
  return out;
}

Meta parse_meta(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(where(file, "") + "not valid JSON: " + e.what(), kHint);
  }
  const std::string at = where(file, "");
  check(j.is_object(), at + "not a JSON object", kHint);
  Meta m;
  const json& fmt = field(j, "format", at);
  check(fmt.is_string() && fmt.get<std::string>() == kFormatName,
        at + "format is " + fmt.dump() + ", not \"" + kFormatName + "\"", kHint);
  m.format_version =
      static_cast<int>(get_int(field(j, "format_version", at), at, "format_version", 0, 1 << 30));
  check(m.format_version == 1 || m.format_version == 2,
        at + "format_version " + std::to_string(m.format_version) +
            " is not supported (this build reads 1 and 2)",
        "load it with the Lockstep version that wrote it");
  m.fingerprint_version = m.format_version == 1
                              ? FpVersion::v1
                              : fp_version_from_int(get_int(field(j, "fingerprint_version", at), at,
                                                            "fingerprint_version", 1, 1 << 30),
                                                    at + "fingerprint_version");
  m.step = get_int(field(j, "step", at), at, "step", 0, kMaxDim);
  m.chunk_bytes = static_cast<std::uint64_t>(
      get_int(field(j, "chunk_bytes", at), at, "chunk_bytes", 4, std::int64_t{1} << 40));
  check(m.chunk_bytes % 4 == 0, at + "chunk_bytes is not a multiple of 4", kHint);
  m.run = field(j, "run", at);
  const json& tensors = field(j, "tensors", at);
  check(tensors.is_object(), at + "tensors is not an object", kHint);
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    TensorRecord t;
    t.name = it.key();
    const std::string tat = where(file, t.name);
    const json& tj = it.value();
    check(tj.is_object(), tat + "entry is not an object", kHint);
    t.global_shape = get_shape(field(tj, "shape", tat), tat, "shape");
    const json& dt = field(tj, "dtype", tat);
    check(dt.is_string() && dt.get<std::string>() == "F32",
          tat + "unknown dtype " + dt.dump() + " (checkpoints hold F32 state)", kHint);
    t.dtype = DType::f32;
    t.fingerprint = get_hex(field(tj, "fingerprint", tat), tat, "fingerprint");
    const json& shards = field(tj, "shards", tat);
    check(shards.is_array(), tat + "shards is not an array", kHint);
    const std::size_t rank = t.global_shape.size();
    for (const json& sj : shards) {
      ShardRecord s;
      const json& f = field(sj, "file", tat);
      check(f.is_string(), tat + "shard file is " + f.dump() + ", not a string", kHint);
      s.file = f.get<std::string>();
      check(safe_file_name(s.file),
            tat + "shard file name \"" + s.file +
                "\" is not a plain file name (it contains '/', '..' or is empty)",
            "shard files must lie inside the checkpoint directory; meta.json may be forged");
      const json& key = field(sj, "key", tat);
      check(key.is_string(), tat + "shard key is not a string", kHint);
      s.key = key.get<std::string>();
      s.box_offset = get_shape(field(sj, "box_offset", tat), tat, "box_offset");
      s.box_shape = get_shape(field(sj, "box_shape", tat), tat, "box_shape");
      check(s.box_offset.size() == rank && s.box_shape.size() == rank,
            tat + "shard in '" + s.file + "' has a box of rank " +
                std::to_string(s.box_shape.size()) + " for a tensor of rank " +
                std::to_string(rank),
            kHint);
      for (std::size_t d = 0; d < rank; ++d)
        check(s.box_offset[d] + s.box_shape[d] <= t.global_shape[d],
              tat + "shard in '" + s.file + "': box at " + shape_str(s.box_offset) + " of shape " +
                  shape_str(s.box_shape) + " lies outside " + shape_str(t.global_shape),
              kHint);
      const json& fr = field(sj, "flat_range", tat);
      check(fr.is_array() && fr.size() == 2, tat + "flat_range is not [begin, end]", kHint);
      const std::int64_t box_numel = shape_numel(s.box_shape);
      s.flat_begin = get_int(fr[0], tat, "flat_range", 0, box_numel);
      s.flat_end = get_int(fr[1], tat, "flat_range", s.flat_begin, box_numel);
      s.hash = get_hex(field(sj, "xxh3", tat), tat, "xxh3");
      const json& ch = field(sj, "chunks", tat);
      const std::uint64_t bytes = static_cast<std::uint64_t>(s.size()) * 4;
      const std::uint64_t nchunks = (bytes + m.chunk_bytes - 1) / m.chunk_bytes;
      check(ch.is_array() && ch.size() == nchunks,
            tat + "shard in '" + s.file + "' lists " +
                std::to_string(ch.is_array() ? ch.size() : 0) + " chunk hashes, expected " +
                std::to_string(nchunks),
            kHint);
      for (const json& c : ch) s.chunks.push_back(get_hex(c, tat, "chunk hash"));
      t.shards.push_back(std::move(s));
    }
    check_coverage(t, file);
    m.tensors.emplace(t.name, std::move(t));
  }
  return m;
}

Meta read_meta(const std::string& ckpt_dir) {
  const std::string path = (std::filesystem::path(ckpt_dir) / "meta.json").string();
  check(path_exists(path),
        "checkpoint '" + ckpt_dir +
            "' has no meta.json: it is incomplete (a save was interrupted) "
            "or not a checkpoint directory",
        "resume from a complete checkpoint (checkpoints/latest names the newest one)");
  Meta m = parse_meta(read_text_file(path), path);
  m.dir = ckpt_dir;
  return m;
}

json meta_json(const Meta& m) {
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) {
    json shards = json::array();
    for (const ShardRecord& s : t.shards) {
      json chunks = json::array();
      for (std::uint64_t c : s.chunks) chunks.push_back(hex64(c));
      shards.push_back({{"file", s.file},
                        {"key", s.key},
                        {"box_offset", s.box_offset},
                        {"box_shape", s.box_shape},
                        {"flat_range", {s.flat_begin, s.flat_end}},
                        {"xxh3", hex64(s.hash)},
                        {"chunks", chunks}});
    }
    tensors[name] = {{"shape", t.global_shape},
                     {"dtype", dtype_name(t.dtype)},
                     {"fingerprint", hex64(t.fingerprint)},
                     {"shards", shards}};
  }
  json j = {{"format", kFormatName}, {"format_version", m.format_version},
            {"step", m.step},        {"chunk_bytes", m.chunk_bytes},
            {"run", m.run},          {"tensors", tensors}};
  if (m.format_version >= 2) j["fingerprint_version"] = static_cast<int>(m.fingerprint_version);
  return j;
}

}  // namespace lockstep::ckpt
