// Megatron's indexed dataset (MMapIndexedDataset, docs/design.md section 5): a builder that writes
// PREFIX.bin / PREFIX.idx and a memory-mapped, bounds-checked reader that is a TokenSource.
//
// Format (little-endian, byte-compatible with Megatron-LM's indexed_dataset.py):
//   PREFIX.bin: the tokens of every sequence, back to back, in the index's dtype.
//   PREFIX.idx: offset 0  magic "MMIDIDX\0\0" (9 bytes)
//               offset 9  u64 version = 1
//               offset 17 u8  dtype code (1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 6 f64, 7 f32, 8 u16)
//               offset 18 u64 sequence count N
//               offset 26 u64 document-index count D
//               offset 34 int32 lengths[N] (tokens per sequence), int64 pointers[N] (byte
//               offset of each sequence in .bin), int64 document_indices[D].
//   As in Megatron, document_indices starts with 0 and gets one entry per finished document
//   (the sequence count at that point), so D = documents + 1 and document d is sequences
//   [document_indices[d], document_indices[d+1]). Our builder writes one sequence per
//   document (add_document), so N = D - 1 for our files; the reader accepts any valid index.
// The reader accepts token dtypes u8, u16 and i32; the builder writes u16 for vocabularies
// below 65500 (Megatron's choice; the byte tokenizer) and i32 above.
// The TokenSource stream is the concatenation of all sequences in index order.
// Determinism contract: bytes in, bytes out; reads are pure functions of the files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "data/gpt_dataset.hpp"

namespace lockstep::data {

enum class IndexDType : uint8_t {
  u8 = 1,
  i8 = 2,
  i16 = 3,
  i32 = 4,
  i64 = 5,
  f64 = 6,
  f32 = 7,
  u16 = 8
};

const char* index_dtype_name(IndexDType t);  // "uint8", "uint16", ...
int64_t index_dtype_size(IndexDType t);
// u16 when vocab < 65500, else i32 (Megatron's DType.optimal_dtype).
IndexDType optimal_index_dtype(int64_t vocab);

std::string bin_path(const std::string& prefix);  // prefix + ".bin"
std::string idx_path(const std::string& prefix);  // prefix + ".idx"

// Writes PREFIX.bin / PREFIX.idx. Data goes to PREFIX.bin.tmp / PREFIX.idx.tmp first; finalize()
// flushes, fsyncs and renames them, so a crash or error never leaves a half-written dataset
// under the final names. Every write is checked (errors name the file).
class IndexedDatasetBuilder {
 public:
  IndexedDatasetBuilder(const std::string& prefix, IndexDType dtype);
  ~IndexedDatasetBuilder();  // removes the temporary files if finalize() did not run
  IndexedDatasetBuilder(const IndexedDatasetBuilder&) = delete;
  IndexedDatasetBuilder& operator=(const IndexedDatasetBuilder&) = delete;

  // One sequence (checked to fit the dtype), then end_document() closes a document.
  void add_sequence(std::span<const int32_t> tokens);
  void end_document();
  // add_sequence + end_document: one sequence per document.
  void add_document(std::span<const int32_t> tokens);
  void finalize();

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return tokens_; }

 private:
  std::string prefix_;
  IndexDType dtype_;
  std::FILE* bin_ = nullptr;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_idx_{0};
  int64_t tokens_ = 0;
  int64_t bytes_ = 0;
  bool done_ = false;
};

// Read-only, memory-mapped view of PREFIX.bin / PREFIX.idx. The constructor validates the whole
// index against both file sizes (magic, version, dtype, counts, lengths, pointers, document
// indices); a truncated or corrupt file gives one error naming the file and what is wrong.
class IndexedDataset : public TokenSource {
 public:
  explicit IndexedDataset(const std::string& prefix);
  ~IndexedDataset() override;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;

  IndexDType dtype() const { return dtype_; }
  const std::string& prefix() const { return prefix_; }
  int64_t num_sequences() const { return n_; }
  int64_t num_documents() const { return d_ - 1; }
  int64_t sequence_length(int64_t i) const;
  // Document d is sequences [first, last).
  std::pair<int64_t, int64_t> document_sequences(int64_t d) const;
  // out[k] = token offset + k of sequence i.
  void read_sequence(int64_t i, int64_t offset, int64_t count, int32_t* out) const;
  std::vector<int32_t> sequence(int64_t i) const;

  // TokenSource: all sequences concatenated in index order.
  int64_t num_tokens() const override { return total_tokens_; }
  void read(int64_t first, int64_t count, int32_t* out) const override;
  std::string describe() const override { return "indexed dataset " + prefix_; }

 private:
  struct Map {
    void* addr = nullptr;
    size_t size = 0;
  };
  static Map map_file(const std::string& path);
  void copy_tokens(int64_t byte_offset, int64_t count, int32_t* out) const;

  std::string prefix_;
  Map idx_, bin_;
  IndexDType dtype_ = IndexDType::u16;
  int64_t itemsize_ = 2;
  int64_t n_ = 0, d_ = 0;
  // The arrays sit at unaligned offsets (34 + ...), so they are read with memcpy.
  const unsigned char* lengths_ = nullptr;
  const unsigned char* pointers_ = nullptr;
  const unsigned char* doc_idx_ = nullptr;
  int64_t length_at(int64_t i) const;
  int64_t pointer_at(int64_t i) const;
  int64_t doc_at(int64_t i) const;
  std::vector<int64_t> starts_;  // starts_[i] = first stream token of sequence i; N + 1 entries
  int64_t total_tokens_ = 0;
};

}  // namespace lockstep::data
