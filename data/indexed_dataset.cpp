#include "data/indexed_dataset.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "runtime/error.hpp"

namespace lockstep::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the indexed dataset format is little-endian; add byte swapping for this host");

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kVersion = 1;
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34

std::string errno_text() {
  return std::strerror(errno);
}

void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& path) {
  if (bytes == 0) return;
  if (std::fwrite(data, 1, bytes, f) != bytes)
    fail("cannot write " + path + ": " + errno_text(),
         "check free disk space and write permission on its directory");
}

std::FILE* open_write(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f)
    fail("cannot create " + path + ": " + errno_text(),
         "check that the output directory exists and is writable");
  return f;
}

void close_synced(std::FILE*& f, const std::string& path) {
  const bool ok = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  f = nullptr;
  if (!ok || !closed)
    fail("cannot flush " + path + ": " + std::strerror(ok ? errno : err),
         "check free disk space on its filesystem");
}

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

const char* kRebuildHint =
    "the file is truncated or not a Megatron indexed dataset; re-run "
    "`lockstep data preprocess` to rebuild it";

}  // namespace

const char* index_dtype_name(IndexDType t) {
  switch (t) {
    case IndexDType::u8:
      return "uint8";
    case IndexDType::i8:
      return "int8";
    case IndexDType::i16:
      return "int16";
    case IndexDType::i32:
      return "int32";
    case IndexDType::i64:
      return "int64";
    case IndexDType::f64:
      return "float64";
    case IndexDType::f32:
      return "float32";
    case IndexDType::u16:
      return "uint16";
  }
  return "unknown";
}

int64_t index_dtype_size(IndexDType t) {
  switch (t) {
    case IndexDType::u8:
    case IndexDType::i8:
      return 1;
    case IndexDType::i16:
    case IndexDType::u16:
      return 2;
    case IndexDType::i32:
    case IndexDType::f32:
      return 4;
    case IndexDType::i64:
    case IndexDType::f64:
      return 8;
  }
  fail("unknown indexed-dataset dtype code " + std::to_string(int(t)));
}

IndexDType optimal_index_dtype(int64_t vocab) {
  return vocab < 65500 ? IndexDType::u16 : IndexDType::i32;
}

std::string bin_path(const std::string& prefix) {
  return prefix + ".bin";
}
std::string idx_path(const std::string& prefix) {
  return prefix + ".idx";
}

// ---- builder ----------------------------------------------------------------------------

IndexedDatasetBuilder::IndexedDatasetBuilder(const std::string& prefix, IndexDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  check(dtype == IndexDType::u8 || dtype == IndexDType::u16 || dtype == IndexDType::i32,
        std::string("indexed dataset builder: token dtype ") + index_dtype_name(dtype) +
            " is not supported",
        "write tokens as uint8, uint16 or int32");
  check(!prefix.empty(), "indexed dataset builder: empty output prefix",
        "pass --output-prefix PATH (writes PATH.bin and PATH.idx)");
  bin_ = open_write(bin_path(prefix_) + ".tmp");
}

IndexedDatasetBuilder::~IndexedDatasetBuilder() {
  if (bin_) std::fclose(bin_);
  if (!done_) {
    std::remove((bin_path(prefix_) + ".tmp").c_str());
    std::remove((idx_path(prefix_) + ".tmp").c_str());
  }
}

void IndexedDatasetBuilder::add_sequence(std::span<const int32_t> tokens) {
  check(!done_ && bin_, "indexed dataset builder for " + prefix_ + ": add after finalize()");
  check(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()),
        "indexed dataset builder for " + prefix_ + ": a sequence of " +
            std::to_string(tokens.size()) + " tokens exceeds the int32 length field",
        "split the document into several sequences");
  const std::string bp = bin_path(prefix_) + ".tmp";
  const int64_t n = static_cast<int64_t>(tokens.size());
  int64_t lo = 0, hi = 0;
  if (dtype_ == IndexDType::u8) {
    lo = 0, hi = 255;
  } else if (dtype_ == IndexDType::u16) {
    lo = 0, hi = 65535;
  } else {
    lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
  }
  for (int64_t k = 0; k < n; ++k)
    check(tokens[k] >= lo && tokens[k] <= hi,
          "indexed dataset builder for " + prefix_ + ": token " + std::to_string(tokens[k]) +
              " does not fit dtype " + index_dtype_name(dtype_),
          "use a wider dtype (int32) for this vocabulary");
  if (dtype_ == IndexDType::i32) {
    write_all(bin_, tokens.data(), tokens.size() * 4, bp);
  } else if (dtype_ == IndexDType::u16) {
    std::vector<uint16_t> buf(tokens.begin(), tokens.end());
    write_all(bin_, buf.data(), buf.size() * 2, bp);
  } else {
    std::vector<uint8_t> buf(tokens.begin(), tokens.end());
    write_all(bin_, buf.data(), buf.size(), bp);
  }
  lengths_.push_back(static_cast<int32_t>(n));
  pointers_.push_back(bytes_);
  bytes_ += n * index_dtype_size(dtype_);
  tokens_ += n;
}

