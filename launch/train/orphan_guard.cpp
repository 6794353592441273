#include "launch/train/orphan_guard.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "launch/train/exit_status.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"

namespace lockstep {

void die_with_launcher() {
  const char* asked = std::getenv("LOCKSTEP_DIE_WITH_PARENT");
  if (!launched_by_mpirun() && !(asked && std::strcmp(asked, "1") == 0)) return;
  check(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0,
        std::string("prctl(PR_SET_PDEATHSIG) failed: ") + std::strerror(errno),
        "a Linux kernel is needed for ranks that die with their launcher");
  if (getppid() == 1) {  // the launcher died before the request: never start work
    std::fprintf(stderr, "lockstep: error: this rank's launcher is gone; exiting without work\n");
    std::_Exit(exit_code(ExitStatus::failed));
  }
}

}  // namespace lockstep
