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

using HeadFn = void (*)(const Problem&, size_t, size_t, size_t, size_t, std::vector<float>&);

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// 8 lanes: AVX2 + FMA.
namespace avx2 {
#define SDSCORE_SPAN_TARGET SDSCORE_TARGET_AVX2
struct V {
  using Reg = __m256;
  using Mask = __m256;  // all-ones lanes
  static constexpr size_t W = 8;
  SDSCORE_SPAN_TARGET static inline Reg load(const float* p) { return _mm256_loadu_ps(p); }
  SDSCORE_SPAN_TARGET static inline void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  SDSCORE_SPAN_TARGET static inline Reg set1(float v) { return _mm256_set1_ps(v); }
  SDSCORE_SPAN_TARGET static inline Reg zero() { return _mm256_setzero_ps(); }
  SDSCORE_SPAN_TARGET static inline Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  SDSCORE_SPAN_TARGET static inline Reg fnmadd(Reg a, Reg b, Reg c) { return _mm256_fnmadd_ps(a, b, c); }
  SDSCORE_SPAN_TARGET static inline Reg floor(Reg a) { return _mm256_floor_ps(a); }
  // 2^n for integral n in [-126, 127] (the exponent field)
  SDSCORE_SPAN_TARGET static inline Reg pow2(Reg n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
  }
  SDSCORE_SPAN_TARGET static inline float hmax(Reg v) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  SDSCORE_SPAN_TARGET static inline float hsum(Reg v) { return sdscore::hsum(v); }
  // the lanes of the block of keys [j, j + W) that are real keys (j + lane < n)
  SDSCORE_SPAN_TARGET static inline Mask valid(size_t j, size_t n) {
    const Reg at = _mm256_add_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_ps(static_cast<float>(j)));
    return _mm256_cmp_ps(at, _mm256_set1_ps(static_cast<float>(n)), _CMP_LT_OQ);
  }
  // a where mask, else b
  SDSCORE_SPAN_TARGET static inline Reg select(Mask mask, Reg a, Reg b) { return _mm256_blendv_ps(b, a, mask); }
};
#include "ops/span_attention_kernel.hpp"  // NOLINT(build/include): once per instruction set
#undef SDSCORE_SPAN_TARGET
}  // namespace avx2

// 16 lanes: AVX-512F.
// GCC 12 flags the _mm512_undefined_ps() inside its own _mm512_max_ps as "may be used
// uninitialized" (a false positive of the intrinsics header; as in rnn/lstm.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
#define SDSCORE_SPAN_TARGET __attribute__((target("avx512f,avx2,fma")))
struct V {
  using Reg = __m512;
  using Mask = __mmask16;
  static constexpr size_t W = 16;
  SDSCORE_SPAN_TARGET static inline Reg load(const float* p) { return _mm512_loadu_ps(p); }
  SDSCORE_SPAN_TARGET static inline void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  SDSCORE_SPAN_TARGET static inline Reg set1(float v) { return _mm512_set1_ps(v); }
  SDSCORE_SPAN_TARGET static inline Reg zero() { return _mm512_setzero_ps(); }
  SDSCORE_SPAN_TARGET static inline Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  SDSCORE_SPAN_TARGET static inline Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  SDSCORE_SPAN_TARGET static inline Reg fnmadd(Reg a, Reg b, Reg c) { return _mm512_fnmadd_ps(a, b, c); }
  SDSCORE_SPAN_TARGET static inline Reg floor(Reg a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  }
  // 2^n for integral n in [-126, 127] (the exponent field)
  SDSCORE_SPAN_TARGET static inline Reg pow2(Reg n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
  }
  SDSCORE_SPAN_TARGET static inline float hmax(Reg v) { return _mm512_reduce_max_ps(v); }
  SDSCORE_SPAN_TARGET static inline float hsum(Reg v) { return _mm512_reduce_add_ps(v); }
  // the lanes of the block of keys [j, j + W) that are real keys (j + lane < n)
  static inline Mask valid(size_t j, size_t n) {
    if (j >= n) return 0;
    const size_t left = n - j;
    return left >= 16 ? static_cast<Mask>(0xFFFF) : static_cast<Mask>((1u << left) - 1);
  }
  // a where mask, else b
  SDSCORE_SPAN_TARGET static inline Reg select(Mask mask, Reg a, Reg b) { return _mm512_mask_blend_ps(mask, b, a); }
};
#include "ops/span_attention_kernel.hpp"  // NOLINT(build/include): once per instruction set
#undef SDSCORE_SPAN_TARGET
}  // namespace avx512
#pragma GCC diagnostic pop

#endif

// The vector kernel for head size D on this CPU and the instruction set's name; a null kernel
// (the generic loops) where none fits: AVX-512 for D in {16, 32, 64}, AVX2 for {8, 16, 32, 64}.
struct Pick {
  HeadFn head;
  const char* isa;
};

Pick pick(size_t D) {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  static const bool avx512 = use_avx512();  // SDSCORE_DISABLE_AVX512=1: the AVX2 kernel
  if (avx512) {
    if (const HeadFn f = avx512::head_for(D)) return {f, "avx512f"};
  }
  if (use_avx2()) {
    if (const HeadFn f = avx2::head_for(D)) return {f, "avx2+fma"};
  }
#endif
  (void)D;
  return {nullptr, "generic"};
}

}  // namespace

const char* span_attention_isa(size_t D) { return pick(D).isa; }

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
  const HeadFn vector_head = pick(D).head;
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
