#include "launch/train/exit_status.hpp"

namespace lockstep {

const char* exit_status_name(int code) {
  switch (code) {
    case exit_code(ExitStatus::finished):
      return "finished";
    case exit_code(ExitStatus::failed):
      return "failed";
    case exit_code(ExitStatus::usage):
      return "usage error";
    case exit_code(ExitStatus::nonfinite):
      return "stopped on a non-finite value";
    case exit_code(ExitStatus::preempted):
      return "preempted and saved";
    case exit_code(ExitStatus::hung):
      return "hung (watchdog)";
    case exit_code(ExitStatus::locked):
      return "run directory locked by another job";
    default:
      return code > 128 ? "killed by a signal" : "failed";
  }
}

}  // namespace lockstep
