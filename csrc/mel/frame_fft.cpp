#include "mel/frame_fft.hpp"

#include <cmath>
#include <utility>

#include "common/simd.hpp"

namespace sdscore {
namespace {

// Radices for n: fours first, then 2, 3, 5; empty when another prime divides n.
std::vector<int> factor(size_t n) {
  std::vector<int> radices;
  for (int p : {4, 2, 3, 5}) {
    while (n > 1 && n % static_cast<size_t>(p) == 0) {
      radices.push_back(p);
      n /= static_cast<size_t>(p);
    }
  }
  if (n != 1) radices.clear();
  return radices;
}

}  // namespace

bool FramePowerFft::supports(size_t n_fft) {
#ifdef SDSCORE_HAVE_AVX2_KERNELS
  return use_avx2() && n_fft >= 4 && n_fft % 2 == 0 && !factor(n_fft / 2).empty();
#else
  (void)n_fft;
  return false;
#endif
}

FramePowerFft::FramePowerFft(size_t n_fft, const float* window)
    : n_fft_(n_fft), half_(n_fft / 2), radices_(factor(n_fft / 2)), window_(window, window + n_fft) {
  const double two_pi = 6.283185307179586476925286766559;
  size_t n_s = half_;
  for (int p : radices_) {
    const size_t m = n_s / static_cast<size_t>(p);
    std::vector<float> tw;
    for (size_t j = 0; j < m; ++j)
      for (int u = 1; u < p; ++u) {
        const double a = two_pi * static_cast<double>(j * static_cast<size_t>(u)) / static_cast<double>(n_s);
        tw.push_back(static_cast<float>(std::cos(a)));
        tw.push_back(static_cast<float>(-std::sin(a)));
      }
    twiddles_.push_back(std::move(tw));
    n_s = m;
  }
  for (size_t k = 0; k <= half_; ++k) {
    const double a = two_pi * static_cast<double>(k) / static_cast<double>(n_fft);
    split_.push_back(static_cast<float>(std::cos(a)));
    split_.push_back(static_cast<float>(-std::sin(a)));
  }
}

#ifdef SDSCORE_HAVE_AVX2_KERNELS
namespace {

struct C8 {  // eight complex numbers, one per lane
  __m256 re, im;
};

SDSCORE_TARGET_AVX2 inline C8 add(C8 a, C8 b) { return {_mm256_add_ps(a.re, b.re), _mm256_add_ps(a.im, b.im)}; }
SDSCORE_TARGET_AVX2 inline C8 sub(C8 a, C8 b) { return {_mm256_sub_ps(a.re, b.re), _mm256_sub_ps(a.im, b.im)}; }
SDSCORE_TARGET_AVX2 inline C8 scale(C8 a, __m256 s) { return {_mm256_mul_ps(a.re, s), _mm256_mul_ps(a.im, s)}; }
// a * (wr + i wi)
SDSCORE_TARGET_AVX2 inline C8 twiddle(C8 a, const float* w) {
  const __m256 wr = _mm256_broadcast_ss(w), wi = _mm256_broadcast_ss(w + 1);
  return {_mm256_fmsub_ps(a.re, wr, _mm256_mul_ps(a.im, wi)), _mm256_fmadd_ps(a.re, wi, _mm256_mul_ps(a.im, wr))};
}
// a - i b and a + i b
SDSCORE_TARGET_AVX2 inline C8 minus_i(C8 a, C8 b) { return {_mm256_add_ps(a.re, b.im), _mm256_sub_ps(a.im, b.re)}; }
SDSCORE_TARGET_AVX2 inline C8 plus_i(C8 a, C8 b) { return {_mm256_sub_ps(a.re, b.im), _mm256_add_ps(a.im, b.re)}; }

// b[u] = sum_r a[r] e^{-2 pi i r u / p}, p in {2, 3, 4, 5}
template <int P>
SDSCORE_TARGET_AVX2 inline void butterfly(const C8* a, C8* b) {
  switch (P) {
    case 2:
      b[0] = add(a[0], a[1]);
      b[1] = sub(a[0], a[1]);
      return;
    case 3: {
      const C8 t1 = add(a[1], a[2]), t2 = sub(a[1], a[2]);
      b[0] = add(a[0], t1);
      const C8 m = add(a[0], scale(t1, _mm256_set1_ps(-0.5f)));
      const C8 n = scale(t2, _mm256_set1_ps(0.86602540378443864676f));
      b[1] = minus_i(m, n);
      b[2] = plus_i(m, n);
      return;
    }
    case 4: {
      const C8 s02 = add(a[0], a[2]), d02 = sub(a[0], a[2]), s13 = add(a[1], a[3]), d13 = sub(a[1], a[3]);
      b[0] = add(s02, s13);
      b[2] = sub(s02, s13);
      b[1] = minus_i(d02, d13);
      b[3] = plus_i(d02, d13);
      return;
    }
    default: {  // 5
      const __m256 c1 = _mm256_set1_ps(0.30901699437494742410f), c2 = _mm256_set1_ps(-0.80901699437494742410f);
      const __m256 s1 = _mm256_set1_ps(0.95105651629515357212f), s2 = _mm256_set1_ps(0.58778525229247312917f);
      const C8 t1 = add(a[1], a[4]), t2 = add(a[2], a[3]), t3 = sub(a[1], a[4]), t4 = sub(a[2], a[3]);
      b[0] = add(a[0], add(t1, t2));
      const C8 m1 = {_mm256_fmadd_ps(c2, t2.re, _mm256_fmadd_ps(c1, t1.re, a[0].re)),
                     _mm256_fmadd_ps(c2, t2.im, _mm256_fmadd_ps(c1, t1.im, a[0].im))};
      const C8 m2 = {_mm256_fmadd_ps(c1, t2.re, _mm256_fmadd_ps(c2, t1.re, a[0].re)),
                     _mm256_fmadd_ps(c1, t2.im, _mm256_fmadd_ps(c2, t1.im, a[0].im))};
      const C8 n1 = {_mm256_fmadd_ps(s2, t4.re, _mm256_mul_ps(s1, t3.re)),
                     _mm256_fmadd_ps(s2, t4.im, _mm256_mul_ps(s1, t3.im))};
      const C8 n2 = {_mm256_fnmadd_ps(s1, t4.re, _mm256_mul_ps(s2, t3.re)),
                     _mm256_fnmadd_ps(s1, t4.im, _mm256_mul_ps(s2, t3.im))};
      b[1] = minus_i(m1, n1);
      b[4] = plus_i(m1, n1);
      b[2] = minus_i(m2, n2);
      b[3] = plus_i(m2, n2);
      return;
    }
  }
}

// One Stockham stage of radix P (decimation in frequency): s interleaved sequences of n_s = P * m
// points in `in` become P * s sequences of m points in `out`, twiddled by tw.
template <int P>
SDSCORE_TARGET_AVX2 void stage(const float* in_re, const float* in_im, float* out_re, float* out_im, size_t m,
                               size_t s, const float* tw) {
  for (size_t j = 0; j < m; ++j, tw += 2 * (P - 1)) {
    for (size_t q = 0; q < s; ++q) {
      C8 a[P], b[P];
      for (int r = 0; r < P; ++r) {
        const size_t at = 8 * (q + s * (j + static_cast<size_t>(r) * m));
        a[r] = {_mm256_loadu_ps(in_re + at), _mm256_loadu_ps(in_im + at)};
      }
      butterfly<P>(a, b);
      for (int u = 0; u < P; ++u) {
        const C8 v = u == 0 ? b[0] : twiddle(b[u], tw + 2 * (u - 1));
        const size_t at = 8 * (q + s * (static_cast<size_t>(P) * j + static_cast<size_t>(u)));
        _mm256_storeu_ps(out_re + at, v.re);
        _mm256_storeu_ps(out_im + at, v.im);
      }
    }
  }
}

}  // namespace

SDSCORE_TARGET_AVX2 void FramePowerFft::power8(const float* x, size_t hop, float* power, size_t stride,
                                               float* scratch) const {
  const size_t M = half_;
  float* a_re = scratch;  // two ping-pong buffers of M complex vectors, re and im apart
  float* a_im = a_re + 8 * M;
  float* b_re = a_im + 8 * M;
  float* b_im = b_re + 8 * M;
  // z[t] = frame[2t] + i frame[2t + 1], frames in lanes: 8 x 8 blocks of samples transposed
  size_t j0 = 0;
  for (; j0 + 8 <= n_fft_; j0 += 8) {
    __m256 r[8];
    const __m256 w = _mm256_loadu_ps(window_.data() + j0);
    for (size_t l = 0; l < 8; ++l) r[l] = _mm256_mul_ps(_mm256_loadu_ps(x + l * hop + j0), w);
    transpose8(r);
    for (size_t c = 0; c < 8; c += 2) {
      _mm256_storeu_ps(a_re + 8 * ((j0 + c) / 2), r[c]);
      _mm256_storeu_ps(a_im + 8 * ((j0 + c) / 2), r[c + 1]);
    }
  }
  for (size_t j = j0; j < n_fft_; ++j)  // the last n_fft % 8 samples, lane by lane
    for (size_t l = 0; l < 8; ++l) (j % 2 ? a_im : a_re)[8 * (j / 2) + l] = x[l * hop + j] * window_[j];
  // Stockham autosort, decimation in frequency: stage with radix p maps s interleaved sequences
  // of n_s points to p * s sequences of n_s / p points
  float *in_re = a_re, *in_im = a_im, *out_re = b_re, *out_im = b_im;
  size_t n_s = M, s = 1;
  for (size_t k = 0; k < radices_.size(); ++k) {
    const int p = radices_[k];
    const size_t m = n_s / static_cast<size_t>(p);
    const float* tw = twiddles_[k].data();
    switch (p) {
      case 2: stage<2>(in_re, in_im, out_re, out_im, m, s, tw); break;
      case 3: stage<3>(in_re, in_im, out_re, out_im, m, s, tw); break;
      case 4: stage<4>(in_re, in_im, out_re, out_im, m, s, tw); break;
      default: stage<5>(in_re, in_im, out_re, out_im, m, s, tw); break;
    }
    std::swap(in_re, out_re);
    std::swap(in_im, out_im);
    s *= static_cast<size_t>(p);
    n_s = m;
  }
  // X[k] = E + W^k O with E = (Z[k] + conj Z[M-k]) / 2, O = (Z[k] - conj Z[M-k]) / 2i
  const __m256 half = _mm256_set1_ps(0.5f);
  for (size_t k = 0; k <= M; ++k) {
    const size_t kk = k == M ? 0 : k, mk = k == 0 ? 0 : M - k;
    const __m256 zr = _mm256_loadu_ps(in_re + 8 * kk), zi = _mm256_loadu_ps(in_im + 8 * kk);
    const __m256 yr = _mm256_loadu_ps(in_re + 8 * mk), yi = _mm256_loadu_ps(in_im + 8 * mk);
    const __m256 er = _mm256_mul_ps(half, _mm256_add_ps(zr, yr)), ei = _mm256_mul_ps(half, _mm256_sub_ps(zi, yi));
    const __m256 orr = _mm256_mul_ps(half, _mm256_add_ps(zi, yi)), oi = _mm256_mul_ps(half, _mm256_sub_ps(yr, zr));
    const __m256 c = _mm256_broadcast_ss(&split_[2 * k]), sn = _mm256_broadcast_ss(&split_[2 * k + 1]);
    const __m256 xr = _mm256_fnmadd_ps(sn, oi, _mm256_fmadd_ps(c, orr, er));
    const __m256 xi = _mm256_fmadd_ps(sn, orr, _mm256_fmadd_ps(c, oi, ei));
    _mm256_storeu_ps(power + k * stride, _mm256_fmadd_ps(xr, xr, _mm256_mul_ps(xi, xi)));
  }
}
#else
// Without AVX2 kernels supports() is false and nothing calls this.
void FramePowerFft::power8(const float*, size_t, float*, size_t, float*) const {}
#endif

}  // namespace sdscore