void IndexedDatasetBuilder::end_document() {
  check(!done_, "indexed dataset builder for " + prefix_ + ": end_document after finalize()");
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
}

void IndexedDatasetBuilder::add_document(std::span<const int32_t> tokens) {
  add_sequence(tokens);
  end_document();
}

void IndexedDatasetBuilder::finalize() {
  check(!done_, "indexed dataset builder for " + prefix_ + ": finalize() called twice");
  const std::string bin_tmp = bin_path(prefix_) + ".tmp";
  const std::string idx_tmp = idx_path(prefix_) + ".tmp";
  close_synced(bin_, bin_tmp);

  std::FILE* f = open_write(idx_tmp);
  const uint64_t n = lengths_.size(), d = doc_idx_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  try {
    write_all(f, kMagic, 9, idx_tmp);
    write_all(f, &kVersion, 8, idx_tmp);
    write_all(f, &code, 1, idx_tmp);
    write_all(f, &n, 8, idx_tmp);
    write_all(f, &d, 8, idx_tmp);
    write_all(f, lengths_.data(), n * 4, idx_tmp);
    write_all(f, pointers_.data(), n * 8, idx_tmp);
    write_all(f, doc_idx_.data(), d * 8, idx_tmp);
    close_synced(f, idx_tmp);
  } catch (...) {
    if (f) std::fclose(f);
    throw;
  }
  for (const auto& [tmp, fin] :
       {std::pair{bin_tmp, bin_path(prefix_)}, {idx_tmp, idx_path(prefix_)}})
    if (std::rename(tmp.c_str(), fin.c_str()) != 0)
      fail("cannot rename " + tmp + " to " + fin + ": " + errno_text(),
           "check write permission on the output directory");
  done_ = true;
}

// ---- reader -----------------------------------------------------------------------------

IndexedDataset::Map IndexedDataset::map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    fail("cannot open " + path + ": " + errno_text(),
         errno == ENOENT
             ? "check data.path: it is the prefix, without .bin/.idx; build the dataset "
               "with `lockstep data preprocess --input FILE --output-prefix PREFIX`"
             : "check the file's read permission");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string e = errno_text();
    ::close(fd);
    fail("cannot stat " + path + ": " + e);
  }
  Map m;
  m.size = static_cast<size_t>(st.st_size);
  if (m.size > 0) {
    void* p = ::mmap(nullptr, m.size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const std::string e = errno_text();
      ::close(fd);
      fail("cannot mmap " + path + " (" + std::to_string(m.size) + " bytes): " + e,
           "check that the file is a regular file on a local filesystem and that virtual memory "
           "limits (ulimit -v) allow mapping it");
    }
    m.addr = p;
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

int64_t IndexedDataset::length_at(int64_t i) const {
  return load<int32_t>(lengths_ + 4 * i);
}
int64_t IndexedDataset::pointer_at(int64_t i) const {
  return load<int64_t>(pointers_ + 8 * i);
}
int64_t IndexedDataset::doc_at(int64_t i) const {
  return load<int64_t>(doc_idx_ + 8 * i);
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string ip = idx_path(prefix), bp = bin_path(prefix);
  try {
    idx_ = map_file(ip);
    bin_ = map_file(bp);
    const auto* base = static_cast<const unsigned char*>(idx_.addr);
    const int64_t isize = static_cast<int64_t>(idx_.size);
    if (isize < kHeaderBytes)
      fail(ip + " is " + std::to_string(isize) + " bytes, shorter than the 34-byte header",
           kRebuildHint);
    if (std::memcmp(base, kMagic, 9) != 0)
      fail(ip + " does not start with the magic MMIDIDX\\0\\0", kRebuildHint);
    const uint64_t version = load<uint64_t>(base + 9);
    if (version != kVersion)
      fail(ip + " has index version " + std::to_string(version) + ", only version 1 is supported",
           kRebuildHint);
    const uint8_t code = base[17];
    if (code != 1 && code != 8 && code != 4) {
      if (code >= 1 && code <= 8)
        fail(ip + " stores tokens as " + index_dtype_name(IndexDType(code)) +
                 "; the reader supports uint8, uint16 and int32",
             "re-preprocess the data with a uint16 or int32 token dtype");
      fail(ip + " has an unknown dtype code " + std::to_string(code), kRebuildHint);
    }
    dtype_ = IndexDType(code);
    itemsize_ = index_dtype_size(dtype_);
    const uint64_t n = load<uint64_t>(base + 18), d = load<uint64_t>(base + 26);
    // Guard the multiplication below against absurd counts from a corrupt header.
    if (n > uint64_t(isize) || d > uint64_t(isize) || d < 1)
      fail(ip + " has an impossible header (sequence count " + std::to_string(n) +
               ", document-index count " + std::to_string(d) + ")",
           kRebuildHint);
    n_ = static_cast<int64_t>(n);
    d_ = static_cast<int64_t>(d);
    const int64_t want = kHeaderBytes + 12 * n_ + 8 * d_;
    if (isize != want)
      fail(ip + " is " + std::to_string(isize) + " bytes but its header (" + std::to_string(n_) +
               " sequences, " + std::to_string(d_) + " document indices) implies " +
               std::to_string(want),
           kRebuildHint);
    lengths_ = base + kHeaderBytes;
    pointers_ = lengths_ + 4 * n_;
    doc_idx_ = pointers_ + 8 * n_;

    const int64_t bsize = static_cast<int64_t>(bin_.size);
    starts_.resize(static_cast<size_t>(n_) + 1);
    starts_[0] = 0;
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t len = length_at(i), ptr = pointer_at(i);
      if (len < 0 || ptr < 0 || ptr % itemsize_ != 0 || ptr > bsize ||
          len > (bsize - ptr) / itemsize_)
        fail(bp + ": sequence " + std::to_string(i) + " (length " + std::to_string(len) +
                 ", byte offset " + std::to_string(ptr) + ") lies outside the " +
                 std::to_string(bsize) + "-byte file named by " + ip,
             "the .bin is truncated or belongs to another .idx; re-run `lockstep data preprocess`");
      starts_[i + 1] = starts_[i] + len;
    }
    total_tokens_ = starts_[n_];
    if (doc_at(0) != 0 || doc_at(d_ - 1) != n_)
      fail(ip + ": document indices must run from 0 to the sequence count " + std::to_string(n_) +
               ", found " + std::to_string(doc_at(0)) + " .. " + std::to_string(doc_at(d_ - 1)),
           kRebuildHint);
    for (int64_t k = 1; k < d_; ++k)
      if (doc_at(k) < doc_at(k - 1))
        fail(ip + ": document indices decrease at entry " + std::to_string(k), kRebuildHint);
  } catch (...) {
    if (idx_.addr) ::munmap(idx_.addr, idx_.size);
    if (bin_.addr) ::munmap(bin_.addr, bin_.size);
    throw;
  }
}

