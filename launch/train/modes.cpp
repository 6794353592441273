#include "launch/train/modes.hpp"

#include <algorithm>

#include "runtime/error.hpp"
#include "runtime/text.hpp"

namespace lockstep::config {

const std::vector<std::string>& run_modes() {
  static const std::vector<std::string> modes = {"fast", "deterministic", "invariant",
                                                 "invariant+verify", "invariant+optrace"};
  return modes;
}

std::string run_modes_text() {
  return join_list(run_modes(), ", ");
}

bool is_run_mode(const std::string& mode) {
  const auto& m = run_modes();
  return std::find(m.begin(), m.end(), mode) != m.end();
}

std::vector<std::string> run_mode_sets(const std::string& mode, std::int64_t steps) {
  if (mode == "fast" || mode == "deterministic" || mode == "invariant")
    return {"run.determinism=" + mode, "verify.replica_check_interval=0"};
  if (mode == "invariant+verify")
    return {"run.determinism=invariant", "verify.replica_check_interval=1"};
  if (mode == "invariant+optrace")
    return {"run.determinism=invariant", "verify.replica_check_interval=1",
            "verify.ops=1-" + std::to_string(steps)};
  fail("unknown mode '" + mode + "'", "modes: " + run_modes_text());
}

Config with_run_mode(const Config& cfg, const std::string& mode) {
  Config c = cfg;
  for (const auto& s : run_mode_sets(mode, cfg.run.steps)) apply_override(c, s);
  return c;
}

}  // namespace lockstep::config
