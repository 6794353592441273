// O_DIRECT file I/O for checkpoints.
// Writing a checkpoint file from memory at disk speed with little CPU (issue 4): the file's
// bytes (a header, then spans of tensor data) are copied into 4 KiB-aligned staging memory,
// hashed on the way (XXH3-64 of each span and of its chunk_bytes chunks, the hashes
// meta.json records), and written with O_DIRECT: no page-cache copy, no writeback threads.
// Two ways:
//  - write_pipelined(): a ring of staging blocks; the calling thread copies and hashes block
//    i+1 while a helper thread writes block i (save()).
//  - FileImage: the whole file in one aligned buffer, built (copy + hash, on the OpenMP
//    threads) by the training thread, then written by a background thread that only issues
//    O_DIRECT writes (AsyncSaver).
// The unaligned tail is written padded with zeros to 4 KiB and the file is then truncated to
// its size, so the bytes on disk are exactly header + spans. Where the filesystem refuses
// O_DIRECT (EINVAL at open or at the first write, e.g. tmpfs), the same writes go through
// the page cache instead, silently. Every file is fsynced before the functions return.
// The reading counterpart, read_pipelined(): two helper threads read byte ranges of a file
// with O_DIRECT (two requests in flight) into a ring of aligned blocks while the caller
// consumes (hashes, copies) the earlier pieces in order; buffered reads where O_DIRECT is
// refused (load()).
// Determinism contract: the file's bytes and the hashes are a pure function of the header
// and the spans (never of the block size, thread count or O_DIRECT availability).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace lockstep::ckpt {

inline constexpr std::uint64_t kDirectAlign = 4096;

// A contiguous range of bytes to write, hashed as one span.
struct ByteSpan {
  const void* data = nullptr;
  std::uint64_t bytes = 0;
};

// XXH3-64 of a whole span and of its consecutive chunk_bytes chunks (the last may be short).
struct SpanHash {
  std::uint64_t whole = 0;
  std::vector<std::uint64_t> chunks;
};

// A heap buffer aligned to kDirectAlign, its size a multiple of kDirectAlign.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::uint64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  char* data() const { return data_; }
  std::uint64_t capacity() const { return capacity_; }

 private:
  char* data_ = nullptr;
  std::uint64_t capacity_ = 0;
};

// Writes `header` then the spans to `path` (created or truncated), fsyncs and closes it.
// Returns the spans' hashes, in order. Throws lockstep::Error naming the file.
std::vector<SpanHash> write_pipelined(const std::string& path, const std::string& header,
                                      const std::vector<ByteSpan>& spans, std::uint64_t chunk_bytes,
                                      bool direct_io = true);

// The whole file in memory, ready for O_DIRECT writes. Its buffer is reused by the next
// build() when large enough (every save of a run: no allocation, no page faults).
class FileImage {
 public:
  // Copies header + spans into the image and hashes the spans (spans in parallel on the
  // OpenMP threads; each span's hashes are computed in order, so they do not depend on it).
  std::vector<SpanHash> build(const std::string& header, const std::vector<ByteSpan>& spans,
                              std::uint64_t chunk_bytes);
  // Writes the image to `path`, fsyncs and closes it. Touches no other state (runs on a
  // background thread).
  void write(const std::string& path, bool direct_io = true) const;
  std::uint64_t size() const { return size_; }

 private:
  AlignedBuffer buf_;
  std::uint64_t size_ = 0;
};

// A byte range of a file to read.
struct ReadRange {
  std::uint64_t offset = 0;
  std::uint64_t bytes = 0;
};

// Called with consecutive pieces of each range, in order: range index, offset of the piece
// within its range (a multiple of piece_bytes), the bytes, their count (piece_bytes, or less
// for a range's last piece). The pointer is valid during the call only. An exception thrown
// by it stops the reader and propagates out of read_pipelined.
using ReadConsumer =
    std::function<void(std::size_t range, std::uint64_t at, const char* data, std::uint64_t bytes)>;

// Reads `ranges` (sorted by offset, not overlapping) of `path` on two helper threads, a few
// pieces ahead of `consume` (which sees the pieces in order). O_DIRECT reads of aligned blocks (falls back to the page cache
// where refused). Throws lockstep::Error naming the file (missing, unreadable, truncated).
void read_pipelined(const std::string& path, const std::vector<ReadRange>& ranges,
                    std::uint64_t piece_bytes, const ReadConsumer& consume, bool direct_io = true);

}  // namespace lockstep::ckpt
