// What the hand-vectorised kernels share: the AVX2+FMA target attribute (per function, so no
// translation unit is compiled with -mavx2), a horizontal sum, and the run-time switch.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SDSCORE_HAVE_AVX2_KERNELS 1
#define SDSCORE_TARGET_AVX2 __attribute__((target("avx2,fma")))
#endif

namespace sdscore {

// True unless SDSCORE_DISABLE_SIMD is set to something other than "" or "0" (read once);
// tests set it to check the portable loops against the vector ones.
bool simd_allowed();

// True when the CPU has AVX2 and FMA and simd_allowed().
bool use_avx2();

#ifdef SDSCORE_HAVE_AVX2_KERNELS
SDSCORE_TARGET_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace sdscore
