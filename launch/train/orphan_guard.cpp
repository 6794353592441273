#include "launch/train/orphan_guard.hpp"

#include <sys/prctl.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>

#include "runtime/comm.hpp"
#include "runtime/error.hpp"

namespace lockstep {

void die_with_launcher() {
  const char* asked = std::getenv("LOCKSTEP_DIE_WITH_PARENT");
  if (!launched_by_mpirun() && !(asked && std::strcmp(asked, "1") == 0)) return;
  check(prctl(PR_SET_PDEATHSIG, SIGKILL) == 0,
        std::string("prctl(PR_SET_PDEATHSIG) failed: ") + std::strerror(errno),
        "a Linux kernel is needed for ranks that die with their launcher");
  // No getppid() == 1 test for a launcher that died before the request: in a container the
  // launcher may itself be pid 1. A rank whose launcher is already gone cannot get past
  // MPI_Init (its PMIx server was the launcher) and so never starts work.
}

}  // namespace lockstep
