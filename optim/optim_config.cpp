#include "optim/optim_config.hpp"

namespace lockstep {

std::vector<std::string> optim_config_problems(const OptimConfig& c) {
  std::vector<std::string> p;
  auto need = [&](bool ok, const char* msg) {
    if (!ok) p.emplace_back(msg);
  };
  const LrScheduleConfig& s = c.schedule;
  const AdamWConfig& a = c.adamw;
  need(s.lr >= 0 && s.min_lr >= 0 && s.min_lr <= s.lr,
       "optim.lr and optim.min_lr must satisfy 0 <= min_lr <= lr");
  need(s.warmup >= 0, "optim.warmup must be >= 0");
  need(a.beta1 >= 0 && a.beta1 < 1 && a.beta2 >= 0 && a.beta2 < 1,
       "optim.beta1 and optim.beta2 must be in [0, 1)");
  need(a.eps > 0, "optim.eps must be > 0");
  need(c.clip >= 0, "optim.clip must be >= 0 (0 disables clipping)");
  return p;
}

}  // namespace lockstep
