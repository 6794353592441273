#include "checkpoint/direct_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "checkpoint/meta.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"

namespace lockstep::ckpt {
namespace {

constexpr std::uint64_t kBlockBytes = std::uint64_t{8} << 20;  // staging block / write size
constexpr int kBlocks = 4;                                     // pipeline depth
constexpr int kReadBlocks = 8;  // read_pipelined: pieces read ahead of the consumer, at most
// FileImage writes: few large O_DIRECT writes (the kernel splits each into many requests
// in flight at once), so the low-priority writer thread needs few wake-ups.
constexpr std::uint64_t kImageWriteBytes = std::uint64_t{256} << 20;

std::uint64_t round_up(std::uint64_t n) {
  return (n + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
}

std::string sys_reason(int err) {
  return std::strerror(err);
}

// A file opened for O_DIRECT writes at aligned offsets; falls back to buffered writes where
// the filesystem refuses O_DIRECT.
// A descriptor opened with O_DIRECT where the filesystem allows it (else buffered).
// drop_direct(): after EINVAL from a read or write, switch to buffered I/O and retry.
// Safe to share between threads (pread/pwrite; the flag is atomic, clearing is idempotent).
class DirectFd {
 public:
  DirectFd(const std::string& path, int flags, bool direct_io, const std::string& what,
           const std::string& hint)
      : path_(path) {
    if (direct_io) {
      fd_ = ::open(path.c_str(), flags | O_DIRECT, 0644);
      direct_ = fd_ >= 0;
    }
    if (fd_ < 0) fd_ = ::open(path.c_str(), flags, 0644);
    check(fd_ >= 0, "cannot open '" + path + "' for " + what + ": " + sys_reason(errno), hint);
  }
  ~DirectFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  DirectFd(const DirectFd&) = delete;
  DirectFd& operator=(const DirectFd&) = delete;

  // EINVAL came back from I/O: true if the descriptor was O_DIRECT and is now buffered
  // (retry the call), false if it was not O_DIRECT (a real error).
  bool drop_direct() {
    if (!direct_) return false;
    const int fl = ::fcntl(fd_, F_GETFL);
    check(fl >= 0 && ::fcntl(fd_, F_SETFL, fl & ~O_DIRECT) == 0,
          "cannot clear O_DIRECT on '" + path_ + "': " + sys_reason(errno));
    direct_ = false;
    return true;
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Closes now (checked); the destructor then does nothing.
  void close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    check(rc == 0, "close of '" + path_ + "' failed: " + sys_reason(errno));
  }

 private:
  int fd_ = -1;
  std::atomic<bool> direct_{false};
  std::string path_;
};

// A file written with O_DIRECT (buffered where refused).
class DirectFile {
 public:
  DirectFile(const std::string& path, bool direct_io)
      : f_(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, direct_io, "writing",
           "check that the checkpoint directory is writable and the disk is not full") {}

  // `data` aligned, `offset` and `bytes` multiples of kDirectAlign.
  void write_at(const char* data, std::uint64_t bytes, std::uint64_t offset) {
    while (bytes > 0) {
      const ssize_t n =
          ::pwrite(f_.fd(), data, std::min<std::uint64_t>(bytes, std::uint64_t{1} << 30),
                   static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && f_.drop_direct()) continue;
      check(n > 0, "write to '" + f_.path() + "' failed: " + sys_reason(errno),
            "check free disk space and quotas");
      data += n;
      bytes -= static_cast<std::uint64_t>(n);
      offset += static_cast<std::uint64_t>(n);
    }
  }

  // Cuts the zero padding of the last block, fsyncs, closes (all checked).
  void finish(std::uint64_t size) {
    check(::ftruncate(f_.fd(), static_cast<off_t>(size)) == 0, "cannot truncate '" + f_.path() +
                                                                   "' to " + std::to_string(size) +
                                                                   " bytes: " + sys_reason(errno));
    check(::fsync(f_.fd()) == 0, "fsync of '" + f_.path() + "' failed: " + sys_reason(errno));
    f_.close();
  }

 private:
  DirectFd f_;
};

}  // namespace

AlignedBuffer::AlignedBuffer(std::uint64_t bytes)
    : capacity_(round_up(std::max<std::uint64_t>(bytes, 1))) {
  data_ = static_cast<char*>(std::aligned_alloc(kDirectAlign, capacity_));
  check(data_ != nullptr,
        "cannot allocate " + std::to_string(capacity_) + " bytes of checkpoint staging memory",
        "the host is out of memory");
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept : data_(o.data_), capacity_(o.capacity_) {
  o.data_ = nullptr;
  o.capacity_ = 0;
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    capacity_ = o.capacity_;
    o.data_ = nullptr;
    o.capacity_ = 0;
  }
  return *this;
}

std::vector<SpanHash> write_pipelined(const std::string& path, const std::string& header,
                                      const std::vector<ByteSpan>& spans, std::uint64_t chunk_bytes,
                                      bool direct_io) {
  check(chunk_bytes > 0, "checkpoint chunk size is 0", "a bug in the caller");
  DirectFile file(path, direct_io);
  std::vector<AlignedBuffer> blocks;
  for (int i = 0; i < kBlocks; ++i) blocks.emplace_back(kBlockBytes);

  struct Full {
    int block;
    std::uint64_t bytes, offset;
  };
  std::mutex m;
  std::condition_variable cv;
  std::deque<Full> full;
  std::vector<int> free_blocks;
  for (int i = kBlocks - 1; i >= 0; --i) free_blocks.push_back(i);
  bool done = false;
  std::string error;

  // The writer: takes full blocks in order, writes them, hands them back. After an error
  // it keeps handing blocks back (unwritten) so the producer never waits forever.
  std::thread writer([&] {
    for (;;) {
      Full job{};
      {
        std::unique_lock<std::mutex> lk(m);
        cv.wait(lk, [&] { return !full.empty() || done; });
        if (full.empty()) return;
        job = full.front();
        full.pop_front();
      }
      bool failed = false;
      {
        std::lock_guard<std::mutex> lk(m);
        failed = !error.empty();
      }
      if (!failed) {
        try {
          file.write_at(blocks[static_cast<std::size_t>(job.block)].data(), job.bytes, job.offset);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lk(m);
          error = e.what();
          if (error.empty()) error = "unknown error";
        }
      }
      {
        std::lock_guard<std::mutex> lk(m);
        free_blocks.push_back(job.block);
      }
      cv.notify_all();
    }
  });

  int cur = -1;
  std::uint64_t pos = 0, offset = 0;  // fill of the current block; its file offset
  auto acquire = [&] {
    std::unique_lock<std::mutex> lk(m);
    cv.wait(lk, [&] { return !free_blocks.empty(); });
    cur = free_blocks.back();
    free_blocks.pop_back();
    pos = 0;
  };
  auto submit = [&](std::uint64_t bytes) {
    {
      std::lock_guard<std::mutex> lk(m);
      full.push_back({cur, bytes, offset});
    }
    cv.notify_all();
    offset += bytes;
    cur = -1;
  };
  auto emit = [&](const char* p, std::uint64_t n) {
    while (n > 0) {
      if (cur < 0) acquire();
      const std::uint64_t take = std::min(n, kBlockBytes - pos);
      std::memcpy(blocks[static_cast<std::size_t>(cur)].data() + pos, p, take);
      pos += take;
      p += take;
      n -= take;
      if (pos == kBlockBytes) submit(kBlockBytes);
    }
  };

  auto stop_writer = [&] {
    {
      std::lock_guard<std::mutex> lk(m);
      done = true;
    }
    cv.notify_all();
    writer.join();
  };
  std::vector<SpanHash> hashes(spans.size());
  std::uint64_t total = 0;
  try {
    emit(header.data(), header.size());
    for (std::size_t i = 0; i < spans.size(); ++i)
      hashes[i].chunks =
          chunk_hashes(spans[i].data, spans[i].bytes, chunk_bytes, &hashes[i].whole, emit);
    total = offset + (cur >= 0 ? pos : 0);
    if (cur >= 0) {
      const std::uint64_t padded = round_up(pos);
      std::memset(blocks[static_cast<std::size_t>(cur)].data() + pos, 0, padded - pos);
      submit(padded);
    }
  } catch (...) {
    stop_writer();  // never leave the writer thread running (std::terminate)
    throw;
  }
  stop_writer();
  if (!error.empty()) fail(error);
  file.finish(total);
  return hashes;
}

std::vector<SpanHash> FileImage::build(const std::string& header,
                                       const std::vector<ByteSpan>& spans,
                                       std::uint64_t chunk_bytes) {
  check(chunk_bytes > 0, "checkpoint chunk size is 0", "a bug in the caller");
  std::vector<std::uint64_t> at(spans.size());
  std::uint64_t size = header.size();
  for (std::size_t i = 0; i < spans.size(); ++i) {
    at[i] = size;
    size += spans[i].bytes;
  }
  if (buf_.capacity() < round_up(size)) buf_ = AlignedBuffer(size);
  size_ = size;
  char* base = buf_.data();
  std::memcpy(base, header.data(), header.size());
  std::memset(base + size, 0, buf_.capacity() - size);  // the padding of the last block
  std::vector<SpanHash> hashes(spans.size());
  const auto n = static_cast<std::int64_t>(spans.size());
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t k = 0; k < n; ++k) {
    const auto i = static_cast<std::size_t>(k);
    char* dst = base + at[i];
    hashes[i].chunks = chunk_hashes(spans[i].data, spans[i].bytes, chunk_bytes, &hashes[i].whole,
                                    [&](const char* p, std::uint64_t len) {
                                      std::memcpy(dst, p, len);
                                      dst += len;
                                    });
  }
  return hashes;
}

void FileImage::write(const std::string& path, bool direct_io) const {
  DirectFile file(path, direct_io);
  const std::uint64_t padded = round_up(size_);
  for (std::uint64_t off = 0; off < padded; off += kImageWriteBytes)
    file.write_at(buf_.data() + off, std::min(kImageWriteBytes, padded - off), off);
  file.finish(size_);
}

// ---- reading ----

namespace {

// A file read with O_DIRECT (buffered where refused); read_cover may run on several threads.
class DirectReadFile {
 public:
  DirectReadFile(const std::string& path, bool direct_io)
      : f_(path, O_RDONLY | O_CLOEXEC, direct_io, "reading",
           "the file is missing or unreadable: the checkpoint is incomplete or damaged") {}

