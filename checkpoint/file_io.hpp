// Checked POSIX file I/O for checkpoints: whole-buffer writes and positioned reads that loop
// over short transfers, fsync of files and directories, and the atomic replace of a small
// file (write temp, fsync, rename, fsync the directory) that `latest` relies on. Every
// failure is a lockstep::Error naming the file and the system's reason.
// Determinism contract: none (moves bytes; never alters them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lockstep::ckpt {

// An open file descriptor, closed on destruction.
class File {
 public:
  // mode: "r" (read), "w" (create/truncate for writing).
  File(const std::string& path, const char* mode);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&& o) noexcept;

  std::uint64_t size() const;
  void write_all(const void* data, std::size_t bytes);
  // Reads exactly `bytes` at `offset` (throws on a short file).
  void pread_all(void* data, std::size_t bytes, std::uint64_t offset) const;
  void sync();
  void close();  // checked close (the destructor closes unchecked)
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string read_text_file(const std::string& path);
// mkdir -p.
void make_dirs(const std::string& path);
void fsync_dir(const std::string& dir);
void remove_tree(const std::string& path);
// Writes `text` to `path` atomically: path.tmp, fsync, rename over path, fsync the directory.
void replace_file_atomic(const std::string& path, const std::string& text);
// rename(2), checked.
void rename_path(const std::string& from, const std::string& to);

}  // namespace lockstep::ckpt
