#include "ops/gelu.hpp"

#include <algorithm>
#include <cmath>

#include "common/parallel.hpp"
#include "common/simd.hpp"

namespace sdscore {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr size_t kChunk = 16384;  // elements per parallel work item (whole rows)

// One row (or a bias-free run) of n values; bias null or n entries.
void gelu_generic(float* x, size_t n, const float* bias) {
  for (size_t i = 0; i < n; ++i) {
    const float v = bias ? x[i] + bias[i] : x[i];
    x[i] = 0.5f * v * (1.0f + std::erf(v * kInvSqrt2));
  }
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

SDSCORE_TARGET_AVX2 void gelu_avx2(float* x, size_t n, const float* bias) {
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(kInvSqrt2);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
    const __m256 e = erf256(_mm256_mul_ps(v, k));
    _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_mul_ps(half, v), _mm256_add_ps(one, e)));
  }
  if (i < n) {  // the tail through a padded vector, so every element sees the same erf
    float tail[8] = {}, tail_bias[8] = {};
    std::copy(x + i, x + n, tail);
    if (bias) std::copy(bias + i, bias + n, tail_bias);
    gelu_avx2(tail, 8, bias ? tail_bias : nullptr);
    std::copy(tail, tail + (n - i), x + i);
  }
}
#endif

using GeluFn = void (*)(float*, size_t, const float*);

GeluFn pick() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  if (use_avx2()) return gelu_avx2;
#endif
  return gelu_generic;
}

}  // namespace

const char* gelu_isa() { return pick() == gelu_generic ? "generic" : "avx2+fma"; }

void gelu_inplace(float* x, size_t rows, size_t cols, const float* bias, size_t num_threads) {
  static const GeluFn fn = pick();
  const size_t n = rows * cols;
  if (n == 0) return;
  if (!bias) {  // one flat run of n values
    parallel_for((n + kChunk - 1) / kChunk, num_threads, [&](size_t c) {
      fn(x + c * kChunk, std::min(kChunk, n - c * kChunk), nullptr);
    });
    return;
  }
  const size_t per = std::max<size_t>(1, kChunk / cols);  // whole rows per work item
  parallel_for((rows + per - 1) / per, num_threads, [&](size_t c) {
    for (size_t r = c * per; r < std::min(rows, (c + 1) * per); ++r) fn(x + r * cols, cols, bias);
  });
}

}  // namespace sdscore
