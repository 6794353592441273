// Small text helpers shared by the config, the launcher and the experiments: comma lists.
// Determinism contract: none (text only).
#pragma once

#include <string>
#include <vector>

namespace lockstep {

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s, char sep = ',');
// The inverse: items joined by sep ("a,b").
std::string join_list(const std::vector<std::string>& items, const std::string& sep = ",");

}  // namespace lockstep
