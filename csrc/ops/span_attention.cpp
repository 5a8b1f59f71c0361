#include "ops/span_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "common/simd.hpp"

namespace sdscore {
namespace {

struct Problem {
  const float* qkv;
  size_t L, H, D;
  float scale;
  float* out;
  size_t pos_stride() const { return 3 * H * D; }
  const float* q(size_t b, size_t i, size_t h) const { return qkv + (b * L + i) * pos_stride() + h * D; }
  const float* k(size_t b, size_t i, size_t h) const { return q(b, i, h) + H * D; }
  const float* v(size_t b, size_t i, size_t h) const { return q(b, i, h) + 2 * H * D; }
  float* o(size_t b, size_t i, size_t h) const { return out + (b * L + i) * H * D + h * D; }
};

// Portable loops: one query at a time, std::exp. Also the reference the vector kernel is tested on.
void head_generic(const Problem& p, size_t b, size_t h, size_t start, size_t n) {
  std::vector<float> s(n);
  for (size_t i = start; i < start + n; ++i) {
    const float* q = p.q(b, i, h);
    float peak = -INFINITY;
    for (size_t j = 0; j < n; ++j) {
      const float* k = p.k(b, start + j, h);
      float acc = 0.0f;
      for (size_t d = 0; d < p.D; ++d) acc += q[d] * k[d];
      s[j] = acc * p.scale;
      peak = std::max(peak, s[j]);
    }
    float total = 0.0f;
    for (size_t j = 0; j < n; ++j) total += (s[j] = std::exp(s[j] - peak));
    float* o = p.o(b, i, h);
    std::fill(o, o + p.D, 0.0f);
    for (size_t j = 0; j < n; ++j) {
      const float* v = p.v(b, start + j, h);
      for (size_t d = 0; d < p.D; ++d) o[d] += s[j] * v[d];
    }
    for (size_t d = 0; d < p.D; ++d) o[d] /= total;
  }
}

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// exp for x <= 0 (softmax after subtracting the max): Cephes' expf, 2^n * P(r) with a
// degree-6 polynomial; relative error ~1e-7. Inputs below -87 give ~0.
SDSCORE_TARGET_AVX2 inline __m256 exp256(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f),
                                                    _mm256_set1_ps(0.5f)));
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

SDSCORE_TARGET_AVX2 inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// One (row, head): keys transposed into kt [D][m] (m = n rounded up to 16, zero-filled), values
// gathered into vg [n][D]; then R queries at a time: scores of 16 keys per pass (two registers),
// exp, and the weighted sum of values with NV = D / 8 registers per query.
template <int NV, int R>
SDSCORE_TARGET_AVX2 void head_avx2(const Problem& p, size_t b, size_t h, size_t start, size_t n,
                                   std::vector<float>& scratch) {
  constexpr size_t D = 8 * NV;
  const size_t m = (n + 15) & ~size_t(15);  // keys are scored 16 at a time
  scratch.resize(D * m + n * D + R * m);
  float* kt = scratch.data();
  float* vg = kt + D * m;
  float* s = vg + n * D;
  std::fill(kt, kt + D * m, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    const float* k = p.k(b, start + j, h);
    for (size_t d = 0; d < D; ++d) kt[d * m + j] = k[d];
    std::memcpy(vg + j * D, p.v(b, start + j, h), D * sizeof(float));
  }
  const __m256 scale = _mm256_set1_ps(p.scale);
  const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 count = _mm256_set1_ps(static_cast<float>(n));
  for (size_t i0 = 0; i0 < n; i0 += R) {
    const float* q[R];
    for (int r = 0; r < R; ++r) q[r] = p.q(b, start + std::min(i0 + r, n - 1), h);
    __m256 peak[R];
    for (int r = 0; r < R; ++r) peak[r] = _mm256_set1_ps(-INFINITY);
    for (size_t j = 0; j < m; j += 16) {
      // two blocks of 8 keys per pass: each broadcast query element feeds two FMAs
      __m256 lo[R], hi[R];
      for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
      for (size_t d = 0; d < D; ++d) {
        const __m256 k0 = _mm256_loadu_ps(kt + d * m + j), k1 = _mm256_loadu_ps(kt + d * m + j + 8);
        for (int r = 0; r < R; ++r) {
          const __m256 qd = _mm256_set1_ps(q[r][d]);
          lo[r] = _mm256_fmadd_ps(qd, k0, lo[r]);
          hi[r] = _mm256_fmadd_ps(qd, k1, hi[r]);
        }
      }
      // keys past n (the zero padding of the last block) must get no weight
      const __m256 at = _mm256_add_ps(lane, _mm256_set1_ps(static_cast<float>(j)));
      const __m256 valid_lo = _mm256_cmp_ps(at, count, _CMP_LT_OQ);
      const __m256 valid_hi = _mm256_cmp_ps(_mm256_add_ps(at, _mm256_set1_ps(8.0f)), count, _CMP_LT_OQ);
      const __m256 none = _mm256_set1_ps(-INFINITY);
      for (int r = 0; r < R; ++r) {
        const __m256 s0 = _mm256_blendv_ps(none, _mm256_mul_ps(lo[r], scale), valid_lo);
        const __m256 s1 = _mm256_blendv_ps(none, _mm256_mul_ps(hi[r], scale), valid_hi);
        _mm256_storeu_ps(s + r * m + j, s0);
        _mm256_storeu_ps(s + r * m + j + 8, s1);
        peak[r] = _mm256_max_ps(peak[r], _mm256_max_ps(s0, s1));
      }
    }
    float total[R];
    for (int r = 0; r < R; ++r) {
      const __m256 top = _mm256_set1_ps(hmax(peak[r]));
      __m256 sum = _mm256_setzero_ps();
      for (size_t j = 0; j < m; j += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + r * m + j), top));
        _mm256_storeu_ps(s + r * m + j, e);
        sum = _mm256_add_ps(sum, e);
      }
      total[r] = hsum(sum);
    }
    __m256 acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_setzero_ps();
    for (size_t j = 0; j < n; ++j) {
      __m256 v[NV];
      for (int c = 0; c < NV; ++c) v[c] = _mm256_loadu_ps(vg + j * D + 8 * c);
      for (int r = 0; r < R; ++r) {
        const __m256 w = _mm256_set1_ps(s[r * m + j]);
        for (int c = 0; c < NV; ++c) acc[r][c] = _mm256_fmadd_ps(w, v[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R && i0 + r < n; ++r) {
      const __m256 inv = _mm256_set1_ps(1.0f / total[r]);
      float* o = p.o(b, start + i0 + r, h);
      for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o + 8 * c, _mm256_mul_ps(acc[r][c], inv));
    }
  }
}
#endif

