#include "runtime/determinism.hpp"

#include "runtime/error.hpp"

namespace lockstep {

const char* determinism_name(Determinism m) {
  return enum_name(m).data();
}

Determinism parse_determinism(std::string_view name) {
  return parse_enum<Determinism>(name, "determinism mode");
}

}  // namespace lockstep
