// FIR loops for fir_kernels.hpp. The loops are templates over an "ISA" struct whose static
// dot products carry the target attribute; instantiating them inside a function with the
// same attribute lets GCC inline everything into one AVX-512, AVX2 (or baseline) loop, with no
// per-sample indirect calls and no translation unit compiled with -mavx2 (which could leak
// AVX2 code into shared inline functions).
#include "audio/fir_kernels.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/simd.hpp"

namespace sdscore {
namespace {

// Outputs k and k + up of an exact bank use the same row, `down` input samples apart; the
// exact loop computes Isa::kGroup of them per pass, so a row (up to a few KiB, the whole bank
// often beyond L1) is read once per kGroup outputs instead of once per output.

// Portable baseline: 8 independent partial sums, which the compiler maps to SIMD registers.
struct GenericIsa {
  static constexpr size_t kGroup = 4;
  static inline float dot(const float* h, const float* x, size_t taps) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t j = 0; j < taps; j += 8)
      for (size_t l = 0; l < 8; ++l) acc[l] += h[j + l] * x[j + l];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
  // out[m * out_stride] = dot(h, x + m * stride) for m < kGroup, h read once.
  static inline void dot_group(const float* h, const float* x, size_t stride, size_t taps,
                               float* out, size_t out_stride) {
    for (size_t m = 0; m < kGroup; ++m) out[m * out_stride] = dot(h, x + m * stride, taps);
  }
  // sum_j (h[j] + a * d[j]) * x[j], in one pass over x.
  static inline float dot_lerp(const float* h, const float* d, const float* x, size_t taps,
                               float a) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t j = 0; j < taps; j += 8)
      for (size_t l = 0; l < 8; ++l) acc[l] += (h[j + l] + a * d[j + l]) * x[j + l];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
};

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// v holds, in each 128-bit half, partial sums of four outputs (lane l: output l); adds the
// halves and writes output l to out[l * stride].
SDSCORE_TARGET_AVX2 inline void store4(__m256 v, float* out, size_t stride) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  out[0] = _mm_cvtss_f32(s);
  out[stride] = _mm_cvtss_f32(_mm_shuffle_ps(s, s, 1));
  out[2 * stride] = _mm_cvtss_f32(_mm_shuffle_ps(s, s, 2));
  out[3 * stride] = _mm_cvtss_f32(_mm_shuffle_ps(s, s, 3));
}

