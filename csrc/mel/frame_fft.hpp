// Power spectra of 8 windowed STFT frames at once, one frame per AVX2 lane, for the compact
// model's log-mel front end: the frames' real FFT runs as a complex FFT of half the length
// (z[t] = x[2t] + i x[2t+1]; Stockham autosort, radices 4, 2, 3, 5) with the eight frames in the
// eight lanes of every vector, so each butterfly is plain vector arithmetic, then the usual
// split into the real spectrum. No frames or spectrum buffer ever leaves the cache.
#pragma once

#include <cstddef>
#include <vector>

namespace sdscore {

class FramePowerFft {
 public:
  // True when this CPU runs the vector kernel (AVX2+FMA, SDSCORE_DISABLE_SIMD unset) and n_fft
  // is even with n_fft / 2 a product of 2, 3 and 5 (400 = 2 * 200 = 2 * 4 * 2 * 5 * 5).
  static bool supports(size_t n_fft);

  // Call only when supports(n_fft); window has n_fft samples.
  FramePowerFft(size_t n_fft, const float* window);

  size_t n_fft() const { return n_fft_; }
  size_t bins() const { return half_ + 1; }
  size_t scratch_floats() const { return 4 * half_ * 8; }  // two ping-pong buffers, re and im

  // Frame l (0..7) is x[l * hop + j] * window[j], j < n_fft (the caller pads x so every read is
  // in bounds). Writes |X_l[b]|^2 to power[b * stride + l] for b < bins(). scratch: a
  // scratch_floats() buffer of the calling thread.
  void power8(const float* x, size_t hop, float* power, size_t stride, float* scratch) const;

 private:
  size_t n_fft_ = 0, half_ = 0;
  std::vector<int> radices_;
  std::vector<float> window_;
  std::vector<std::vector<float>> twiddles_;  // per stage: (cos, -sin) of 2 pi j u / n_s
  std::vector<float> split_;                  // per bin k <= half: (cos, -sin) of 2 pi k / n_fft
};

}  // namespace sdscore
