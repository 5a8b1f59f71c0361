#include "mel/log_mel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "mel/frame_fft.hpp"
#include "common/simd.hpp"

namespace sdscore {

MelBands make_mel_bands(const float* dense, size_t n_mels, size_t n_bins) {
  MelBands bands;
  bands.n_mels = n_mels;
  bands.n_bins = n_bins;
  for (size_t m = 0; m < n_mels; ++m) {
    const float* row = dense + m * n_bins;
    size_t lo = 0, hi = n_bins;
    while (lo < n_bins && row[lo] == 0.0f) ++lo;
    while (hi > lo && row[hi - 1] == 0.0f) --hi;
    bands.start.push_back(static_cast<uint32_t>(lo));
    bands.count.push_back(static_cast<uint32_t>(hi - lo));
    bands.offset.push_back(bands.weights.size());
    bands.weights.insert(bands.weights.end(), row + lo, row + hi);
  }
  return bands;
}

void frame_clip(const float* x, size_t n, size_t n_fft, size_t hop, const float* window,
                float* out) {
  const size_t frames = stft_frame_count(n, hop);
  const auto half = static_cast<ptrdiff_t>(n_fft / 2);
  const auto len = static_cast<ptrdiff_t>(n);
  for (size_t t = 0; t < frames; ++t, out += n_fft) {
    const ptrdiff_t first = static_cast<ptrdiff_t>(t * hop) - half;  // sample under window[0]
    const ptrdiff_t lo = std::max<ptrdiff_t>(0, -first);
    const ptrdiff_t hi = std::min<ptrdiff_t>(static_cast<ptrdiff_t>(n_fft), len - first);
    if (hi <= lo) {
      std::memset(out, 0, n_fft * sizeof(float));
      continue;
    }
    std::memset(out, 0, static_cast<size_t>(lo) * sizeof(float));
    for (ptrdiff_t j = lo; j < hi; ++j) out[j] = x[first + j] * window[j];
    std::memset(out + hi, 0, static_cast<size_t>(static_cast<ptrdiff_t>(n_fft) - hi) * sizeof(float));
  }
}

namespace {

// log10(x) for normal x > 0 (here x >= 1e-10): Cephes' logf (exponent split, a degree-9
// polynomial on [sqrt(1/2) - 1, sqrt(2) - 1]; within 2 ulp of ln), then times log10(e).
// Written without calls or branches so the loops below vectorise.
inline float log10_poly(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 126);  // x = m * 2^e, m in [0.5, 1)
  bits = (bits & 0x007fffffu) | 0x3f000000u;
  float m;
  std::memcpy(&m, &bits, sizeof m);
  const float small = m < 0.707106781186547524f ? 1.0f : 0.0f;  // then use 2m, e - 1
  e -= small;
  const float f = m + m * small - 1.0f;
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  const float ln = (f + y) + 0.693359375f * e;
  return ln * 0.434294481903251828f;
}

// In place: v = log10(v) for v >= 1e-10.
__attribute__((target_clones("avx2", "default"))) void log10_rows(float* v, size_t n) {
  for (size_t i = 0; i < n; ++i) v[i] = log10_poly(v[i]);
}

// max(v[0..n)), -inf for n = 0; eight lanes, so the loop vectorises without -ffast-math.
__attribute__((target_clones("avx2", "default"))) float peak_of(const float* v, size_t n) {
  float lanes[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY,
                    -INFINITY, -INFINITY, -INFINITY, -INFINITY};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (size_t l = 0; l < 8; ++l) lanes[l] = v[i + l] > lanes[l] ? v[i + l] : lanes[l];
  for (; i < n; ++i) lanes[0] = v[i] > lanes[0] ? v[i] : lanes[0];
  float peak = lanes[0];
  for (size_t l = 1; l < 8; ++l) peak = lanes[l] > peak ? lanes[l] : peak;
  return peak;
}

__attribute__((target_clones("avx2", "default"))) void compress_rows(float* v, size_t n,
                                                                       float floor) {
  for (size_t i = 0; i < n; ++i) v[i] = ((v[i] > floor ? v[i] : floor) + 4.0f) * 0.25f;
}

// Frames per pass of the mel filters: the power spectra of kLanes frames are laid out
// [bin][frame], so each filter's sum runs across the frames in vectors (the filters are only
// ~6 bins wide, too short to vectorise along). 32 frames = four independent 8-wide FMA chains
// per filter, which hides the FMA latency.
constexpr size_t kLanes = 32;

// Mel power (floored at 1e-10) of `lanes` <= kLanes consecutive frames into their rows of `out`.
// scratch: (n_bins + n_mels) * kLanes floats. Portable loops, one frame at a time.
void mel_rows_generic(const float* spec, size_t lanes, const MelBands& bands, float*, float* out) {
  const size_t n_bins = bands.n_bins, n_mels = bands.n_mels;
  for (size_t l = 0; l < lanes; ++l) {
    const float* s = spec + 2 * n_bins * l;
    for (size_t m = 0; m < n_mels; ++m) {
      const float* w = bands.weights.data() + bands.offset[m];
      const float* re_im = s + 2 * bands.start[m];
      float acc = 0.0f;
      for (uint32_t j = 0; j < bands.count[m]; ++j)
        acc += w[j] * (re_im[2 * j] * re_im[2 * j] + re_im[2 * j + 1] * re_im[2 * j + 1]);
      out[l * n_mels + m] = acc > 1e-10f ? acc : 1e-10f;
    }
  }
}

#ifdef SDSCORE_HAVE_AVX2_KERNELS
SDSCORE_TARGET_AVX2 void mel_from_power_avx2(const float* power_t, size_t lanes, const MelBands& bands,
                                             float* mel_t, float* out);

// mel_rows_generic with AVX2+FMA: the power of 8 frames x 8 bins per step (squares, a
// horizontal add, a transpose to [bin][frame]), each filter as FMAs over its bins for 32 frames
// at once, the result transposed back to rows. Spare lanes redo frame 0.
SDSCORE_TARGET_AVX2 void mel_rows_avx2(const float* spec, size_t lanes, const MelBands& bands,
                                       float* scratch, float* out) {
  constexpr size_t G = kLanes / 8;  // groups of 8 frames
  const size_t n_bins = bands.n_bins, n_mels = bands.n_mels;
  float* power_t = scratch;                   // [n_bins][kLanes]
  float* mel_t = scratch + n_bins * kLanes;   // [n_mels][kLanes]
  const __m256i bin_order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);  // undo hadd's lane mix
  for (size_t g = 0; g < G; ++g) {
    const float* row[8];
    for (size_t l = 0; l < 8; ++l) row[l] = spec + 2 * n_bins * (g * 8 + l < lanes ? g * 8 + l : 0);
    size_t b = 0;
    for (; b + 8 <= n_bins; b += 8) {
      __m256 v[8];
      for (size_t l = 0; l < 8; ++l) {
        const __m256 lo = _mm256_loadu_ps(row[l] + 2 * b), hi = _mm256_loadu_ps(row[l] + 2 * b + 8);
        v[l] = _mm256_permutevar8x32_ps(
            _mm256_hadd_ps(_mm256_mul_ps(lo, lo), _mm256_mul_ps(hi, hi)), bin_order);
      }
      transpose8(v);
      for (size_t j = 0; j < 8; ++j) _mm256_storeu_ps(power_t + (b + j) * kLanes + g * 8, v[j]);
    }
    for (; b < n_bins; ++b)
      for (size_t l = 0; l < 8; ++l)
        power_t[b * kLanes + g * 8 + l] =
            row[l][2 * b] * row[l][2 * b] + row[l][2 * b + 1] * row[l][2 * b + 1];
  }
  mel_from_power_avx2(power_t, lanes, bands, mel_t, out);
}