struct Avx2Isa {
  static constexpr size_t kGroup = 4;
  // taps is a multiple of 8; four accumulators keep two FMA units busy through their latency.
  SDSCORE_TARGET_AVX2 static inline float dot(const float* h, const float* x, size_t taps) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 32 <= taps; j += 32) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j), _mm256_loadu_ps(x + j), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j + 8), _mm256_loadu_ps(x + j + 8), a1);
      a2 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j + 16), _mm256_loadu_ps(x + j + 16), a2);
      a3 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j + 24), _mm256_loadu_ps(x + j + 24), a3);
    }
    if (j + 16 <= taps) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j), _mm256_loadu_ps(x + j), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j + 8), _mm256_loadu_ps(x + j + 8), a1);
      j += 16;
    }
    if (j < taps) a2 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j), _mm256_loadu_ps(x + j), a2);
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  }
  // out[m * out_stride] = dot(h, x + m * stride) for m < kGroup (4): each coefficient vector
  // is loaded once for four outputs; eight accumulators.
  SDSCORE_TARGET_AVX2 static inline void dot_group(const float* h, const float* x, size_t stride,
                                                   size_t taps, float* out, size_t out_stride) {
    const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps();
    __m256 a3 = _mm256_setzero_ps(), a4 = _mm256_setzero_ps(), a5 = _mm256_setzero_ps();
    __m256 a6 = _mm256_setzero_ps(), a7 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= taps; j += 16) {
      const __m256 h0 = _mm256_loadu_ps(h + j), h1 = _mm256_loadu_ps(h + j + 8);
      a0 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x0 + j), a0);
      a1 = _mm256_fmadd_ps(h1, _mm256_loadu_ps(x0 + j + 8), a1);
      a2 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x1 + j), a2);
      a3 = _mm256_fmadd_ps(h1, _mm256_loadu_ps(x1 + j + 8), a3);
      a4 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x2 + j), a4);
      a5 = _mm256_fmadd_ps(h1, _mm256_loadu_ps(x2 + j + 8), a5);
      a6 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x3 + j), a6);
      a7 = _mm256_fmadd_ps(h1, _mm256_loadu_ps(x3 + j + 8), a7);
    }
    if (j < taps) {
      const __m256 h0 = _mm256_loadu_ps(h + j);
      a0 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x0 + j), a0);
      a2 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x1 + j), a2);
      a4 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x2 + j), a4);
      a6 = _mm256_fmadd_ps(h0, _mm256_loadu_ps(x3 + j), a6);
    }
    // hadd twice leaves, per 128-bit half, the partial sums of outputs 0..3 in order.
    const __m256 h01 = _mm256_hadd_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    const __m256 h23 = _mm256_hadd_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7));
    store4(_mm256_hadd_ps(h01, h23), out, out_stride);
  }
  SDSCORE_TARGET_AVX2 static inline __m256 blend(__m256 av, const float* h, const float* d,
                                                 size_t k) {
    return _mm256_fmadd_ps(av, _mm256_loadu_ps(d + k), _mm256_loadu_ps(h + k));
  }
  // sum_j (h[j] + a * d[j]) * x[j]: blend the two rows in registers, then one dot.
  SDSCORE_TARGET_AVX2 static inline float dot_lerp(const float* h, const float* d, const float* x,
                                                   size_t taps, float a) {
    const __m256 av = _mm256_set1_ps(a);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 32 <= taps; j += 32) {
      a0 = _mm256_fmadd_ps(blend(av, h, d, j), _mm256_loadu_ps(x + j), a0);
      a1 = _mm256_fmadd_ps(blend(av, h, d, j + 8), _mm256_loadu_ps(x + j + 8), a1);
      a2 = _mm256_fmadd_ps(blend(av, h, d, j + 16), _mm256_loadu_ps(x + j + 16), a2);
      a3 = _mm256_fmadd_ps(blend(av, h, d, j + 24), _mm256_loadu_ps(x + j + 24), a3);
    }
    for (; j < taps; j += 8) a0 = _mm256_fmadd_ps(blend(av, h, d, j), _mm256_loadu_ps(x + j), a0);
    return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  }
};
#endif

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// AVX-512F: the same loops on 16-float vectors (bank.taps is a multiple of 16), half the
// instructions per tap of the AVX2 ones. Chosen when the CPU has it.
#define SDSCORE_TARGET_AVX512 __attribute__((target("avx512f,avx2,fma")))
struct Avx512Isa {
  SDSCORE_TARGET_AVX512 static inline float dot(const float* h, const float* x, size_t taps) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    __m512 a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 64 <= taps; j += 64) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(h + j), _mm512_loadu_ps(x + j), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(h + j + 16), _mm512_loadu_ps(x + j + 16), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(h + j + 32), _mm512_loadu_ps(x + j + 32), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(h + j + 48), _mm512_loadu_ps(x + j + 48), a3);
    }
    for (; j < taps; j += 16)
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(h + j), _mm512_loadu_ps(x + j), a0);
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  }
  // out[m * out_stride] = dot(h, x + m * stride) for m < kGroup (8): each coefficient vector
  // (aligned: bank rows start on cache lines) is loaded once for eight outputs, one
  // accumulator each; taps is a multiple of 16.
  static constexpr size_t kGroup = 8;
  SDSCORE_TARGET_AVX512 static inline __m256 fold(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  }
  SDSCORE_TARGET_AVX512 static inline void dot_group(const float* h, const float* x,
                                                     size_t stride, size_t taps, float* out,
                                                     size_t out_stride) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps();
    __m512 a3 = _mm512_setzero_ps(), a4 = _mm512_setzero_ps(), a5 = _mm512_setzero_ps();
    __m512 a6 = _mm512_setzero_ps(), a7 = _mm512_setzero_ps();
    const float *x0 = x, *x1 = x + stride, *x2 = x + 2 * stride, *x3 = x + 3 * stride;
    const float *x4 = x + 4 * stride, *x5 = x + 5 * stride, *x6 = x + 6 * stride;
    const float* x7 = x + 7 * stride;
    for (size_t j = 0; j < taps; j += 16) {
      const __m512 hv = _mm512_load_ps(h + j);
      a0 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x0 + j), a0);
      a1 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x1 + j), a1);
      a2 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x2 + j), a2);
      a3 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x3 + j), a3);
      a4 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x4 + j), a4);
      a5 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x5 + j), a5);
      a6 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x6 + j), a6);
      a7 = _mm512_fmadd_ps(hv, _mm512_loadu_ps(x7 + j), a7);
    }
    // The eight horizontal sums together: halve to 8 lanes, then hadd trees (see store4).
    store4(_mm256_hadd_ps(_mm256_hadd_ps(fold(a0), fold(a1)), _mm256_hadd_ps(fold(a2), fold(a3))),
           out, out_stride);
    store4(_mm256_hadd_ps(_mm256_hadd_ps(fold(a4), fold(a5)), _mm256_hadd_ps(fold(a6), fold(a7))),
           out + 4 * out_stride, out_stride);
  }
  SDSCORE_TARGET_AVX512 static inline __m512 blend(__m512 av, const float* h, const float* d,
                                                   size_t k) {
    return _mm512_fmadd_ps(av, _mm512_loadu_ps(d + k), _mm512_loadu_ps(h + k));
  }
  SDSCORE_TARGET_AVX512 static inline float dot_lerp(const float* h, const float* d,
                                                     const float* x, size_t taps, float a) {
    const __m512 av = _mm512_set1_ps(a);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    size_t j = 0;
    for (; j + 32 <= taps; j += 32) {
      a0 = _mm512_fmadd_ps(blend(av, h, d, j), _mm512_loadu_ps(x + j), a0);
      a1 = _mm512_fmadd_ps(blend(av, h, d, j + 16), _mm512_loadu_ps(x + j + 16), a1);
    }
    if (j < taps) a0 = _mm512_fmadd_ps(blend(av, h, d, j), _mm512_loadu_ps(x + j), a0);
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  }
};
#endif


