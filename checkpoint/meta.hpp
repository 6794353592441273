// meta.json, the table of contents of a checkpoint directory (docs/design.md section 5): format
// version, the fingerprint version, step, the trainer's opaque `run` object (config, contract
// constants, layout, sampler, RNG, LR, build facts), the chunk size of the shard hashes, and per
// logical tensor its global shape, dtype, fingerprint and shards. A shard is one contiguous flat
// range of a box (the TP shard at save) in logical coordinates, stored as one tensor (`key`) of one
// safetensors file in the same directory, with the XXH3-64 of its bytes and of each
// `chunk_bytes` chunk of them (so a resharding load that reads part of a shard still checks
// every byte it reads).
// The parser validates everything a load relies on before any tensor byte is read: known
// dtype, plausible shapes, boxes inside the global shape, flat ranges inside their box, shard
// file names without "/" or "..", and shards that cover every logical element exactly once
// (no overlap, no gap). Every problem is a lockstep::Error naming meta.json and the tensor.
// Format versions: 2 (written now) stores "fingerprint_version" (verify/fingerprint.hpp's
// FpVersion of the tensors' fingerprints); 1 (written before) has no such field and its
// fingerprints are v1. Both are read.
// Determinism contract: none (metadata only); meta.json's text is a pure function of its
// content (sorted keys).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/state_piece.hpp"
#include "runtime/tensor.hpp"
#include "verify/fingerprint.hpp"

namespace lockstep::ckpt {

inline constexpr int kFormatVersion = 2;  // written; 1 and 2 are read
inline constexpr const char* kFormatName = "lockstep-checkpoint";
inline constexpr std::uint64_t kChunkBytes = std::uint64_t{1} << 20;

struct ShardRecord {
  std::string file;             // file name inside the checkpoint directory
  std::string key;              // tensor key inside that safetensors file
  Shape box_offset;             // the box's first logical index per dim
  Shape box_shape;              // the box's shape
  std::int64_t flat_begin = 0;  // range of the box's row-major flattening held by this shard
  std::int64_t flat_end = 0;
  std::uint64_t hash = 0;             // XXH3-64 of all (flat_end - flat_begin) * 4 bytes
  std::vector<std::uint64_t> chunks;  // XXH3-64 of each chunk_bytes chunk (last one shorter)
  std::int64_t size() const { return flat_end - flat_begin; }
};

struct TensorRecord {
  std::string name;
  Shape global_shape;
  DType dtype = DType::f32;
  std::uint64_t fingerprint = 0;  // verify/fingerprint.hpp (Meta::fingerprint_version) over
                                  // the logical tensor
  std::vector<ShardRecord> shards;
};

struct Meta {
  std::string dir;  // the checkpoint directory it was read from ("" when parsed from text)
  int format_version = kFormatVersion;
  FpVersion fingerprint_version = kFpVersionLatest;  // of every TensorRecord::fingerprint
  std::int64_t step = 0;
  std::uint64_t chunk_bytes = kChunkBytes;
  nlohmann::json run;                           // the trainer's object, verbatim
  std::map<std::string, TensorRecord> tensors;  // by logical name
  std::int64_t total_bytes() const;
};

// Parses and validates meta.json text; `file` names it in errors.
Meta parse_meta(const std::string& text, const std::string& file);
// read_text_file(dir/meta.json) + parse_meta; meta.dir = dir.
Meta read_meta(const std::string& ckpt_dir);
// The JSON of a Meta (what save writes; parse_meta(meta_json(m).dump()) round-trips).
nlohmann::json meta_json(const Meta& m);

// A shard's geometry as a StatePiece without data (for for_each_run over its logical runs).
StatePiece shard_geometry(const TensorRecord& t, const ShardRecord& s);

// Hash helpers shared by save, load and verify.
// The XXH3-64 of each chunk_bytes chunk and (if `whole` is given) of all bytes, in one pass
// over memory (each chunk is hashed twice while it is in cache); `emit`, if given, receives
// each chunk right after it is hashed, still cache-hot (the writers copy it on).
using ChunkSink = std::function<void(const char* data, std::uint64_t bytes)>;
std::vector<std::uint64_t> chunk_hashes(const void* data, std::uint64_t bytes,
                                        std::uint64_t chunk_bytes, std::uint64_t* whole = nullptr,
                                        const ChunkSink& emit = {});

}  // namespace lockstep::ckpt
