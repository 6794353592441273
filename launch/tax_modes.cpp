#include "launch/tax_modes.hpp"

#include <algorithm>

#include "launch/subprocess.hpp"
#include "runtime/error.hpp"

namespace lockstep::config {

const std::vector<std::string>& tax_modes() {
  static const std::vector<std::string> modes = {"fast", "deterministic", "invariant",
                                                 "invariant+verify", "invariant+optrace"};
  return modes;
}

std::string tax_modes_text() {
  return proc::join_list(tax_modes(), ", ");
}

bool is_tax_mode(const std::string& mode) {
  const auto& m = tax_modes();
  return std::find(m.begin(), m.end(), mode) != m.end();
}

std::vector<std::string> tax_mode_list(const std::string& list) {
  return proc::split_list(list);
}

std::vector<std::string> tax_mode_sets(const std::string& mode, std::int64_t steps) {
  if (mode == "fast" || mode == "deterministic" || mode == "invariant")
    return {"run.determinism=" + mode, "verify.replica_check_interval=0"};
  if (mode == "invariant+verify")
    return {"run.determinism=invariant", "verify.replica_check_interval=1"};
  if (mode == "invariant+optrace")
    return {"run.determinism=invariant", "verify.replica_check_interval=1",
            "verify.ops=1-" + std::to_string(steps)};
  fail("unknown mode '" + mode + "'", "modes: " + tax_modes_text());
}

Config with_tax_mode(const Config& cfg, const std::string& mode) {
  Config c = cfg;
  for (const auto& s : tax_mode_sets(mode, cfg.run.steps)) apply_override(c, s);
  return c;
}

}  // namespace lockstep::config
