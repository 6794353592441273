// The avx512 path of the transcendentals' array loops: runtime/transcendental_impl.hpp over
// simd::Avx512 (compiled with the avx512 flags; reached only through runtime/transcendental.cpp's
// dispatch after isa_supported(Isa::avx512)). Same bits as the scalar path (docs/design.md
// section 2).
#include "runtime/simd_avx512.hpp"
#include "runtime/transcendental_impl.hpp"

namespace lockstep::math::detail {

LOCKSTEP_MATH_DEFINE(avx512, simd::Avx512)

}  // namespace lockstep::math::detail
