#include "runtime/error.hpp"

#include <cstring>

namespace lockstep {
namespace {
std::string short_file(const char* path) {
  const char* p = std::strstr(path, "/runtime/");
  for (const char* dir : {"/parallel/", "/model/", "/optim/", "/checkpoint/", "/verify/",
                          "/launch/", "/tests/", "/bench/"}) {
    if (p) break;
    p = std::strstr(path, dir);
  }
  return p ? std::string(p + 1) : std::string(path);
}
std::string compose(const std::string& what, const std::string& hint) {
  return hint.empty() ? what : what + " (hint: " + hint + ")";
}
}  // namespace

Error::Error(const std::string& what, const std::string& hint, std::source_location loc)
    : std::runtime_error(compose(what, hint)),
      hint_(hint),
      where_(short_file(loc.file_name()) + ":" + std::to_string(loc.line())) {}

void fail(const std::string& what, const std::string& hint, std::source_location loc) {
  throw Error(what, hint, loc);
}

}  // namespace lockstep
