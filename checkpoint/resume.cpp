// resolve_resume(): run.resume = auto | none | PATH -> a complete checkpoint directory or "".
#include <filesystem>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/file_io.hpp"
#include "runtime/error.hpp"

namespace lockstep::ckpt {
namespace {

namespace fs = std::filesystem;

bool complete(const std::string& dir) {
  return path_exists((fs::path(dir) / "meta.json").string());
}

// The directory root/latest names, or "" if there is no latest file.
std::string latest_of(const std::string& root) {
  const std::string latest = (fs::path(root) / "latest").string();
  if (!path_exists(latest)) return "";
  std::string name = read_text_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' '))
    name.pop_back();
  check(
      !name.empty() && name.find('/') == std::string::npos && name.find("..") == std::string::npos,
      "'" + latest + "' does not name a checkpoint directory (it holds \"" + name + "\")",
      "delete it to start fresh, or resume from an explicit checkpoint directory");
  return (fs::path(root) / name).string();
}

}  // namespace

std::string resolve_resume(const std::string& resume, const std::string& root) {
  if (resume.empty() || resume == "none") return "";
  if (resume == "auto") {
    const std::string dir = latest_of(root);
    return !dir.empty() && complete(dir) ? dir : "";
  }
  if (complete(resume)) return resume;
  const std::string dir = latest_of(resume);
  check(!dir.empty(),
        "run.resume = '" + resume + "' holds no complete checkpoint (no meta.json, no latest)",
        "pass a checkpoint directory (…/checkpoints/step_<8 digits>) or a checkpoints root");
  check(complete(dir),
        "run.resume = '" + resume + "': its latest names '" + dir +
            "', which is not a complete checkpoint (no meta.json)",
        "pass an explicit complete checkpoint directory");
  return dir;
}

}  // namespace lockstep::ckpt
