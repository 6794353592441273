#include "optim/grad_norm.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/collectives.hpp"
#include "runtime/comm.hpp"
#include "runtime/error.hpp"

namespace lockstep {

namespace {

__extension__ typedef unsigned __int128 u128;

constexpr std::uint64_t kDigitMask = 0xffffffffull;
// Each add() step raises a digit limb by < 2^32; after 2^31 steps a limb that started
// below 2^32 is still below 2^32 + 2^63 < 2^64.
constexpr std::uint64_t kMaxPending = std::uint64_t{1} << 31;

// The normalized value as plain base-2^32 digits (the top limb, which may exceed 32 bits,
// split into two digits), least significant first.
std::vector<std::uint32_t> digits_of(
    const std::array<std::uint64_t, SquareSumAccumulator::kLimbs>& l) {
  constexpr int D = SquareSumAccumulator::kDigits;
  std::vector<std::uint32_t> d(D + 1);
  for (int k = 0; k < D; ++k) d[k] = static_cast<std::uint32_t>(l[k] & kDigitMask);
  d[D] = static_cast<std::uint32_t>(l[D - 1] >> 32);
  return d;
}

}  // namespace

void SquareSumAccumulator::add(std::span<const float> x) {
  // Two exact stages. (1) Per batch of up to kBatch elements, the squared significands
  // m^2 (< 2^48) are summed per exponent into uint64 buckets: a bucket receives at most
  // kBatch / kTables elements, so each table's bucket stays below 2^62 and the sum of the
  // tables below 2^64. Subnormals (biased exponent 0) have the scale of exponent 1 and share
  // its bucket; zeros add 0 there. Four tables used in rotation keep neighbouring elements
  // (which mostly share an exponent) off one read-modify-write chain. (2) Each nonzero
  // bucket (sum < 2^64, shifted by < 32: three digits) is added into the digit limbs, one
  // pending digit addition per bucket. Both stages are integer additions, so the value is
  // the same as adding every square on its own.
  constexpr std::size_t kBatch = std::size_t{1} << 16;
  constexpr int kTables = 4;
  alignas(64) std::uint64_t bucket[kTables][256];
  std::uint64_t* limb = limb_.data();
  const float* data = x.data();
  for (std::size_t i0 = 0; i0 < x.size(); i0 += kBatch) {
    const std::size_t n = std::min(kBatch, x.size() - i0);
    std::memset(bucket, 0, sizeof bucket);
    auto one = [&](std::uint64_t* table, float f) {
      std::uint32_t u;
      std::memcpy(&u, &f, sizeof u);
      const std::uint32_t biased = (u >> 23) & 0xffu;
      const std::uint64_t m = (u & 0x7fffffu) | (biased != 0 ? 0x800000u : 0u);
      // biased 255 (inf, NaN) lands in bucket 255, which stage 2 replaces by the counts.
      table[biased != 0 ? biased : 1u] += m * m;
    };
    const float* p = data + i0;
    std::size_t i = 0;
    for (; i + kTables <= n; i += kTables)
      for (int t = 0; t < kTables; ++t) one(bucket[t], p[i + t]);
    for (; i < n; ++i) one(bucket[0], p[i]);
    // A non-finite element put m^2 >= 2^46 (implicit bit set) into bucket 255: count them.
    if ((bucket[0][255] | bucket[1][255] | bucket[2][255] | bucket[3][255]) != 0) {
      for (std::size_t k = 0; k < n; ++k) {
        std::uint32_t u;
        std::memcpy(&u, &p[k], sizeof u);
        if (((u >> 23) & 0xffu) == 0xffu) ++limb[(u & 0x7fffffu) != 0 ? kNanLimb : kInfLimb];
      }
    }
    if (pending_ + 256 >= kMaxPending) normalize();
    for (int e = 1; e < 255; ++e) {
      std::uint64_t sum = 0;
      for (int t = 0; t < kTables; ++t) sum += bucket[t][e];
      if (sum == 0) continue;
      // m^2 * 2^(2e - 300) = m^2 * 2^(s + kLsbExponent) with s = 2e - 2 in [0, 506].
      const int s = 2 * e - 2;
      const int d = s >> 5;
      const u128 w = static_cast<u128>(sum) << (s & 31);  // < 2^96: three digits
      limb[d] += static_cast<std::uint64_t>(w) & kDigitMask;
      limb[d + 1] += static_cast<std::uint64_t>(w >> 32) & kDigitMask;
      limb[d + 2] += static_cast<std::uint64_t>(w >> 64);
      ++pending_;
    }
  }
}

void SquareSumAccumulator::merge(const SquareSumAccumulator& other) {
  SquareSumAccumulator o = other;
  o.normalize();
  normalize();
  for (int k = 0; k < kLimbs; ++k) limb_[k] += o.limb_[k];
  normalize();  // digits were up to 2^33
}

void SquareSumAccumulator::normalize() {
  u128 carry = 0;
  for (int k = 0; k < kDigits; ++k) {
    const u128 t = static_cast<u128>(limb_[k]) + carry;
    if (k + 1 < kDigits) {
      limb_[k] = static_cast<std::uint64_t>(t) & kDigitMask;
      carry = t >> 32;
    } else {
      check((t >> 64) == 0, "gradient norm superaccumulator overflow",
            "more than 2^64 squares of the largest float were summed; this cannot happen "
            "for a real model");
      limb_[k] = static_cast<std::uint64_t>(t);
    }
  }
  pending_ = 0;
}

std::span<std::uint64_t> SquareSumAccumulator::limbs() {
  normalize();
  return {limb_.data(), limb_.size()};
}

bool SquareSumAccumulator::is_zero() const {
  SquareSumAccumulator c = *this;
  c.normalize();
  for (int k = 0; k < kDigits; ++k)
    if (c.limb_[k] != 0) return false;
  return true;
}

double SquareSumAccumulator::sum_as_double() const {
  if (has_nan()) return std::numeric_limits<double>::quiet_NaN();
  if (has_inf()) return std::numeric_limits<double>::infinity();
  SquareSumAccumulator c = *this;
  c.normalize();
  const std::vector<std::uint32_t> dig = digits_of(c.limb_);
  int top = static_cast<int>(dig.size()) - 1;
  while (top >= 0 && dig[top] == 0) --top;
  if (top < 0) return 0.0;
  // Bit length of the integer: bits [0, L) with bit L-1 set.
  const int L = 32 * top + std::bit_width(dig[top]);
  auto bit = [&](int p) -> std::uint64_t { return (dig[p >> 5] >> (p & 31)) & 1u; };
  if (L <= 53) {
    std::uint64_t v = 0;
    for (int p = L - 1; p >= 0; --p) v = (v << 1) | bit(p);
    return std::ldexp(static_cast<double>(v), kLsbExponent);  // exact
  }
  // Keep the top 53 bits; round to nearest, ties to even, on the bit below and the sticky
  // OR of everything further down.
  const int shift = L - 53;
  std::uint64_t mant = 0;
  for (int p = L - 1; p >= shift; --p) mant = (mant << 1) | bit(p);
  const bool round_bit = bit(shift - 1) != 0;
  bool sticky = false;
  for (int p = 0; p < shift - 1 && !sticky; ++p) {
    if ((p & 31) == 0 && p + 32 <= shift - 1) {  // a whole digit below the round bit
      sticky = dig[p >> 5] != 0;
      p += 31;
    } else {
      sticky = bit(p) != 0;
    }
  }
  if (round_bit && (sticky || (mant & 1))) ++mant;  // mant may become 2^53: still exact
  // The result lies in [2^-298, 2^342]: a normal double, so ldexp is exact.
  return std::ldexp(static_cast<double>(mant), shift + kLsbExponent);
}

float SquareSumAccumulator::norm() const {
  return static_cast<float>(std::sqrt(sum_as_double()));
}

std::string SquareSumAccumulator::exact_hex() const {
  SquareSumAccumulator c = *this;
  c.normalize();
  const std::vector<std::uint32_t> dig = digits_of(c.limb_);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (int k = static_cast<int>(dig.size()) - 1; k >= 0; --k)
    for (int sh = 28; sh >= 0; sh -= 4) {
      const char ch = kHex[(dig[k] >> sh) & 15u];
      if (out.empty() && ch == '0') continue;
      out += ch;
    }
  return out.empty() ? "0" : out;
}

bool SquareSumAccumulator::operator==(const SquareSumAccumulator& other) const {
  SquareSumAccumulator a = *this, b = other;
  a.normalize();
  b.normalize();
  return a.limb_ == b.limb_;
}

void allreduce_square_sum(const Communicator& comm, SquareSumAccumulator& acc) {
  allreduce_u64(comm, acc.limbs(), IntOp::sum);
  acc.normalize();
}

float l2_norm_exact(std::span<const float> x) {
  SquareSumAccumulator acc;
  acc.add(x);
  return acc.norm();
}

}  // namespace lockstep