// Advances the output instant by down/up input samples: whole samples move `x`, the
// remainder (in units of 1/up) is the next phase.
struct Stepper {
  uint32_t up, whole, frac;
  explicit Stepper(const FilterBank& b) : up(b.up), whole(b.down / b.up), frac(b.down % b.up) {}
  inline void step(uint32_t& rem, const float*& x) const {
    rem += frac;
    x += whole;
    if (rem >= up) {
      rem -= up;
      ++x;
    }
  }
};

template <class Isa>
inline __attribute__((always_inline)) void run_exact(const FilterBank& bank, uint32_t rem,
                                                     const float* x, size_t count, float* out) {
  const Stepper stepper(bank);
  const float* coeffs = bank.coeffs.data();
  const size_t taps = bank.taps, up = bank.up, down = bank.down;
  size_t i = 0;
  // Groups of Isa::kGroup * up outputs: after `up` steps the phase is back to `rem` and x has moved
  // `down` samples, so output i + p + m * up reads row rem_p at x_p + m * down.
  for (; i + Isa::kGroup * up <= count; i += Isa::kGroup * up) {
    for (size_t p = 0; p < up; ++p) {
      Isa::dot_group(coeffs + rem * taps, x, down, taps, out + i + p, up);
      stepper.step(rem, x);
    }
    x += (Isa::kGroup - 1) * down;
  }
  for (; i < count; ++i) {
    out[i] = Isa::dot(coeffs + rem * taps, x, taps);
    stepper.step(rem, x);
  }
}

#ifdef SDSCORE_HAVE_AVX2_KERNELS
// Register-blocked exact loop (banks with a blocked copy, see filter_bank.hpp): one pass
// computes G consecutive outputs (one block's rows, which all read the same window of x) for
// each of M periods (`down` samples apart): G * M = 16 accumulators under AVX-512; under AVX2,
// 2 rows x 4 periods = 8 accumulators per pass. Per vector of taps that is G aligned
// coefficient loads and M input loads for G * M FMAs, against 9 loads (8 of them unaligned,
// mostly split across cache lines) for 8 FMAs in dot_group: the plain loop is bound by loads,
// this one by the FMA units.
template <int G, int M>
SDSCORE_TARGET_AVX512 inline void blocked_pass_avx512(const float* rows, size_t width,
                                                      const float* x, size_t down, size_t up,
                                                      float* out) {
  __m512 acc[G * M];
#pragma GCC unroll 16
  for (int k = 0; k < G * M; ++k) acc[k] = _mm512_setzero_ps();
  for (size_t j = 0; j < width; j += 16) {
    __m512 c[G];
#pragma GCC unroll 16
    for (int r = 0; r < G; ++r) c[r] = _mm512_load_ps(rows + r * width + j);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      __m512 xv = _mm512_loadu_ps(x + m * down + j);
      // Keeps xv in a register: otherwise GCC folds the load into each of the G FMAs.
      __asm__("" : "+v"(xv));
#pragma GCC unroll 16
      for (int r = 0; r < G; ++r) acc[r * M + m] = _mm512_fmadd_ps(c[r], xv, acc[r * M + m]);
    }
  }
  // Four horizontal sums at a time (fold to 8 lanes, two hadd levels, add the 128-bit halves).
#pragma GCC unroll 4
  for (int k = 0; k < G * M; k += 4) {
    const __m256 h = _mm256_hadd_ps(
        _mm256_hadd_ps(Avx512Isa::fold(acc[k]), Avx512Isa::fold(acc[k + 1])),
        _mm256_hadd_ps(Avx512Isa::fold(acc[k + 2]), Avx512Isa::fold(acc[k + 3])));
    alignas(16) float v[4];
    _mm_store_ps(v, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) out[(k + l) / M + ((k + l) % M) * up] = v[l];
  }
}

// The same pass on 8-float vectors (16 ymm registers: G * M = 8 accumulators).
template <int G, int M>
SDSCORE_TARGET_AVX2 inline void blocked_pass_avx2(const float* rows, size_t width, const float* x,
                                                  size_t down, size_t up, float* out) {
  __m256 acc[G * M];
#pragma GCC unroll 16
  for (int k = 0; k < G * M; ++k) acc[k] = _mm256_setzero_ps();
  for (size_t j = 0; j < width; j += 8) {
    __m256 c[G];
#pragma GCC unroll 16
    for (int r = 0; r < G; ++r) c[r] = _mm256_load_ps(rows + r * width + j);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      __m256 xv = _mm256_loadu_ps(x + m * down + j);
      __asm__("" : "+x"(xv));
#pragma GCC unroll 16
      for (int r = 0; r < G; ++r) acc[r * M + m] = _mm256_fmadd_ps(c[r], xv, acc[r * M + m]);
    }
  }
