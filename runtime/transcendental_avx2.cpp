// The avx2 path of the transcendentals' array loops: runtime/transcendental_impl.hpp over
// simd::Avx2 (compiled with the avx2 flags; reached only through runtime/transcendental.cpp's
// dispatch after isa_supported(Isa::avx2)). Same bits as the scalar path (docs/design.md
// section 2).
#include "runtime/simd_avx2.hpp"
#include "runtime/transcendental_impl.hpp"

namespace lockstep::math::detail {

LOCKSTEP_MATH_DEFINE(avx2, simd::Avx2)

}  // namespace lockstep::math::detail
