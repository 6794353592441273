// Small text helpers shared by the config, the launcher and the experiments: comma lists and
// byte counts.
// Determinism contract: none (text only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lockstep {

// "a,b,,c" -> {"a", "b", "c"} (empty items dropped).
std::vector<std::string> split_list(const std::string& s, char sep = ',');
// The inverse: items joined by sep ("a,b").
std::string join_list(const std::vector<std::string>& items, const std::string& sep = ",");
// Three significant digits: 512 B, 12.5 KiB, 412 MiB, 1.52 GiB.
std::string human_bytes(std::int64_t bytes);

}  // namespace lockstep
