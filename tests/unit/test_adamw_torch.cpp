// One AdamW step against torch.optim.AdamW (PyTorch 1.13 from Debian, run as a child
// process on the same arrays). Reports how many elements are bitwise equal and requires
// agreement within one float32 rounding of the update (relative 2e-6 of |p|, absolute
// 1e-9 near zero). `launch/lockstep setup` installs python3-torch, so CI runs the check.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "optim/adamw.hpp"
#include "tests/support/test_data.hpp"

using namespace lockstep;
namespace fs = std::filesystem;

namespace {
void write_f32(const fs::path& p, const std::vector<float>& v) {
  std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}
std::vector<float> read_f32(const fs::path& p, std::size_t n) {
  std::vector<float> v(n);
  std::ifstream(p, std::ios::binary).read(reinterpret_cast<char*>(v.data()), n * 4);
  return v;
}
}  // namespace

TEST_CASE("one AdamW step matches torch.optim.AdamW") {
  const std::size_t n = 4096;
  auto p = lockstep::testing::mixed_floats(n, 1), g = lockstep::testing::mixed_floats(n, 2);
  auto m = lockstep::testing::mixed_floats(n, 3), v = lockstep::testing::mixed_floats(n, 4);
  for (auto& x : m) x *= 0.1f;
  for (auto& x : v) x = x * x * 0.01f;  // second moments are non-negative
  const fs::path dir = fs::temp_directory_path() / ("lockstep_adamw_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  write_f32(dir / "p.f32", p), write_f32(dir / "g.f32", g), write_f32(dir / "m.f32", m),
      write_f32(dir / "v.f32", v);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const double lr = 3e-4;
  const std::int64_t step = 3;
  std::ofstream(dir / "meta.json")
      << "{\"lr\": " << lr << ", \"beta1\": 0.9, \"beta2\": 0.95, "
      << "\"eps\": 1e-8, \"weight_decay\": 0.1, \"step\": " << step << "}";
  const std::string script = std::string(LOCKSTEP_SOURCE_DIR) + "/tests/reference/adamw_torch.py";
  const int rc = std::system(("/usr/bin/python3 " + script + " " + dir.string()).c_str());
  INFO("exit 77: /usr/bin/python3 cannot import torch; run launch/lockstep setup");
  REQUIRE(rc == 0);
  adamw_step(AdamWHyper::at(cfg, lr, step, true), p, g, m, v);
  const auto tp = read_f32(dir / "p_out.f32", n), tm = read_f32(dir / "m_out.f32", n),
             tv = read_f32(dir / "v_out.f32", n);
  std::size_t same_p = 0, same_m = 0, same_v = 0;
  for (std::size_t i = 0; i < n; ++i) {
    same_p += lockstep::testing::bits(p[i]) == lockstep::testing::bits(tp[i]);
    same_m += lockstep::testing::bits(m[i]) == lockstep::testing::bits(tm[i]);
    same_v += lockstep::testing::bits(v[i]) == lockstep::testing::bits(tv[i]);
    INFO("element " << i);
    REQUIRE(std::fabs(p[i] - tp[i]) <= 2e-6f * std::fabs(tp[i]) + 1e-9f);
    REQUIRE(std::fabs(m[i] - tm[i]) <= 2e-6f * std::fabs(tm[i]) + 1e-12f);
    REQUIRE(std::fabs(v[i] - tv[i]) <= 2e-6f * std::fabs(tv[i]) + 1e-15f);
  }
  WARN("bitwise equal to torch: params " << same_p << "/" << n << ", m " << same_m << "/" << n
                                         << ", v " << same_v << "/" << n);
  fs::remove_all(dir);
}
