// The global gradient norm ||g||_2 over every gradient element of the model, computed
// EXACTLY and order-free so that its bits never depend on the layout (docs/design.md section 2,
// "Gradient norm"): the sum of squares is accumulated without any rounding in a wide
// fixed-point superaccumulator, and rounded once at the end.
//
// Why it is exact: a float32 x = m * 2^e (m < 2^24, -149 <= e <= 104) has the square
// m^2 * 2^(2e), an integer of at most 48 bits times a power of two in [2^-298, 2^208].
// Every square is therefore an integer multiple of 2^-298 below 2^556, and a sum of up to
// 2^64 of them fits a 640-bit integer in units of 2^-298. SquareSumAccumulator holds that
// integer as 20 base-2^32 digits, each in a uint64 limb, so a limb can absorb 2^31 further
// digit additions before a carry must move up (normalize() does that; add() calls it
// itself). Integer addition is associative, so any partition of the elements into chunks,
// threads or ranks, in any order, gives the identical sum; accumulators merge by adding
// limbs (merge(), or allreduce_u64(limbs(), IntOp::sum) across ranks).
// Speed: add() first sums the 48-bit squared significands per exponent in uint64 buckets
// (batches of 2^16 elements, so a bucket cannot overflow) and then adds each bucket into the
// limbs once; about 0.9 ns per element on one core (the per-element limb updates took 3.0).
// Non-finite inputs are counted, not summed: two more limbs count NaNs and infinities
// (a NaN anywhere makes the norm NaN; otherwise an infinity makes it +inf), and they also
// merge by plain addition.
// Rounding: sum_as_double() is the exact sum correctly rounded to float64 (round to
// nearest, ties to even; the sum is always a normal double or zero); norm() is
// (float)sqrt(sum_as_double()), i.e. IEEE sqrt in double then one rounding to float.
// Determinism contract: every result is a pure function of the multiset of values added.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace lockstep {

class Communicator;

class SquareSumAccumulator {
 public:
  static constexpr int kDigitBits = 32;
  static constexpr int kDigits = 20;            // 640 bits of fixed point
  static constexpr int kLsbExponent = -298;     // weight of bit 0: the square of 2^-149
  static constexpr int kNanLimb = kDigits;      // count of NaN inputs
  static constexpr int kInfLimb = kDigits + 1;  // count of +-inf inputs
  static constexpr int kLimbs = kDigits + 2;

  // Adds x^2 for every x (exactly).
  void add(std::span<const float> x);
  void add(float x) { add(std::span<const float>(&x, 1)); }
  // Adds another accumulator's sum (exactly).
  void merge(const SquareSumAccumulator& other);

  // Moves carries so that every digit limb is < 2^32 (the top one holds the rest). The
  // value is unchanged. Safe to call at any time; every reader below calls it.
  void normalize();
  // The raw limbs (normalized first), for combining across ranks with
  //   allreduce_u64(comm, acc.limbs(), IntOp::sum);
  // Summing the normalized limbs of up to 2^31 ranks cannot overflow a limb. Prefer
  // allreduce_square_sum() below, which does exactly that.
  std::span<std::uint64_t> limbs();

  bool has_nan() const { return limb_[kNanLimb] != 0; }
  bool has_inf() const { return limb_[kInfLimb] != 0; }
  bool is_zero() const;
  // The exact sum of squares, correctly rounded to float64 (NaN if a NaN was added, else
  // +inf if an infinity was added).
  double sum_as_double() const;
  // (float)sqrt(sum_as_double()).
  float norm() const;
  // The exact finite part as hex digits of the integer in units of 2^-298 (tests, logs).
  std::string exact_hex() const;
  // Exact equality of the represented values and non-finite counts.
  bool operator==(const SquareSumAccumulator& other) const;

 private:
  std::array<std::uint64_t, kLimbs> limb_{};
  std::uint64_t pending_ = 0;  // digit additions since the last normalize()
};

// Collective over `comm`: every rank's accumulator becomes the exact sum of all ranks'
// accumulators (an exact integer allreduce of the limbs; layout-invariant for any number
// of ranks, power of two or not).
void allreduce_square_sum(const Communicator& comm, SquareSumAccumulator& acc);

// Convenience: the L2 norm of one span, exactly as a SquareSumAccumulator computes it.
float l2_norm_exact(std::span<const float> x);

}  // namespace lockstep
