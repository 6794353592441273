#include "checkpoint/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/error.hpp"

namespace lockstep::ckpt {
namespace {
std::string sys_reason() {
  return std::strerror(errno);
}
}  // namespace

File::File(const std::string& path, const char* mode) : path_(path) {
  const bool write = std::strcmp(mode, "w") == 0;
  fd_ = write ? ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)
              : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  check(fd_ >= 0,
        "cannot open '" + path + "' for " + (write ? "writing" : "reading") + ": " + sys_reason(),
        write ? "check that the checkpoint directory is writable and the disk is not full"
              : "the file is missing or unreadable: the checkpoint is incomplete or damaged");
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

File::File(File&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

std::uint64_t File::size() const {
  struct stat st {};
  check(::fstat(fd_, &st) == 0, "cannot stat '" + path_ + "': " + sys_reason());
  return static_cast<std::uint64_t>(st.st_size);
}

void File::write_all(const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, std::min<std::size_t>(bytes, std::size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    check(n > 0, "write to '" + path_ + "' failed: " + sys_reason(),
          "check free disk space and quotas");
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

void File::pread_all(void* data, std::size_t bytes, std::uint64_t offset) const {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, std::min<std::size_t>(bytes, std::size_t{1} << 30),
                              static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    check(n >= 0, "read of '" + path_ + "' failed: " + sys_reason());
    check(n > 0,
          "'" + path_ + "' is truncated: wanted " + std::to_string(bytes) +
              " more bytes at offset " + std::to_string(offset),
          "the shard file is shorter than its header says (an interrupted copy?)");
    p += n;
    bytes -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

void File::sync() {
  check(::fsync(fd_) == 0, "fsync of '" + path_ + "' failed: " + sys_reason());
}

void File::close() {
  if (fd_ < 0) return;
  const int rc = ::close(fd_);
  fd_ = -1;
  check(rc == 0, "close of '" + path_ + "' failed: " + sys_reason());
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string read_text_file(const std::string& path) {
  File f(path, "r");
  const std::uint64_t n = f.size();
  check(n <= (std::uint64_t{256} << 20),
        "'" + path + "' is implausibly large (" + std::to_string(n) + " bytes)");
  std::string s(n, '\0');
  f.pread_all(s.data(), n, 0);
  return s;
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  check(!ec && is_directory(path), "cannot create directory '" + path + "': " + ec.message(),
        "check that the run directory is writable");
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  check(fd >= 0, "cannot open directory '" + dir + "' to fsync it: " + sys_reason());
  const int rc = ::fsync(fd);
  const std::string reason = sys_reason();
  ::close(fd);
  check(rc == 0, "fsync of directory '" + dir + "' failed: " + reason);
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  check(!ec, "cannot remove '" + path + "': " + ec.message());
}

void rename_path(const std::string& from, const std::string& to) {
  check(::rename(from.c_str(), to.c_str()) == 0,
        "cannot rename '" + from + "' to '" + to + "': " + sys_reason());
}

void replace_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    File f(tmp, "w");
    f.write_all(text.data(), text.size());
    f.sync();
    f.close();
  }
  rename_path(tmp, path);
  fsync_dir(std::filesystem::path(path).parent_path().string());
}

}  // namespace lockstep::ckpt
