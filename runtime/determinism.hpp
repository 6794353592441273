// The three execution modes of docs/design.md section 1 and the guarantees each one keeps.
// invariant     : G1-G4; canonical reduction trees everywhere (bits independent of layout).
// deterministic : G1-G2; fixed but layout-dependent orders (one FMA chain per local K,
//                 vendor collectives with a pinned algorithm).
// fast          : the fastest recipe we have; may be nondeterministic. The baseline of the
//                 determinism tax.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "runtime/enum_names.hpp"

namespace lockstep {

enum class Determinism { invariant, deterministic, fast };
constexpr std::array<EnumName<Determinism>, 3> enum_names(Determinism) {
  return {{{Determinism::invariant, "invariant"},
           {Determinism::deterministic, "deterministic"},
           {Determinism::fast, "fast"}}};
}

const char* determinism_name(Determinism m);
// Parses "invariant", "deterministic" or "fast"; throws a lockstep::Error otherwise.
Determinism parse_determinism(std::string_view name);

}  // namespace lockstep
