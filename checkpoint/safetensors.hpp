// The safetensors file format (docs/design.md section 5): an 8-byte little-endian header length
// N, N bytes of JSON {"<tensor>": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]},
// "__metadata__": {...}} padded with spaces so that the data starts 8-byte aligned, then the
// tensors' bytes; data_offsets are relative to the start of the data. Checkpoint shards and
// `lockstep ckpt export` files use it, so the `safetensors` Python package (and
// tests/reference/safetensors_reader.py) read them.
// The parser is the trust boundary for files on disk: every field is validated (known dtype,
// non-negative shape whose byte size equals the offsets, offsets inside the file, no two
// tensors overlapping) and every problem becomes a lockstep::Error naming the file and the
// tensor; it never reads outside the bytes it is given (fuzzed by tests/fuzz/).
// Determinism contract: the writer's bytes are a pure function of the tensors passed (in
// the order passed), so equal state gives byte-identical files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.hpp"

namespace lockstep::ckpt {

struct StEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  std::uint64_t begin = 0;  // data_offsets, relative to the data start
  std::uint64_t end = 0;
  std::uint64_t bytes() const { return end - begin; }
};

struct StHeader {
  std::uint64_t header_len = 0;  // N
  std::uint64_t data_start = 0;  // 8 + N
  std::uint64_t file_size = 0;
  std::vector<StEntry> tensors;  // in file order (sorted by data_offsets)
  const StEntry* find(std::string_view name) const;
};

// Largest accepted header (a guard against absurd lengths before anything is allocated).
inline constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;

// Parses and validates the header given the first bytes of a file of `file_size` bytes
// (`prefix` must hold at least 8 + N bytes, or the whole file if shorter). `file` names the
// file in errors.
StHeader parse_safetensors(std::string_view prefix, std::uint64_t file_size,
                           const std::string& file);

// Opens `path`, reads and validates its header.
StHeader read_safetensors_header(const std::string& path);

// A tensor to write: `bytes` bytes at `data` (must equal numel(shape) * dtype_size).
struct StTensor {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const void* data = nullptr;
  std::uint64_t bytes = 0;
};

// The header bytes (length prefix included) for these tensors, laid out in the given order.
std::string safetensors_header(const std::vector<StTensor>& tensors);

// Writes the file (header, then one write per tensor), fsyncs and closes it. Throws
// lockstep::Error naming the file on any failure.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors);

}  // namespace lockstep::ckpt
