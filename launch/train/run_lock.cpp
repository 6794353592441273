#include "launch/train/run_lock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>

#include "launch/train/host_time.hpp"
#include "runtime/error.hpp"

namespace lockstep {
namespace {

std::string lock_path(const std::string& run_out) {
  return run_out + "/.lock";
}

struct flock whole_file(short type) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 0;  // the whole file
  fl.l_pid = 0;  // required by F_OFD_*
  return fl;
}

// The holder's text: "host\tpid\tstarted\tcommand\n".
LockHolder parse_holder(const std::string& text) {
  LockHolder h;
  std::istringstream ss(text);
  std::string pid;
  std::getline(ss, h.host, '\t');
  std::getline(ss, pid, '\t');
  std::getline(ss, h.started, '\t');
  std::getline(ss, h.command);
  h.pid = std::atol(pid.c_str());
  return h;
}

std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  ssize_t n;
  off_t at = 0;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return text;
}

}  // namespace

std::string LockHolder::describe() const {
  return "pid " + std::to_string(pid) + " on " + host + ", started " + started +
         (command.empty() ? "" : ": " + command);
}

RunLock::RunLock(const std::string& run_out, const std::string& command) {
  std::error_code ec;
  std::filesystem::create_directories(run_out, ec);
  check(!ec, "cannot create run directory '" + run_out + "': " + ec.message(),
        "set run.out to a writable path");
  const std::string path = lock_path(run_out);
  fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  check(fd_ >= 0, "cannot open '" + path + "': " + std::strerror(errno),
        "check permissions of run.out");
  struct flock fl = whole_file(F_WRLCK);
  if (fcntl(fd_, F_OFD_SETLK, &fl) != 0) {
    const int err = errno;
    const std::string text = read_all(fd_);
    close(fd_);
    fd_ = -1;
    check(err == EAGAIN || err == EACCES, "cannot lock '" + path + "': " + std::strerror(err),
          "the file system of run.out must support fcntl locks");
    fail("run directory '" + run_out + "' is in use by another job (" +
             parse_holder(text).describe() + ")",
         "wait for it to end or stop it, or set run.out to another directory");
  }
  const std::string line = host_name() + "\t" + std::to_string(getpid()) + "\t" + utc_timestamp() +
                           "\t" + command + "\n";
  const bool ok = ftruncate(fd_, 0) == 0 &&
                  pwrite(fd_, line.data(), line.size(), 0) == static_cast<ssize_t>(line.size());
  check(ok, "cannot write '" + path + "': " + std::strerror(errno), "check the disk of run.out");
}

RunLock::~RunLock() {
  if (fd_ >= 0) close(fd_);  // closing the last descriptor of the description drops the lock
}

std::optional<LockHolder> run_lock_holder(const std::string& run_out) {
  const int fd = open(lock_path(run_out).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;  // no file: nobody ever held it
  struct flock fl = whole_file(F_WRLCK);
  const bool probed = fcntl(fd, F_OFD_GETLK, &fl) == 0;
  std::optional<LockHolder> holder;
  if (probed && fl.l_type != F_UNLCK) holder = parse_holder(read_all(fd));
  close(fd);
  return holder;
}

bool wait_for_run_lock(const std::string& run_out, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (run_lock_holder(run_out)) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

}  // namespace lockstep
