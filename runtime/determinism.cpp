#include "runtime/determinism.hpp"

#include "runtime/error.hpp"

namespace lockstep {

const char* determinism_name(Determinism m) {
  switch (m) {
    case Determinism::invariant:
      return "invariant";
    case Determinism::deterministic:
      return "deterministic";
    case Determinism::fast:
      return "fast";
  }
  return "?";
}

Determinism parse_determinism(std::string_view name) {
  if (name == "invariant") return Determinism::invariant;
  if (name == "deterministic") return Determinism::deterministic;
  if (name == "fast") return Determinism::fast;
  fail("unknown determinism mode '" + std::string(name) + "'",
       "run.determinism must be one of invariant, deterministic, fast");
}

}  // namespace lockstep