#ifdef SDSCORE_HAVE_AVX2_KERNELS
#define SDSCORE_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
// GCC 12 flags the _mm512_undefined_ps() inside its own _mm512_max_ps as "may be used
// uninitialized" (a false positive of the intrinsics header; as in rnn/lstm.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// exp256 on 16 lanes (the same polynomial and steps, so each lane's value is the same).
SDSCORE_TARGET_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
  const __m512 fx = _mm512_roundscale_ps(
      _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
  x = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), x);
  __m512 y = _mm512_set1_ps(1.9875691500e-4f);
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.3981999507e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(8.3334519073e-3f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(4.1665795894e-2f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(1.6666665459e-1f));
  y = _mm512_fmadd_ps(y, x, _mm512_set1_ps(5.0000001201e-1f));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(x, x), _mm512_add_ps(x, _mm512_set1_ps(1.0f)));
  const __m512i n = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(fx), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(y, _mm512_castsi512_ps(n));
}

// The lanes of a 16-key block at keys [j, j + 16) that are real keys (j + lane < n).
inline __mmask16 valid_keys(size_t j, size_t n) {
  if (j >= n) return 0;
  const size_t left = n - j;
  return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// head_avx2 on 16-lane vectors: keys scored 32 at a time (two registers), NV = D / 16 registers
// per query's weighted sum.
template <int NV, int R>
SDSCORE_TARGET_AVX512 void head_avx512(const Problem& p, size_t b, size_t h, size_t start, size_t n,
                                       std::vector<float>& scratch) {
  constexpr size_t D = 16 * NV;
  const size_t m = (n + 31) & ~size_t(31);  // keys are scored 32 at a time
  scratch.resize(D * m + n * D + R * m);
  float* kt = scratch.data();
  float* vg = kt + D * m;
  float* s = vg + n * D;
  std::fill(kt, kt + D * m, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    const float* k = p.k(b, start + j, h);
    for (size_t d = 0; d < D; ++d) kt[d * m + j] = k[d];
    std::memcpy(vg + j * D, p.v(b, start + j, h), D * sizeof(float));
  }
  const __m512 scale = _mm512_set1_ps(p.scale);
  const __m512 none = _mm512_set1_ps(-INFINITY);
  for (size_t i0 = 0; i0 < n; i0 += R) {
    const float* q[R];
    for (int r = 0; r < R; ++r) q[r] = p.q(b, start + std::min(i0 + r, n - 1), h);
    __m512 peak[R];
    for (int r = 0; r < R; ++r) peak[r] = none;
    for (size_t j = 0; j < m; j += 32) {
      __m512 lo[R], hi[R];
      for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
      for (size_t d = 0; d < D; ++d) {
        const __m512 k0 = _mm512_loadu_ps(kt + d * m + j), k1 = _mm512_loadu_ps(kt + d * m + j + 16);
        for (int r = 0; r < R; ++r) {
          const __m512 qd = _mm512_set1_ps(q[r][d]);
          lo[r] = _mm512_fmadd_ps(qd, k0, lo[r]);
          hi[r] = _mm512_fmadd_ps(qd, k1, hi[r]);
        }
      }
      const __mmask16 valid_lo = valid_keys(j, n), valid_hi = valid_keys(j + 16, n);
      for (int r = 0; r < R; ++r) {
        const __m512 s0 = _mm512_mask_blend_ps(valid_lo, none, _mm512_mul_ps(lo[r], scale));
        const __m512 s1 = _mm512_mask_blend_ps(valid_hi, none, _mm512_mul_ps(hi[r], scale));
        _mm512_storeu_ps(s + r * m + j, s0);
        _mm512_storeu_ps(s + r * m + j + 16, s1);
        peak[r] = _mm512_max_ps(peak[r], _mm512_max_ps(s0, s1));
      }
    }
    float total[R];
    for (int r = 0; r < R; ++r) {
      const __m512 top = _mm512_set1_ps(_mm512_reduce_max_ps(peak[r]));
      __m512 sum = _mm512_setzero_ps();
      for (size_t j = 0; j < m; j += 16) {
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + r * m + j), top));
        _mm512_storeu_ps(s + r * m + j, e);
        sum = _mm512_add_ps(sum, e);
      }
      total[r] = _mm512_reduce_add_ps(sum);
    }
    __m512 acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_setzero_ps();
    for (size_t j = 0; j < n; ++j) {
      __m512 v[NV];
      for (int c = 0; c < NV; ++c) v[c] = _mm512_loadu_ps(vg + j * D + 16 * c);
      for (int r = 0; r < R; ++r) {
        const __m512 w = _mm512_set1_ps(s[r * m + j]);
        for (int c = 0; c < NV; ++c) acc[r][c] = _mm512_fmadd_ps(w, v[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R && i0 + r < n; ++r) {
      const __m512 inv = _mm512_set1_ps(1.0f / total[r]);
      float* o = p.o(b, start + i0 + r, h);
      for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + 16 * c, _mm512_mul_ps(acc[r][c], inv));
    }
  }
}