// The filters over power_t ([n_bins][kLanes], lanes = frames), floored at 1e-10, into `lanes`
// rows of out; mel_t: [n_mels][kLanes] scratch.
SDSCORE_TARGET_AVX2 void mel_from_power_avx2(const float* power_t, size_t lanes, const MelBands& bands,
                                             float* mel_t, float* out) {
  constexpr size_t G = kLanes / 8;
  const size_t n_mels = bands.n_mels;
  const __m256 tiny = _mm256_set1_ps(1e-10f);
  for (size_t m = 0; m < n_mels; ++m) {
    const float* w = bands.weights.data() + bands.offset[m];
    const float* p = power_t + bands.start[m] * kLanes;
    __m256 acc[G];
    for (size_t g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
    for (uint32_t j = 0; j < bands.count[m]; ++j) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      for (size_t g = 0; g < G; ++g)
        acc[g] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(p + j * kLanes + g * 8), acc[g]);
    }
    for (size_t g = 0; g < G; ++g) _mm256_storeu_ps(mel_t + m * kLanes + g * 8, _mm256_max_ps(acc[g], tiny));
  }
  for (size_t g = 0; g * 8 < lanes; ++g) {
    const size_t rows = std::min<size_t>(8, lanes - g * 8);
    size_t m = 0;
    for (; m + 8 <= n_mels; m += 8) {
      __m256 v[8];
      for (size_t i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(mel_t + (m + i) * kLanes + g * 8);
      transpose8(v);
      for (size_t l = 0; l < rows; ++l) _mm256_storeu_ps(out + (g * 8 + l) * n_mels + m, v[l]);
    }
    for (; m < n_mels; ++m)
      for (size_t l = 0; l < rows; ++l) out[(g * 8 + l) * n_mels + m] = mel_t[m * kLanes + g * 8 + l];
  }
}
#endif

