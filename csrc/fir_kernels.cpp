// FIR loops for fir_kernels.hpp. The loops are templates over an "ISA" struct whose static
// dot products carry the target attribute; instantiating them inside a function with the
// same attribute lets GCC inline everything into one AVX2 (or baseline) loop, with no
// per-sample indirect calls and no translation unit compiled with -mavx2 (which could leak
// AVX2 code into shared inline functions).
#include "fir_kernels.hpp"

#include <cstdlib>
#include <cstring>

#include "simd.hpp"

namespace sdscore {
namespace {

// Portable baseline: 8 independent partial sums, which the compiler maps to SIMD registers.
struct GenericIsa {
  static inline float dot(const float* h, const float* x, size_t taps) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (size_t j = 0; j < taps; j += 8)
      for (size_t l = 0; l < 8; ++l) acc[l] += h[j + l] * x[j + l];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
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
struct Avx2Isa {
  // taps is a multiple of 8; two accumulators hide the FMA latency.
  SDSCORE_TARGET_AVX2 static inline float dot(const float* h, const float* x, size_t taps) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= taps; j += 16) {
      a0 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j), _mm256_loadu_ps(x + j), a0);
      a1 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    }
    if (j < taps) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(h + j), _mm256_loadu_ps(x + j), a0);
    return hsum(_mm256_add_ps(a0, a1));
  }
  // sum_j (h[j] + a * d[j]) * x[j]: blend the two rows in registers, then one dot.
  SDSCORE_TARGET_AVX2 static inline float dot_lerp(const float* h, const float* d, const float* x,
                                                   size_t taps, float a) {
    const __m256 av = _mm256_set1_ps(a);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    size_t j = 0;
    for (; j + 16 <= taps; j += 16) {
      const __m256 c0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(d + j), _mm256_loadu_ps(h + j));
      const __m256 c1 = _mm256_fmadd_ps(av, _mm256_loadu_ps(d + j + 8), _mm256_loadu_ps(h + j + 8));
      a0 = _mm256_fmadd_ps(c0, _mm256_loadu_ps(x + j), a0);
      a1 = _mm256_fmadd_ps(c1, _mm256_loadu_ps(x + j + 8), a1);
    }
    if (j < taps) {
      const __m256 c0 = _mm256_fmadd_ps(av, _mm256_loadu_ps(d + j), _mm256_loadu_ps(h + j));
      a0 = _mm256_fmadd_ps(c0, _mm256_loadu_ps(x + j), a0);
    }
    return hsum(_mm256_add_ps(a0, a1));
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
  const size_t taps = bank.taps;
  for (size_t i = 0; i < count; ++i) {
    out[i] = Isa::dot(coeffs + rem * taps, x, taps);
    stepper.step(rem, x);
  }
}

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
  if (bank.interpolated) {
    run_interpolated<Avx2Isa>(bank, rem, x, count, out);
  } else {
    run_exact<Avx2Isa>(bank, rem, x, count, out);
  }
}
#endif

FirKernels select_kernels() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  if (use_avx2()) return {run_avx2, "avx2+fma"};
#endif
  return {run_generic, "generic"};
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

const FirKernels& fir_kernels() {
  static const FirKernels kernels = select_kernels();
  return kernels;
}

}  // namespace sdscore
