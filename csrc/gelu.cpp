#include "gelu.hpp"

#include <algorithm>
#include <cmath>

#include "parallel.hpp"
#include "simd.hpp"

namespace sdscore {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr size_t kChunk = 16384;  // elements per parallel work item

void gelu_generic(float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// erf(z) for float: z clamped to [-4, 4] (erf is +-1 in float beyond), then an odd degree-13 over
// an even degree-8 polynomial in z (the rational approximation of Eigen / XLA's float erf).
SDSCORE_TARGET_AVX2 inline __m256 erf256(__m256 z) {
  z = _mm256_min_ps(_mm256_max_ps(z, _mm256_set1_ps(-4.0f)), _mm256_set1_ps(4.0f));
  const __m256 z2 = _mm256_mul_ps(z, z);
  __m256 p = _mm256_fmadd_ps(z2, _mm256_set1_ps(-2.72614225801306e-10f), _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(z2, p, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(z2, p, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(z2, p, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(z2, p, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(z2, p, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(z, p);
  __m256 q = _mm256_fmadd_ps(z2, _mm256_set1_ps(-1.45660718464996e-05f), _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(z2, q, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(z2, q, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(z2, q, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

SDSCORE_TARGET_AVX2 void gelu_avx2(float* x, size_t n) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(kInvSqrt2);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 e = erf256(_mm256_mul_ps(v, k));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));
  }
  if (i < n) {  // the tail through a padded vector, so every element sees the same erf
    float tail[8] = {};
    std::copy(x + i, x + n, tail);
    gelu_avx2(tail, 8);
    std::copy(tail, tail + (n - i), x + i);
  }
}
#endif

using GeluFn = void (*)(float*, size_t);

GeluFn pick() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  if (use_avx2()) return gelu_avx2;
#endif
  return gelu_generic;
}

}  // namespace

const char* gelu_isa() { return pick() == gelu_generic ? "generic" : "avx2+fma"; }

void gelu_inplace(float* x, size_t n, size_t num_threads) {
  static const GeluFn fn = pick();
  const size_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, num_threads, [&](size_t c) {
    const size_t a = c * kChunk;
    fn(x + a, std::min(kChunk, n - a));
  });
}

}  // namespace sdscore