  // Reads the aligned cover of [offset, offset + bytes) into `buf` (aligned, large enough);
  // returns where `offset` landed in it. Throws if the file ends before offset + bytes.
  std::uint64_t read_cover(char* buf, std::uint64_t offset, std::uint64_t bytes) {
    const std::uint64_t a0 = offset / kDirectAlign * kDirectAlign;
    const std::uint64_t need = offset + bytes - a0;
    const std::uint64_t want = round_up(need);
    std::uint64_t got = 0;
    while (got < need) {
      const ssize_t n = ::pread(f_.fd(), buf + got, want - got, static_cast<off_t>(a0 + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && f_.drop_direct()) continue;
      check(n >= 0, "read of '" + f_.path() + "' failed: " + sys_reason(errno));
      check(n > 0,
            "'" + f_.path() + "' is truncated: wanted " + std::to_string(need - got) +
                " more bytes at offset " + std::to_string(a0 + got),
            "the shard file is shorter than its header says (an interrupted copy?)");
      got += static_cast<std::uint64_t>(n);
    }
    return offset - a0;
  }

 private:
  DirectFd f_;
};

}  // namespace

void read_pipelined(const std::string& path, const std::vector<ReadRange>& ranges,
                    std::uint64_t piece_bytes, const ReadConsumer& consume, bool direct_io) {
  check(piece_bytes > 0, "checkpoint read piece size is 0", "a bug in the caller");
  struct Piece {
    std::size_t range;
    std::uint64_t at, offset, bytes;
  };
  std::vector<Piece> pieces;
  for (std::size_t r = 0; r < ranges.size(); ++r)
    for (std::uint64_t at = 0; at < ranges[r].bytes; at += piece_bytes)
      pieces.push_back({r, at, ranges[r].offset + at, std::min(piece_bytes, ranges[r].bytes - at)});
  if (pieces.empty()) return;
  DirectReadFile file(path, direct_io);
  // At most kReadBlocks pieces ahead, fewer when pieces are large (at least 2: one being read
  // while one is consumed), so memory stays bounded by the piece size.
  const std::uint64_t budget = std::uint64_t{64} << 20;
  const auto ahead = static_cast<std::size_t>(
      std::clamp<std::uint64_t>(budget / piece_bytes, 2, static_cast<std::uint64_t>(kReadBlocks)));
  const int nblocks = static_cast<int>(std::min(ahead, pieces.size()));
  std::vector<AlignedBuffer> blocks;
  for (int i = 0; i < nblocks; ++i) blocks.emplace_back(piece_bytes + 2 * kDirectAlign);

  // Two reader threads claim pieces in order (each with a free block) and read them
  // concurrently: two requests in flight read this disk faster than one (a single stream of
  // 2 MiB reads waits out each request's latency). The consumer takes the pieces in order.
  std::mutex m;
  std::condition_variable cv;
  std::size_t next = 0;                               // next piece to claim
  std::vector<int> ready(pieces.size(), -1);          // block holding piece k once read
  std::vector<std::uint64_t> skip(pieces.size(), 0);  // where piece k starts in its block
  std::vector<int> free_blocks;
  for (int i = nblocks - 1; i >= 0; --i) free_blocks.push_back(i);
  bool stop = false;         // the consumer or a reader failed: the readers quit
  std::exception_ptr error;  // the first reader failure

  const auto read_loop = [&] {
    for (;;) {
      std::size_t k = 0;
      int b = -1;
      {
        std::unique_lock<std::mutex> lk(m);
        cv.wait(lk, [&] { return stop || next == pieces.size() || !free_blocks.empty(); });
        if (stop || next == pieces.size()) return;
        k = next++;
        b = free_blocks.back();
        free_blocks.pop_back();
      }
      try {
        const std::uint64_t at = file.read_cover(blocks[static_cast<std::size_t>(b)].data(),
                                                 pieces[k].offset, pieces[k].bytes);
        std::lock_guard<std::mutex> lk(m);
        skip[k] = at;
        ready[k] = b;
      } catch (...) {
        std::lock_guard<std::mutex> lk(m);
        if (!error) error = std::current_exception();
        stop = true;
        cv.notify_all();
        return;
      }
      cv.notify_all();
    }
  };
  std::thread readers[2] = {std::thread(read_loop), std::thread(read_loop)};
  const auto join = [&] {
    for (std::thread& t : readers) t.join();
  };

  try {
    for (std::size_t k = 0; k < pieces.size(); ++k) {
      int b = -1;
      std::uint64_t at = 0;
      {
        std::unique_lock<std::mutex> lk(m);
        cv.wait(lk, [&] { return ready[k] >= 0 || error; });
        if (ready[k] < 0) std::rethrow_exception(error);
        b = ready[k];
        at = skip[k];
      }
      const Piece& p = pieces[k];
      consume(p.range, p.at, blocks[static_cast<std::size_t>(b)].data() + at, p.bytes);
      {
        std::lock_guard<std::mutex> lk(m);
        free_blocks.push_back(b);
      }
      cv.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lk(m);
      stop = true;
    }
    cv.notify_all();
    join();
    throw;
  }
  join();
}

}  // namespace lockstep::ckpt