#pragma GCC diagnostic pop

// SDSCORE_DISABLE_AVX512=1 keeps the AVX2 kernel on an AVX-512 CPU (as the FIR and LSTM kernels).
bool span_avx512_allowed() {
  const char* off = std::getenv("SDSCORE_DISABLE_AVX512");
  if (off != nullptr && std::strcmp(off, "") != 0 && std::strcmp(off, "0") != 0) return false;
  __builtin_cpu_init();
  return use_avx2() && __builtin_cpu_supports("avx512f");
}
#endif

using HeadFn = void (*)(const Problem&, size_t, size_t, size_t, size_t, std::vector<float>&);

HeadFn pick(size_t D) {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  static const bool avx512 = span_avx512_allowed();
  if (avx512) {
    switch (D) {
      case 16: return head_avx512<1, 4>;
      case 32: return head_avx512<2, 4>;
      case 64: return head_avx512<4, 2>;
      default: break;
    }
  }
  if (use_avx2()) {
    switch (D) {
      case 8: return head_avx2<1, 4>;
      case 16: return head_avx2<2, 4>;
      case 32: return head_avx2<4, 2>;
      case 64: return head_avx2<8, 1>;
      default: break;
    }
  }
#endif
  return nullptr;
}

}  // namespace

const char* span_attention_isa(size_t D) {
  const HeadFn f = pick(D);
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  if (f == head_avx512<1, 4> || f == head_avx512<2, 4> || f == head_avx512<4, 2>) return "avx512f";
#endif
  return f ? "avx2+fma" : "generic";
}

void span_attention(const float* qkv, size_t B, size_t L, size_t H, size_t D,
                    const int64_t* starts, const int64_t* lengths, float scale, float* out,
                    size_t num_threads) {
  const Problem p{qkv, L, H, D, scale, out};
  // positions outside every span stay zero
  std::vector<char> inside(B * L, 0);
  for (size_t b = 0; b < B; ++b)
    std::fill_n(inside.begin() + b * L + starts[b], lengths[b], 1);
  for (size_t i = 0; i < B * L; ++i)
    if (!inside[i]) std::fill_n(out + i * H * D, H * D, 0.0f);
  const HeadFn vector_head = pick(D);
  const size_t threads = std::min(num_threads, B * H);
  parallel_for(B * H, threads, [&](size_t t) {
    const size_t b = t / H, h = t % H;
    const auto start = static_cast<size_t>(starts[b]), n = static_cast<size_t>(lengths[b]);
    if (n == 0) return;
    if (vector_head) {
      thread_local std::vector<float> scratch;  // each thread keeps its own between calls
      vector_head(p, b, h, start, n, scratch);
    } else {
      head_generic(p, b, h, start, n);
    }
  });
}

}  // namespace sdscore
