#include "rnn/lstm.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/simd.hpp"

namespace sdscore {
namespace {

// Frames per input projection (see run in lstm_kernel.hpp): 8 frames of 64 rows' gate inputs
// are 2 MiB (16 and 32 frames measured slower).
constexpr size_t kChunkFrames = 8;

// Portable: one float per "vector" (the compiler may still vectorise the loops).
namespace generic {
struct V {
  using Reg = float;
  static constexpr size_t W = 1;
  static inline Reg load(const float* p) { return *p; }
  static inline void store(float* p, Reg v) { *p = v; }
  static inline Reg set1(float v) { return v; }
  static inline Reg zero() { return 0.0f; }
  static inline Reg add(Reg a, Reg b) { return a + b; }
  static inline Reg sub(Reg a, Reg b) { return a - b; }
  static inline Reg mul(Reg a, Reg b) { return a * b; }
  static inline Reg recip(Reg a) { return 1.0f / a; }
  static inline Reg fmsub(Reg a, Reg b, Reg c) { return a * b - c; }
  static inline Reg fmadd(Reg a, Reg b, Reg c) { return a * b + c; }
  static inline Reg min(Reg a, Reg b) { return a < b ? a : b; }
  static inline Reg max(Reg a, Reg b) { return a > b ? a : b; }
  static inline Reg round(Reg a) { return std::nearbyint(a); }
  static inline Reg scale2(Reg a, Reg n) { return std::ldexp(a, static_cast<int>(n)); }
  static inline void prefetch(const float*) {}
};
constexpr int kRows = 4;
#include "rnn/lstm_kernel.hpp"  // NOLINT(build/include): once per instruction set
}  // namespace generic

// GCC applies a target pragma to every function defined under it, templates included; clang
// (the fuzzer build) does not, so it builds the portable loops only.
#if defined(SDSCORE_HAVE_AVX2_KERNELS) && !defined(__clang__)
#define SDSCORE_LSTM_VECTOR_KERNELS 1

#pragma GCC push_options
#pragma GCC target("avx2,fma")
namespace avx2 {
struct V {
  using Reg = __m256;
  static constexpr size_t W = 8;
  static inline Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static inline void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static inline Reg set1(float v) { return _mm256_set1_ps(v); }
  static inline Reg zero() { return _mm256_setzero_ps(); }
  static inline Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static inline Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  static inline Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static inline Reg recip(Reg a) { return _mm256_div_ps(_mm256_set1_ps(1.0f), a); }
  static inline Reg fmsub(Reg a, Reg b, Reg c) { return _mm256_fmsub_ps(a, b, c); }
  static inline Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static inline Reg min(Reg a, Reg b) { return _mm256_min_ps(a, b); }
  static inline Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }
  static inline Reg round(Reg a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline Reg scale2(Reg a, Reg n) {  // n integral in [-126, 127]
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(a, _mm256_castsi256_ps(e));
  }
  // the 2 cache lines of one k's panel row (32 floats)
  static inline void prefetch(const float* p) {
    for (int line = 0; line < 2; ++line) _mm_prefetch(reinterpret_cast<const char*>(p + 16 * line), _MM_HINT_T0);
  }
};
constexpr int kRows = 2;  // 8 accumulators + 4 weight vectors + a broadcast in 16 registers
#include "rnn/lstm_kernel.hpp"  // NOLINT(build/include): once per instruction set
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12 flags the _mm512_undefined_ps() inside its own _mm512_min_ps / _mm512_max_ps as
// "may be used uninitialized" (a false positive of the intrinsics header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
namespace avx512 {
struct V {
  using Reg = __m512;
  static constexpr size_t W = 16;
  static inline Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static inline void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static inline Reg set1(float v) { return _mm512_set1_ps(v); }
  static inline Reg zero() { return _mm512_setzero_ps(); }
  static inline Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static inline Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  static inline Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  // 1 / a: the 14-bit estimate and one Newton step (relative error ~2^-27, under half an ulp of
  // float mostly), a few cycles instead of a 512-bit divide's ~10.
  static inline Reg recip(Reg a) {
    const Reg r = _mm512_rcp14_ps(a);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(a, r, _mm512_set1_ps(2.0f)));
  }
  static inline Reg fmsub(Reg a, Reg b, Reg c) { return _mm512_fmsub_ps(a, b, c); }
  static inline Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static inline Reg min(Reg a, Reg b) { return _mm512_min_ps(a, b); }
  static inline Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }
  static inline Reg round(Reg a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline Reg scale2(Reg a, Reg n) { return _mm512_scalef_ps(a, n); }
  // the 4 cache lines of one k's panel row (64 floats)
  static inline void prefetch(const float* p) {
    for (int line = 0; line < 4; ++line) _mm_prefetch(reinterpret_cast<const char*>(p + 16 * line), _MM_HINT_T0);
  }
};
constexpr int kRows = 6;  // 24 accumulators + 4 weight vectors + a broadcast in 32 registers
#include "rnn/lstm_kernel.hpp"  // NOLINT(build/include): once per instruction set
}  // namespace avx512
#pragma GCC diagnostic pop
#pragma GCC pop_options

#endif

enum class Isa { kGeneric, kAvx2, kAvx512 };

Isa pick(size_t hidden) {
#ifdef SDSCORE_LSTM_VECTOR_KERNELS
  static const bool avx512 = use_avx512();
  if (avx512 && hidden % 16 == 0) return Isa::kAvx512;
  if (use_avx2() && hidden % 8 == 0) return Isa::kAvx2;
#endif
  (void)hidden;
  return Isa::kGeneric;
}

// Uninitialised floats (the buffers below are written before they are read), or zeroed ones.
std::unique_ptr<float[]> floats(size_t n, bool zeroed = false) {
  std::unique_ptr<float[]> p(new float[n > 0 ? n : 1]);
  if (zeroed) std::memset(p.get(), 0, n * sizeof(float));
  return p;
}

}  // namespace

const char* lstm_isa(size_t hidden) {
  switch (pick(hidden)) {
    case Isa::kAvx512: return "avx512f";
    case Isa::kAvx2: return "avx2+fma";
    default: return "generic";
  }
}

void lstm_final_hidden(const float* x, size_t batch, size_t frames, const int64_t* lengths,
                       const LstmLayerWeights* layers, size_t num_layers, size_t hidden, float* h_out) {
  if (batch == 0 || num_layers == 0) return;
  size_t widest = hidden;
  for (size_t l = 0; l < num_layers; ++l) widest = layers[l].input_size > widest ? layers[l].input_size : widest;
  const size_t steps = batch * frames;
  auto panels = floats(4 * hidden * (widest + hidden));
  auto bias = floats(4 * hidden);
  auto xp = floats((frames < kChunkFrames ? frames : kChunkFrames) * batch * 4 * hidden);
  // With lengths, the output sequences start zeroed: frames past a row's length are never
  // written, and the next layer projects them (its result for them is then ignored, but stays
  // finite). Without, every frame is written before it is read.
  const bool ragged = lengths != nullptr;
  auto seq_a = floats(num_layers > 1 ? steps * hidden : 0, ragged);
  auto seq_b = floats(num_layers > 2 ? steps * hidden : 0, ragged);
  auto h_a = floats(batch * hidden, true);
  auto h_b = floats(batch * hidden, true);
  auto c = floats(batch * hidden, true);
  auto partial = floats(batch * 64);  // batch x 4 gates x the widest vector (16 floats)
  // time-major input: row (t, b) at t * batch + b
  const size_t features = layers[0].input_size;
  auto xt = floats(steps * features);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t t = 0; t < frames; ++t) {
      std::memcpy(xt.get() + (t * batch + b) * features, x + (b * frames + t) * features, features * sizeof(float));
    }
  }
  switch (pick(hidden)) {
#ifdef SDSCORE_LSTM_VECTOR_KERNELS
    case Isa::kAvx512:
      avx512::run(xt.get(), batch, frames, lengths, layers, num_layers, hidden, h_out, panels.get(), bias.get(),
                  xp.get(), seq_a.get(), seq_b.get(), h_a.get(), h_b.get(), c.get(), partial.get());
      return;
    case Isa::kAvx2:
      avx2::run(xt.get(), batch, frames, lengths, layers, num_layers, hidden, h_out, panels.get(), bias.get(),
                xp.get(), seq_a.get(), seq_b.get(), h_a.get(), h_b.get(), c.get(), partial.get());
      return;
#endif
    default:
      generic::run(xt.get(), batch, frames, lengths, layers, num_layers, hidden, h_out, panels.get(), bias.get(),
                   xp.get(), seq_a.get(), seq_b.get(), h_a.get(), h_b.get(), c.get(), partial.get());
  }
}

}  // namespace sdscore
