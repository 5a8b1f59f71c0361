// Polyphase resampling driver: runs the SIMD kernel on the outputs whose filter window lies
// inside the input, and a gather-with-zeros path on the few outputs at each edge. This keeps
// bounds checks out of the inner loop without copying the input into a padded buffer.
#include "resampler.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "filter_bank.hpp"
#include "fir_kernels.hpp"
#include "wav_decoder.hpp"

namespace sdscore {
namespace {

// Bounds every product in the index arithmetic below 2^63: n * rate <= 2^40 * 2^20.
constexpr uint64_t kMaxInputSamples = uint64_t{1} << 40;

}  // namespace

void check_sample_rate(int64_t sr, const char* what) {
  if (sr < 1 || sr > kMaxSampleRate) {
    throw std::invalid_argument(std::string(what) + " must be in 1.." +
                                std::to_string(kMaxSampleRate) + " Hz, got " + std::to_string(sr));
  }
}

size_t resampled_length(size_t n, uint32_t sr_in, uint32_t sr_out) {
  if (n > kMaxInputSamples)
    throw std::invalid_argument("resample: input of " + std::to_string(n) + " samples is too long");
  const uint64_t g = std::gcd(sr_in, sr_out);
  const uint64_t up = sr_out / g, down = sr_in / g;
  return static_cast<size_t>((2 * n * up + down) / (2 * down));
}

void resample(const float* x, size_t n, uint32_t sr_in, uint32_t sr_out, float* out) {
  const size_t nout = resampled_length(n, sr_in, sr_out);
  if (sr_in == sr_out) {
    if (n > 0) std::memcpy(out, x, n * sizeof(float));
    return;
  }
  const auto bank_ptr = filter_bank_for(sr_in, sr_out);  // rejects extreme ratios, even for n == 0
  if (nout == 0) return;
  const FilterBank& bank = *bank_ptr;
  const uint64_t up = bank.up, down = bank.down, taps = bank.taps;
  const uint64_t lead = bank.half - 1;  // output k reads x[floor(k*down/up) - lead ...)

  // Outputs [fast_begin, fast_end) read only inside x: floor(k*down/up) >= lead and
  // floor(k*down/up) - lead + taps <= n.
  const uint64_t k_lo = (lead * up + down - 1) / down;
  uint64_t k_hi = 0;
  if (n + lead >= taps) k_hi = ((n + lead - taps + 1) * up + down - 1) / down;
  const size_t fast_begin = static_cast<size_t>(std::min<uint64_t>(k_lo, nout));
  const size_t fast_end =
      static_cast<size_t>(std::max<uint64_t>(fast_begin, std::min<uint64_t>(k_hi, nout)));

  const FirKernels& kernels = fir_kernels();
  if (fast_end > fast_begin) {
    const uint64_t t = fast_begin * down;
    kernels.run(bank, static_cast<uint32_t>(t % up), x + (t / up - lead), fast_end - fast_begin,
                out + fast_begin);
  }
  std::vector<float> window(taps);
  auto edge_output = [&](size_t k) {
    const uint64_t t = k * down;
    const int64_t first = static_cast<int64_t>(t / up) - static_cast<int64_t>(lead);
    for (uint64_t j = 0; j < taps; ++j) {
      const int64_t i = first + static_cast<int64_t>(j);
      window[j] = (i >= 0 && static_cast<uint64_t>(i) < n) ? x[i] : 0.0f;
    }
    kernels.run(bank, static_cast<uint32_t>(t % up), window.data(), 1, out + k);
  };
  for (size_t k = 0; k < fast_begin; ++k) edge_output(k);
  for (size_t k = fast_end; k < nout; ++k) edge_output(k);
}

}  // namespace sdscore