#pragma GCC unroll 4
  for (int k = 0; k < G * M; k += 4) {
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(acc[k], acc[k + 1]),
                                    _mm256_hadd_ps(acc[k + 2], acc[k + 3]));
    alignas(16) float v[4];
    _mm_store_ps(v, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
#pragma GCC unroll 4
    for (int l = 0; l < 4; ++l) out[(k + l) / M + ((k + l) % M) * up] = v[l];
  }
}

template <class Isa, int G, int M>
inline __attribute__((always_inline)) void run_blocked(const FilterBank& bank, uint32_t rem,
                                                       const float* x, size_t count, float* out) {
  const Stepper stepper(bank);
  const float* coeffs = bank.coeffs.data();
  const size_t taps = bank.taps, up = bank.up, down = bank.down, width = bank.block_taps;
  const auto index = [&](uint32_t phase) { return (uint64_t{phase} * bank.down_inverse) % up; };
  size_t i = 0;
  // Single outputs up to the first whose index is a multiple of G (a block's first output).
  for (; i < count && index(rem) % G != 0; ++i) {
    out[i] = Isa::dot(coeffs + rem * taps, x, taps);
    stepper.step(rem, x);
  }
  // Super-blocks of M periods (M * up outputs, back to the same phase M * down samples on).
  // Block q of a super-block reads up to width - taps samples past its own outputs' windows;
  // `slack` later outputs, whose reads the caller guarantees, reach at least that far.
  const size_t blocks = up / G, first = index(rem) / G, span = M * up;
  const size_t slack = G + 1 + ((width - taps + 1) * up + down - 1) / down;
  const float* rows = bank.block_coeffs.data();
  const uint32_t* start = bank.block_start.data();
  for (; i + span + slack <= count; i += span, x += M * down) {
    for (size_t q = 0; q < blocks; ++q) {
      const size_t b = first + q < blocks ? first + q : first + q - blocks;
      const size_t ahead = (first + q < blocks ? 0 : down) + start[b] - start[first];
      if constexpr (std::is_same_v<Isa, Avx512Isa>) {
        blocked_pass_avx512<G, M>(rows + b * G * width, width, x + ahead, down, up,
                                  out + i + q * G);
      } else {  // two rows per pass: fewer coefficient bytes per FMA (the bank is in L2, not L1)
        for (int r = 0; r < G; r += 2) {
          blocked_pass_avx2<2, M>(rows + (b * G + r) * width, width, x + ahead, down, up,
                                  out + i + q * G + r);
        }
      }
    }
  }
  for (; i < count; ++i) {
    out[i] = Isa::dot(coeffs + rem * taps, x, taps);
    stepper.step(rem, x);
  }
}
#endif

// GCC inlines the always_inline column templates below into their target-attributed callers;
// clang checks the vector ABI of each call inside a template before inlining and refuses them
// ("AVX vector return ... without 'avx512f' enabled changes the ABI"), so a clang build (the
// libFuzzer harness, or CXX=clang++) keeps the row loops for these ratios (equal within 2e-6).
#if defined(SDSCORE_HAVE_AVX2_KERNELS) && !defined(__clang__)
#define SDSCORE_COLUMN_KERNELS 1
#endif

