// resolve_resume(): run.resume = auto | none | PATH -> a complete checkpoint directory or "";
// agree_resume(): the same decision taken once, by rank 0, and checked on every rank.
#include <filesystem>
#include <limits>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/file_io.hpp"
#include "runtime/collectives.hpp"
#include "runtime/error.hpp"
#include "runtime/hash.hpp"

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

namespace {

constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

// The directory a rank opens for the step rank 0 chose: run.resume itself when it is one
// checkpoint directory, else step_<N> under the root it names (run.resume = auto: `root`).
std::string dir_for_step(const std::string& resume, const std::string& root, std::int64_t step) {
  if (resume != "auto" && complete(resume)) return resume;
  const std::string base = resume == "auto" ? root : resume;
  return (fs::path(base) / step_dir_name(step)).string();
}

// dir/meta.json's bytes ("" when it is missing).
std::string meta_text(const std::string& dir) {
  const std::string path = (fs::path(dir) / "meta.json").string();
  return path_exists(path) ? read_text_file(path) : std::string();
}

std::uint64_t text_hash(const std::string& text) {
  return text.empty() ? kNone : xxh3_64(text.data(), text.size());
}

}  // namespace

Meta agree_resume(const Communicator& world, const std::string& resume, const std::string& root) {
  const bool root_rank = world.rank() == 0;
  std::string dir = root_rank ? resolve_resume(resume, root) : "";
  std::string text = dir.empty() ? "" : meta_text(dir);
  std::uint64_t chosen[2] = {0, 0};  // {step + 1 (0: fresh run), meta hash}, summed from rank 0
  if (!text.empty()) {
    chosen[0] = static_cast<std::uint64_t>(parse_meta(text, dir + "/meta.json").step) + 1;
    chosen[1] = text_hash(text);
  }
  allreduce_u64(world, chosen, IntOp::sum);
  if (chosen[0] == 0) return Meta{};
  const auto step = static_cast<std::int64_t>(chosen[0] - 1);
  if (!root_rank) {
    dir = dir_for_step(resume, root, step);
    text = meta_text(dir);
  }
  const bool same = text_hash(text) == chosen[1];
  std::uint64_t count = same ? 0 : 1;
  std::uint64_t first = same ? kNone : static_cast<std::uint64_t>(world.rank());
  allreduce_u64(world, std::span<std::uint64_t>(&count, 1), IntOp::sum);
  allreduce_u64(world, std::span<std::uint64_t>(&first, 1), IntOp::min);
  check(count == 0,
        "the run directory changed under the job: rank 0 chose checkpoint step " +
            std::to_string(step) + " (" + dir + "), but " + std::to_string(count) +
            " rank(s), the first rank " + std::to_string(first) +
            ", read another meta.json there (or none)",
        "another job, or ranks of a killed one, is writing this run directory: stop it (its "
        "rank 0 holds run.out/.lock) and resume again");
  Meta meta = parse_meta(text, dir + "/meta.json");
  meta.dir = dir;
  return meta;
}

}  // namespace lockstep::ckpt
