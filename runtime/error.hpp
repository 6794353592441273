// Errors for every layer of Lockstep: one exception type whose message names what failed
// (file, tensor, rank), where in our code it was detected, and a hint to fix it.
// Determinism contract: none (errors never alter numerics); they end the job cleanly
// instead of letting a rank continue on bad state (see runtime/comm.hpp for MPI_Abort).
#pragma once

#include <source_location>
#include <stdexcept>
#include <string>

namespace lockstep {

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const std::string& hint,
        std::source_location loc = std::source_location::current());
  const std::string& hint() const noexcept { return hint_; }
  const std::string& where() const noexcept { return where_; }

 private:
  std::string hint_;
  std::string where_;
};

// Throws lockstep::Error. `what` says what went wrong and names the object (file, tensor,
// rank); `hint` says how to fix it.
[[noreturn]] void fail(const std::string& what, const std::string& hint = {},
                       std::source_location loc = std::source_location::current());

// Throws unless `cond` holds.
inline void check(bool cond, const std::string& what, const std::string& hint = {},
                  std::source_location loc = std::source_location::current()) {
  if (!cond) fail(what, hint, loc);
}

}  // namespace lockstep
