#include "log_mel.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

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

__attribute__((target_clones("avx2", "default"))) void power_row(const float* s, size_t n_bins,
                                                                   float* power) {
  for (size_t b = 0; b < n_bins; ++b) power[b] = s[2 * b] * s[2 * b] + s[2 * b + 1] * s[2 * b + 1];
}

}  // namespace

void log_mel_tokens(const float* spec, size_t frames, const MelBands& bands, float top_db,
                    size_t k, float* out) {
  const size_t n_mels = bands.n_mels, n_bins = bands.n_bins;
  std::vector<float> power(n_bins);
  for (size_t t = 0; t < frames; ++t) {
    power_row(spec + 2 * n_bins * t, n_bins, power.data());
    float* row = out + n_mels * t;
    for (size_t m = 0; m < n_mels; ++m) {
      const float* w = bands.weights.data() + bands.offset[m];
      const float* p = power.data() + bands.start[m];
      float acc = 0.0f;
      for (uint32_t j = 0; j < bands.count[m]; ++j) acc += w[j] * p[j];
      row[m] = acc > 1e-10f ? acc : 1e-10f;
    }
  }
  log10_rows(out, n_mels * frames);
  const float floor = peak_of(out, n_mels * frames) - top_db / 10.0f;
  compress_rows(out, n_mels * frames, floor);
  const float silence = ((floor > -10.0f ? floor : -10.0f) + 4.0f) * 0.25f;
  std::fill(out + n_mels * frames, out + n_mels * token_count(frames, k) * k, silence);
}

}  // namespace sdscore
