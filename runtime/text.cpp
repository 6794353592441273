#include "runtime/text.hpp"

#include <cstdio>
#include <sstream>

namespace lockstep {

std::vector<std::string> split_list(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string join_list(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (const auto& x : items) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string human_bytes(std::int64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024;
  const char* unit = "KiB";
  for (const char* next : {"MiB", "GiB", "TiB"}) {
    if (v < 1024) break;
    v /= 1024, unit = next;
  }
  char buf[32];  // three significant digits
  std::snprintf(buf, sizeof buf, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, unit);
  return buf;
}

}  // namespace lockstep
