// One table of names per enum: the only place where an enum's spellings are written. Every
// parse, name, config choice list, `--help-config` line, error hint and config.toml value
// comes from it. An enum E opts in by declaring, in its own namespace,
//   constexpr std::array<EnumName<E>, N> enum_names(E) { return {{{E::a, "a"}, ...}}; }
// (found by argument-dependent lookup), and then gets enum_name(e), parse_enum<E>(text, what)
// and enum_name_list<E>().
// Determinism contract: none (naming only).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.hpp"

namespace lockstep {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

template <class E>
std::string_view enum_name(E value) {
  for (const auto& n : enum_names(E{}))
    if (n.value == value) return n.name;
  return "?";
}

// Every name of E in table order.
template <class E>
std::vector<std::string> enum_name_list() {
  std::vector<std::string> out;
  for (const auto& n : enum_names(E{})) out.emplace_back(n.name);
  return out;
}

// "a, b, c".
template <class E>
std::string enum_names_text() {
  std::string s;
  for (const auto& n : enum_names(E{})) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

// The value named `text`; throws lockstep::Error "unknown <what> '<text>'" with the list of
// valid names as the hint.
template <class E>
E parse_enum(std::string_view text, std::string_view what) {
  for (const auto& n : enum_names(E{}))
    if (n.name == text) return n.value;
  fail("unknown " + std::string(what) + " '" + std::string(text) + "'",
       "use one of " + enum_names_text<E>());
}

}  // namespace lockstep