IndexedDataset::~IndexedDataset() {
  if (idx_.addr) ::munmap(idx_.addr, idx_.size);
  if (bin_.addr) ::munmap(bin_.addr, bin_.size);
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  check(i >= 0 && i < n_, describe() + ": sequence " + std::to_string(i) + " out of range [0, " +
                              std::to_string(n_) + ")");
  return length_at(i);
}

std::pair<int64_t, int64_t> IndexedDataset::document_sequences(int64_t d) const {
  check(d >= 0 && d < d_ - 1, describe() + ": document " + std::to_string(d) +
                                  " out of range [0, " + std::to_string(d_ - 1) + ")");
  return {doc_at(d), doc_at(d + 1)};
}

void IndexedDataset::copy_tokens(int64_t byte_offset, int64_t count, int32_t* out) const {
  const auto* p = static_cast<const unsigned char*>(bin_.addr) + byte_offset;
  switch (dtype_) {
    case IndexDType::u8:
      for (int64_t k = 0; k < count; ++k) out[k] = p[k];
      break;
    case IndexDType::u16:
      for (int64_t k = 0; k < count; ++k) out[k] = load<uint16_t>(p + 2 * k);
      break;
    case IndexDType::i32:
      std::memcpy(out, p, static_cast<size_t>(count) * 4);
      break;
    default:
      fail(describe() + ": unsupported token dtype");
  }
}

void IndexedDataset::read_sequence(int64_t i, int64_t offset, int64_t count, int32_t* out) const {
  const int64_t len = sequence_length(i);
  check(offset >= 0 && count >= 0 && offset <= len && count <= len - offset,
        describe() + ": tokens [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
            ") outside sequence " + std::to_string(i) + " of length " + std::to_string(len));
  if (count > 0) copy_tokens(pointer_at(i) + offset * itemsize_, count, out);
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int32_t> v(static_cast<size_t>(sequence_length(i)));
  read_sequence(i, 0, static_cast<int64_t>(v.size()), v.data());
  return v;
}

void IndexedDataset::read(int64_t first, int64_t count, int32_t* out) const {
  check(first >= 0 && count >= 0 && first <= total_tokens_ && count <= total_tokens_ - first,
        describe() + ": token range [" + std::to_string(first) + ", " +
            std::to_string(first + count) + ") outside the stream of " +
            std::to_string(total_tokens_) + " tokens");
  // The sequence holding `first`: the last i with starts_[i] <= first (skipping empty ones).
  int64_t i = std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin() - 1;
  int64_t pos = first;
  while (count > 0) {
    const int64_t off = pos - starts_[i];
    const int64_t take = std::min(count, starts_[i + 1] - pos);
    if (take > 0) {
      copy_tokens(pointer_at(i) + off * itemsize_, take, out);
      out += take, pos += take, count -= take;
    }
    ++i;
  }
}

}  // namespace lockstep::data