using MelRowsFn = void (*)(const float*, size_t, const MelBands&, float*, float*);

MelRowsFn pick_mel_rows() {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  if (use_avx2()) return mel_rows_avx2;
#endif
  return mel_rows_generic;
}

// log10, the clip's floor at its peak - top_db / 10, (x + 4) / 4, then silence up to a whole
// token: the rows of out after the mel filters.
void finish_tokens(float* out, size_t frames, size_t n_mels, float top_db, size_t k) {
  log10_rows(out, n_mels * frames);
  const float floor = peak_of(out, n_mels * frames) - top_db / 10.0f;
  compress_rows(out, n_mels * frames, floor);
  const float silence = ((floor > -10.0f ? floor : -10.0f) + 4.0f) * 0.25f;
  std::fill(out + n_mels * frames, out + n_mels * token_count(frames, k) * k, silence);
}

}  // namespace

void log_mel_tokens(const float* spec, size_t frames, const MelBands& bands, float top_db,
                    size_t k, float* out) {
  const size_t n_mels = bands.n_mels, n_bins = bands.n_bins;
  static const MelRowsFn mel_rows = pick_mel_rows();
  thread_local std::vector<float> scratch;  // each thread keeps its own between calls
  scratch.resize((n_bins + n_mels) * kLanes);
  for (size_t t = 0; t < frames; t += kLanes) {
    mel_rows(spec + 2 * n_bins * t, std::min(kLanes, frames - t), bands, scratch.data(),
             out + n_mels * t);
  }
  finish_tokens(out, frames, n_mels, top_db, k);
}

void log_mel_tokens_from_wave(const float* x, size_t n, const FramePowerFft& fft, size_t hop,
                              const MelBands& bands, float top_db, size_t k, float* out) {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  const size_t n_mels = bands.n_mels, n_bins = bands.n_bins;
  const size_t frames = stft_frame_count(n, hop);
  // the clip with n_fft / 2 zeros in front and enough behind for every lane of the last group
  const size_t groups = (frames + 7) / 8;
  const size_t n_fft = fft.n_fft(), front = n_fft / 2;
  thread_local std::vector<float> padded, fft_scratch, power_t, mel_t;
  padded.assign(std::max(front + n + front, (groups * 8 - 1) * hop + n_fft), 0.0f);
  std::copy(x, x + n, padded.begin() + static_cast<ptrdiff_t>(front));
  fft_scratch.resize(fft.scratch_floats());
  power_t.resize(n_bins * kLanes);
  mel_t.resize(n_mels * kLanes);
  for (size_t t = 0; t < frames; t += kLanes) {
    const size_t lanes = std::min(kLanes, frames - t);
    for (size_t g = 0; g < kLanes / 8; ++g) {
      if (g * 8 < lanes) {
        fft.power8(padded.data() + (t + g * 8) * hop, hop, power_t.data() + g * 8, kLanes, fft_scratch.data());
      } else {
        for (size_t b = 0; b < n_bins; ++b) std::fill_n(power_t.data() + b * kLanes + g * 8, 8, 0.0f);
      }
    }
    mel_from_power_avx2(power_t.data(), lanes, bands, mel_t.data(), out + n_mels * t);
  }
  finish_tokens(out, frames, n_mels, top_db, k);
#else
  (void)x, (void)n, (void)fft, (void)hop, (void)bands, (void)top_db, (void)k, (void)out;
#endif
}

}  // namespace sdscore
