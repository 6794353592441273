#include "runtime/philox.hpp"

namespace lockstep {

namespace {
constexpr uint32_t kM0 = 0xD2511F53u;
constexpr uint32_t kM1 = 0xCD9E8D57u;
constexpr uint32_t kW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1

inline PhiloxCounter philox_round(PhiloxCounter c, PhiloxKey k) {
  uint64_t p0 = uint64_t(kM0) * c[0];
  uint64_t p1 = uint64_t(kM1) * c[2];
  return {uint32_t(p1 >> 32) ^ c[1] ^ k.k0, uint32_t(p1), uint32_t(p0 >> 32) ^ c[3] ^ k.k1,
          uint32_t(p0)};
}
}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter ctr, PhiloxKey key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.k0 += kW0;
      key.k1 += kW1;
    }
    ctr = philox_round(ctr, key);
  }
  return ctr;
}

}  // namespace lockstep