#ifdef SDSCORE_COLUMN_KERNELS
// The column loop (FirColumnsFn) for small up. Each vector lane computes its own stretch of
// consecutive periods (lane l of a chunk: periods start[l] ..), so for every tap c a tile of R
// periods per lane needs R aligned input loads from a lane-interleaved copy of the input
// (row j holds each lane's j-th sample), one broadcast coefficient per phase, and up x R FMAs;
// the up x R accumulators stay in registers over all column_width taps and no output needs a
// horizontal sum. A tile's K = up x R rows (k = v * up + r: output r of period v) are then
// transposed in registers, so that each lane's K consecutive outputs go out in one or two stores.
// (run_blocked instead folds 16 partial sums per output, a large share of its time with the
// ~160-tap rows of upsampling; vectorising over consecutive periods straight from the input
// makes nearly every load straddle two cache lines: 8 -> 16 kHz took 45 us per audio second that
// way, 36 this way, on the AVX-512 VM of docs/benchmarks.md.)
struct Zmm {
  using V = __m512;
  static constexpr size_t kLanes = 16;
  SDSCORE_TARGET_AVX512 static inline V zero() { return _mm512_setzero_ps(); }
  SDSCORE_TARGET_AVX512 static inline V set1(float a) { return _mm512_set1_ps(a); }
  SDSCORE_TARGET_AVX512 static inline V load(const float* p) { return _mm512_load_ps(p); }
  SDSCORE_TARGET_AVX512 static inline V loadu(const float* p) { return _mm512_loadu_ps(p); }
  SDSCORE_TARGET_AVX512 static inline V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  SDSCORE_TARGET_AVX512 static inline V keep(V v) {
    __asm__("" : "+v"(v));  // keeps a loaded input in a register (else GCC folds it into each FMA)
    return v;
  }
  // Rows t[0..16) (rows k >= K are ignored) of 16 lanes: writes lane l's K values to to[l].
  template <int K>
  SDSCORE_TARGET_AVX512 static inline void transpose_store(V t[16], float* const* to) {
    static_assert(K <= 16, "a tile has at most 16 rows");
    for (int k = K; k < 16; ++k) t[k] = _mm512_setzero_ps();
    V u[16];
    for (int i = 0; i < 16; i += 2) {  // per 128-bit lane j: (a[4j], b[4j], a[4j+1], b[4j+1]), ..
      u[i] = _mm512_unpacklo_ps(t[i], t[i + 1]);
      u[i + 1] = _mm512_unpackhi_ps(t[i], t[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {  // t[i + s], lane j: column 4j + s of rows i .. i + 3
      const __m512d a = _mm512_castps_pd(u[i]), b = _mm512_castps_pd(u[i + 1]);
      const __m512d c = _mm512_castps_pd(u[i + 2]), d = _mm512_castps_pd(u[i + 3]);
      t[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      t[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      t[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      t[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    const __mmask16 mask = static_cast<__mmask16>((1u << K) - 1);
    for (int s = 0; s < 4; ++s) {  // column 4j + s: lane j of t[s], t[4 + s], t[8 + s], t[12 + s]
      const V lo01 = _mm512_shuffle_f32x4(t[s], t[4 + s], 0x44);   // g0.l0 g0.l1 g1.l0 g1.l1
      const V hi01 = _mm512_shuffle_f32x4(t[s], t[4 + s], 0xEE);   // g0.l2 g0.l3 g1.l2 g1.l3
      const V lo23 = _mm512_shuffle_f32x4(t[8 + s], t[12 + s], 0x44);
      const V hi23 = _mm512_shuffle_f32x4(t[8 + s], t[12 + s], 0xEE);
      _mm512_mask_storeu_ps(to[s], mask, _mm512_shuffle_f32x4(lo01, lo23, 0x88));
      _mm512_mask_storeu_ps(to[4 + s], mask, _mm512_shuffle_f32x4(lo01, lo23, 0xDD));
      _mm512_mask_storeu_ps(to[8 + s], mask, _mm512_shuffle_f32x4(hi01, hi23, 0x88));
      _mm512_mask_storeu_ps(to[12 + s], mask, _mm512_shuffle_f32x4(hi01, hi23, 0xDD));
    }
  }
};
struct Ymm {
  using V = __m256;
  static constexpr size_t kLanes = 8;
  SDSCORE_TARGET_AVX2 static inline V zero() { return _mm256_setzero_ps(); }
  SDSCORE_TARGET_AVX2 static inline V set1(float a) { return _mm256_set1_ps(a); }
  SDSCORE_TARGET_AVX2 static inline V load(const float* p) { return _mm256_load_ps(p); }
  SDSCORE_TARGET_AVX2 static inline V loadu(const float* p) { return _mm256_loadu_ps(p); }
  SDSCORE_TARGET_AVX2 static inline V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  SDSCORE_TARGET_AVX2 static inline V keep(V v) {
    __asm__("" : "+x"(v));
    return v;
  }
  // Rows t[0..K) of 8 lanes, K <= 16 (t holds 16): writes lane l's K values to to[l], eight rows
  // per 8 x 8 transpose.
  template <int K>
  SDSCORE_TARGET_AVX2 static inline void transpose_store(V t[16], float* const* to) {
    static_assert(K <= 16, "a tile has at most 16 rows");
    for (int k = K; k < 16; ++k) t[k] = _mm256_setzero_ps();
    for (int h = 0; h < K; h += 8) {
      transpose8(t + h);
      if (K - h >= 8) {
        for (int l = 0; l < 8; ++l) _mm256_storeu_ps(to[l] + h, t[h + l]);
      } else {
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(K - h),
                                                _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        for (int l = 0; l < 8; ++l) _mm256_maskstore_ps(to[l] + h, mask, t[h + l]);
      }
    }
  }
};

// Rows per lane of one chunk (divided by down: the lane-interleaved copy stays under ~45 KB).
// Not a power of two, so that the lanes' outputs do not all fall in one L1 set.
constexpr size_t kColumnChunkRows = 520;

// DOWN: bank.down when 1 (integer upsampling, compiled apart), 0 for any other down.
template <class Vec, int UP, int R, int DOWN>
inline __attribute__((always_inline)) void columns_loop(const FilterBank& bank, const float* x,
                                                        size_t periods, float* out) {
  using V = typename Vec::V;
  constexpr size_t L = Vec::kLanes;
  const size_t down = DOWN > 0 ? DOWN : bank.down, width = bank.column_width;
  const size_t reach = width / down;
  const float* cols = bank.columns.data();
  const size_t chunk = L * std::max<size_t>(R, kColumnChunkRows / down);
  const size_t most_rows = (std::min(chunk, periods) + L - 1) / L;
  std::vector<float, CacheLineAllocator<float>> copy(down * (most_rows + reach) * L);
  size_t start[L];
  float* to[L];
  // Chunks of `chunk` periods; the last one may start earlier to hold at least L * R periods.
  // Lanes and tiles overlap where the periods do not divide evenly: an overlapped output is
  // computed twice, the same way (each lane's sum runs over c in order), so it comes out equal.
  for (size_t p0 = 0; p0 < periods; p0 += chunk) {
    size_t count = std::min(chunk, periods - p0);
    if (count < L * R) {
      p0 = periods - L * R;
      count = L * R;
    }
    const size_t rows = (count + L - 1) / L;  // periods per lane (>= R)
    const size_t copy_rows = rows + reach - 1;
    for (size_t l = 0; l < L; ++l) start[l] = std::min(l * rows, count - rows);
    // copy[(e * copy_rows + j) * L + l] = x[(p0 + start[l] + j) * down + e]: period
    // p0 + start[l] + i reads tap c from row i + c / down of stream c % down.
    size_t j = 0;
    if (DOWN == 1) {  // L rows at a time: L loads of L samples (one per lane), transposed
      for (; j + L <= copy_rows; j += L) {
        V t[L];
        for (size_t l = 0; l < L; ++l) t[l] = Vec::loadu(x + p0 + start[l] + j);
        for (size_t i = 0; i < L; ++i) to[i] = copy.data() + (j + i) * L;
        Vec::template transpose_store<L>(t, to);
      }
    }
    for (size_t e = 0; e < down; ++e) {
      float* row = copy.data() + e * copy_rows * L;
      for (size_t l = 0; l < L; ++l) {
        const float* from = x + (p0 + start[l]) * down + e;
        for (size_t i = j; i < copy_rows; ++i) row[i * L + l] = from[i * down];
      }
    }
    for (size_t i0 = 0;; i0 += R) {
      if (i0 + R > rows) i0 = rows - R;
      V acc[UP][R];
#pragma GCC unroll 16
      for (int r = 0; r < UP; ++r)
#pragma GCC unroll 16
        for (int v = 0; v < R; ++v) acc[r][v] = Vec::zero();
      const float* w = cols;
      for (size_t q = 0; q < reach; ++q) {
        for (size_t e = 0; e < down; ++e, w += UP) {
          const float* t = copy.data() + (e * copy_rows + i0 + q) * L;
          V c[UP];
#pragma GCC unroll 16
          for (int r = 0; r < UP; ++r) c[r] = Vec::set1(w[r]);
#pragma GCC unroll 16
          for (int v = 0; v < R; ++v) {
            const V xv = Vec::keep(Vec::load(t + v * L));
#pragma GCC unroll 16
            for (int r = 0; r < UP; ++r) acc[r][v] = Vec::fmadd(c[r], xv, acc[r][v]);
          }
        }
      }
      V tile[16];
#pragma GCC unroll 16
      for (int v = 0; v < R; ++v)
#pragma GCC unroll 16
        for (int r = 0; r < UP; ++r) tile[v * UP + r] = acc[r][v];
      for (size_t l = 0; l < L; ++l) to[l] = out + (p0 + start[l] + i0) * UP;
      Vec::template transpose_store<UP * R>(tile, to);
      if (i0 + R >= rows) break;
    }
  }
}

// At least L * R periods (the largest R over up = 2..4 below). R * up <= 16 rows per tile: one
// 16 x 16 transpose under AVX-512, two 8 x 8 ones under AVX2. R: as many accumulators as the
// registers hold (32 zmm, 16 ymm) with up broadcast coefficients and one input vector; AVX2 at
// 8 accumulators (R = 4 for up = 2) ran 8 -> 16 kHz ~20 % slower than at 12.
constexpr size_t kColumnMinPeriods512 = 16 * 8;
constexpr size_t kColumnMinPeriods256 = 8 * 6;

template <class Vec, int R2, int R3, int R4>
inline __attribute__((always_inline)) void columns_for_bank(const FilterBank& bank,
                                                            const float* x, size_t periods,
                                                            float* out) {
  const bool one = bank.down == 1;
  switch (bank.up) {
    case 2:
      return one ? columns_loop<Vec, 2, R2, 1>(bank, x, periods, out)
                 : columns_loop<Vec, 2, R2, 0>(bank, x, periods, out);
    case 3:
      return one ? columns_loop<Vec, 3, R3, 1>(bank, x, periods, out)
                 : columns_loop<Vec, 3, R3, 0>(bank, x, periods, out);
    default:
      return one ? columns_loop<Vec, 4, R4, 1>(bank, x, periods, out)
                 : columns_loop<Vec, 4, R4, 0>(bank, x, periods, out);
  }
}

SDSCORE_TARGET_AVX512 void columns_avx512(const FilterBank& bank, const float* x, size_t periods,
                                          float* out) {
  columns_for_bank<Zmm, 8, 5, 4>(bank, x, periods, out);
}

SDSCORE_TARGET_AVX2 void columns_avx2(const FilterBank& bank, const float* x, size_t periods,
                                      float* out) {
  columns_for_bank<Ymm, 6, 4, 2>(bank, x, periods, out);
}
#endif

template <class Isa>
inline __attribute__((always_inline)) void run_interpolated(const FilterBank& bank, uint32_t rem,
                                                            const float* x, size_t count,
                                                            float* out) {
  const Stepper stepper(bank);
  const float* coeffs = bank.coeffs.data();
  const float* deltas = bank.deltas.data();
  const size_t taps = bank.taps;
  // Row position rem * rows / up in 32.32 fixed point: no float->int conversion or division
  // per sample. rem < up <= 2^20 and the scale is < 2^32 * rows / up, so no overflow.
  const uint64_t scale = (static_cast<uint64_t>(bank.rows) << 32) / bank.up;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t pos = rem * scale;
    const size_t row = static_cast<size_t>(pos >> 32);
    const float a = static_cast<float>(static_cast<uint32_t>(pos)) * (1.0f / 4294967296.0f);
    out[i] = Isa::dot_lerp(coeffs + row * taps, deltas + row * taps, x, taps, a);
    stepper.step(rem, x);
  }
}

// Blocks of kHalfbandBlock outputs: the input is split once into its odd and even samples (two
// contiguous scratch rows, by vector shuffles), then every tap pair is one multiply-add over
// 2 * W outputs at a time, in GCC vector types of W floats that compile to the target of the
// calling function (W = 8: ymm registers under AVX2, SSE pairs otherwise; W = 16: zmm
// registers under AVX-512).
constexpr size_t kHalfbandBlock = 512;

// W-float GCC/clang vector types, and the even- and odd-indexed samples of a pair of them (2W
// consecutive samples). __builtin_shufflevector is clang's and GCC >= 12's; older GCC has
// __builtin_shuffle.
#if defined(__clang__) || __GNUC__ >= 12
#define SDSCORE_PICK(a, b, I, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define SDSCORE_PICK(a, b, I, ...) __builtin_shuffle(a, b, I{__VA_ARGS__})
#endif
template <size_t W>
struct Lanes;
template <>
struct Lanes<8> {
  typedef float V __attribute__((vector_size(32)));
  typedef int32_t I __attribute__((vector_size(32)));
  static inline __attribute__((always_inline)) V even(V a, V b) {
    return SDSCORE_PICK(a, b, I, 0, 2, 4, 6, 8, 10, 12, 14);
  }
  static inline __attribute__((always_inline)) V odd(V a, V b) {
    return SDSCORE_PICK(a, b, I, 1, 3, 5, 7, 9, 11, 13, 15);
  }
};
template <>
struct Lanes<16> {
  typedef float V __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
  static inline __attribute__((always_inline)) V even(V a, V b) {
    return SDSCORE_PICK(a, b, I, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  }
  static inline __attribute__((always_inline)) V odd(V a, V b) {
    return SDSCORE_PICK(a, b, I, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  }
};
#undef SDSCORE_PICK

template <size_t W>
inline __attribute__((always_inline)) void halfband_loop(const float* c, size_t pairs,
                                                         const float* x, size_t count,
                                                         float* out) {
  using V = typename Lanes<W>::V;
  constexpr size_t kRow = kHalfbandBlock + 2 * 64 + 2 * W;
  alignas(64) float odd[kRow], even[kRow];
  std::vector<float> big;  // only for filters longer than the stack rows allow
  for (size_t k0 = 0; k0 < count; k0 += kHalfbandBlock) {
    const size_t nb = std::min(kHalfbandBlock, count - k0);
    // From xs = x + 2 (k0 - pairs) + 1: o[i] = xs[2i] = x[2 (k0 + i - pairs) + 1] for
    // i < span = nb + 2 * pairs - 1, and e[i] = xs[2i + 1] = x[2 (k0 + i - pairs + 1)] for
    // i < span - 1 (the centres need e[pairs - 1 .. nb + pairs - 1)). The last read,
    // xs[2 span - 2] = x[2 (k0 + nb) + 2 pairs - 3], is the last sample the caller guarantees.
    const size_t span = nb + 2 * pairs - 1;
    float *o = odd, *e = even;
    if (span > kRow) {
      big.resize(2 * span);
      o = big.data();
      e = big.data() + span;
    }
    const float* xs = x + 2 * static_cast<ptrdiff_t>(k0) - 2 * static_cast<ptrdiff_t>(pairs) + 1;
    size_t i = 0;
    for (; i + W + 1 <= span; i += W) {  // reads xs[2i .. 2i + 2W), 2i + 2W - 1 <= 2 span - 2
      V lo, hi;
      __builtin_memcpy(&lo, xs + 2 * i, sizeof lo);
      __builtin_memcpy(&hi, xs + 2 * i + W, sizeof hi);
      const V ov = Lanes<W>::even(lo, hi), ev = Lanes<W>::odd(lo, hi);
      __builtin_memcpy(o + i, &ov, sizeof ov);
      __builtin_memcpy(e + i, &ev, sizeof ev);
    }
    for (; i < span; ++i) {
      o[i] = xs[2 * i];
      if (i + 1 < span) e[i] = xs[2 * i + 1];
    }
    // The centre sample of output k0 + m, x[2 (k0 + m)], is e[m + pairs - 1].
    const float* centre = e + pairs - 1;
    size_t m = 0;
    for (; m + 2 * W <= nb; m += 2 * W) {
      V acc0, acc1, a0, a1, b0, b1;
      __builtin_memcpy(&a0, centre + m, sizeof a0);
      __builtin_memcpy(&a1, centre + m + W, sizeof a1);
      acc0 = c[0] * a0;
      acc1 = c[0] * a1;
      // x[2k + 2i - 1] = o[k - k0 + pairs + i - 1], x[2k - 2i + 1] = o[k - k0 + pairs - i]
      for (size_t t = 1; t <= pairs; ++t) {
        const float* a = o + m + pairs + t - 1;
        const float* b = o + m + pairs - t;
        __builtin_memcpy(&a0, a, sizeof a0);
        __builtin_memcpy(&a1, a + W, sizeof a1);
        __builtin_memcpy(&b0, b, sizeof b0);
        __builtin_memcpy(&b1, b + W, sizeof b1);
        acc0 += c[t] * (a0 + b0);
        acc1 += c[t] * (a1 + b1);
      }
      __builtin_memcpy(out + k0 + m, &acc0, sizeof acc0);
      __builtin_memcpy(out + k0 + m + W, &acc1, sizeof acc1);
    }
    for (; m < nb; ++m) {
      float acc = c[0] * centre[m];
      for (size_t t = 1; t <= pairs; ++t) acc += c[t] * (o[m + pairs + t - 1] + o[m + pairs - t]);
      out[k0 + m] = acc;
    }
  }
}

void halfband_generic(const float* c, size_t pairs, const float* x, size_t count, float* out) {
  halfband_loop<8>(c, pairs, x, count, out);
}

void run_generic(const FilterBank& bank, uint32_t rem, const float* x, size_t count, float* out) {
  if (bank.interpolated) {
    run_interpolated<GenericIsa>(bank, rem, x, count, out);
  } else {
    run_exact<GenericIsa>(bank, rem, x, count, out);
  }
}

#ifdef SDSCORE_HAVE_AVX2_KERNELS
SDSCORE_TARGET_AVX2 void run_avx2(const FilterBank& bank, uint32_t rem, const float* x,
                                  size_t count, float* out) {
  if (bank.block_g == 4) {
    run_blocked<Avx2Isa, 4, 4>(bank, rem, x, count, out);
  } else if (bank.block_g == 2) {
    run_blocked<Avx2Isa, 2, 4>(bank, rem, x, count, out);
  } else if (bank.interpolated) {
    run_interpolated<Avx2Isa>(bank, rem, x, count, out);
  } else {
    run_exact<Avx2Isa>(bank, rem, x, count, out);
  }
}

SDSCORE_TARGET_AVX2 void halfband_avx2(const float* c, size_t pairs, const float* x,
                                       size_t count, float* out) {
  halfband_loop<8>(c, pairs, x, count, out);
}

SDSCORE_TARGET_AVX512 void halfband_avx512(const float* c, size_t pairs, const float* x,
                                           size_t count, float* out) {
  halfband_loop<16>(c, pairs, x, count, out);
}

SDSCORE_TARGET_AVX512 void run_avx512(const FilterBank& bank, uint32_t rem, const float* x,
                                      size_t count, float* out) {
  if (bank.block_g == 4) {
    run_blocked<Avx512Isa, 4, 4>(bank, rem, x, count, out);
  } else if (bank.block_g == 2) {
    run_blocked<Avx512Isa, 2, 8>(bank, rem, x, count, out);
  } else if (bank.interpolated) {
    run_interpolated<Avx512Isa>(bank, rem, x, count, out);
  } else {
    run_exact<Avx512Isa>(bank, rem, x, count, out);
  }
}

#endif

FirKernels select_kernels() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
#ifdef SDSCORE_COLUMN_KERNELS
  if (use_avx512()) {
    return {run_avx512, halfband_avx512, "avx512f", columns_avx512, kColumnMinPeriods512};
  }
  if (use_avx2()) return {run_avx2, halfband_avx2, "avx2+fma", columns_avx2, kColumnMinPeriods256};
#else
  if (use_avx512()) return {run_avx512, halfband_avx512, "avx512f", nullptr, 0};
  if (use_avx2()) return {run_avx2, halfband_avx2, "avx2+fma", nullptr, 0};
#endif
#endif
  return {run_generic, halfband_generic, "generic", nullptr, 0};
}

}  // namespace

bool simd_allowed() {
  static const bool allowed = [] {
    const char* off = std::getenv("SDSCORE_DISABLE_SIMD");
    return off == nullptr || std::strcmp(off, "") == 0 || std::strcmp(off, "0") == 0;
  }();
  return allowed;
}

bool use_avx2() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  __builtin_cpu_init();
  return simd_allowed() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

bool use_avx512() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  const char* off = std::getenv("SDSCORE_DISABLE_AVX512");
  if (off != nullptr && std::strcmp(off, "") != 0 && std::strcmp(off, "0") != 0) return false;
  __builtin_cpu_init();
  return use_avx2() && __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

const FirKernels& fir_kernels() {
  static const FirKernels kernels = select_kernels();
  return kernels;
}

}  // namespace sdscore
