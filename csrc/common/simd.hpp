// What the hand-vectorised kernels share: the AVX2+FMA target attribute (per function, so no
// translation unit is compiled with -mavx2), an 8 x 8 transpose, a horizontal sum, and the
// run-time switch.
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

// True when use_avx2() and the CPU has AVX-512F, unless SDSCORE_DISABLE_AVX512 is set to something
// other than "" or "0" (tests and benches run the AVX2 kernels on an AVX-512 CPU with it).
bool use_avx512();

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// In place: rows r[0..8) of an 8 x 8 block become its columns.
SDSCORE_TARGET_AVX2 inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

SDSCORE_TARGET_AVX2 inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

}  // namespace sdscore
