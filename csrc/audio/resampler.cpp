// Polyphase resampling driver: runs the SIMD kernels on the outputs whose filter window lies
// inside the input (the column loop on whole periods where the bank has a column copy, the row
// loops elsewhere), and a gather-with-zeros path on the few outputs at each edge. This keeps
// bounds checks out of the inner loop without copying the input into a padded buffer. Large
// downsampling ratios first halve the rate with half-band stages (see halve_first).
#include "audio/resampler.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "audio/filter_bank.hpp"
#include "audio/fir_kernels.hpp"
#include "audio/wav_decoder.hpp"

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

namespace {

// Writes nout outputs of one bank: output k is the band-limited x (n samples, zeros outside)
// at input time (k * down + first) / up, first >= 0.
void run_bank(const FilterBank& bank, const float* x, size_t n, uint64_t first, float* out,
              size_t nout) {
  if (nout == 0) return;
  const uint64_t up = bank.up, down = bank.down, taps = bank.taps;
  const uint64_t lead = bank.half - 1;  // output k reads x[floor(t_k / up) - lead ...)
  auto ceil_div = [](uint64_t a, uint64_t b) { return (a + b - 1) / b; };

  // Outputs [fast_begin, fast_end) read only inside x: floor(t_k / up) >= lead and
  // floor(t_k / up) - lead + taps <= n, with t_k = k * down + first.
  const uint64_t lo = lead * up;
  const uint64_t k_lo = lo > first ? ceil_div(lo - first, down) : 0;
  uint64_t k_hi = 0;
  if (n + lead >= taps) {
    const uint64_t hi = (n + lead - taps + 1) * up;
    k_hi = hi > first ? ceil_div(hi - first, down) : 0;
  }
  const size_t fast_begin = static_cast<size_t>(std::min<uint64_t>(k_lo, nout));
  const size_t fast_end =
      static_cast<size_t>(std::max<uint64_t>(fast_begin, std::min<uint64_t>(k_hi, nout)));

  const FirKernels& kernels = fir_kernels();
  // Small up and down (upsampling): the column loop on whole periods of the fast range, from
  // its first output at a whole input sample; the row loops on what is left either side.
  size_t col_begin = fast_begin, col_end = fast_begin;
  if (bank.column_width > 0 && kernels.columns != nullptr) {
    const uint64_t width = bank.column_width;
    uint64_t k0 = fast_begin;
    while (k0 < fast_end && (k0 * down + first) % up != 0) ++k0;  // at most up - 1 steps
    // Periods m < periods: outputs k0 + m * up + r (r < up) before fast_end, reading
    // x[start + m * down + c] for c < width inside x (k0 >= fast_begin = k_lo: start >= 0).
    uint64_t start = 0, periods = 0;
    if (k0 < fast_end) {
      start = (k0 * down + first) / up - lead;
      periods = (fast_end - k0) / up;
      periods = start + width <= n ? std::min<uint64_t>(periods, (n - start - width) / down + 1) : 0;
    }
    if (periods >= kernels.column_min_periods) {
      kernels.columns(bank, x + start, periods, out + k0);
      col_begin = k0;
      col_end = k0 + periods * up;
    }
  }
  auto run_rows = [&](size_t a, size_t b) {  // outputs [a, b) of the fast range, row by row
    if (b <= a) return;
    const uint64_t t = a * down + first;
    kernels.run(bank, static_cast<uint32_t>(t % up), x + (t / up - lead), b - a, out + a);
  };
  run_rows(fast_begin, col_begin);
  run_rows(col_end, fast_end);
  // The outputs at each edge, [a, b): the row loops in one run over a copy of the samples they
  // read, zeros outside x (one gathered window per output cost ~40 us a call at 8 -> 16 kHz,
  // 0.3 s of 8-kHz audio's worth of the fast loop).
  std::vector<float> padded;
  auto run_edge = [&](size_t a, size_t b) {
    if (b <= a) return;
    const uint64_t ta = a * down + first, tb = (b - 1) * down + first;
    const int64_t lo = static_cast<int64_t>(ta / up) - static_cast<int64_t>(lead);
    const int64_t hi = static_cast<int64_t>(tb / up) - static_cast<int64_t>(lead) +
                       static_cast<int64_t>(taps);
    padded.assign(static_cast<size_t>(hi - lo), 0.0f);
    const int64_t from = std::max<int64_t>(lo, 0);
    const int64_t to = std::min<int64_t>(hi, static_cast<int64_t>(n));
    if (to > from) {
      std::memcpy(padded.data() + (from - lo), x + from, static_cast<size_t>(to - from) * 4);
    }
    kernels.run(bank, static_cast<uint32_t>(ta % up), padded.data(), b - a, out + a);
  };
  run_edge(0, fast_begin);
  run_edge(fast_end, nout);
}

// Whether halving sr_in first (a short pre-decimation filter that keeps [0, keep_hz]) and
// then resampling sr_in / 2 -> sr_out costs fewer multiply-adds than sr_in -> sr_out at once
// (counting the first stage as a full FIR; as a half-band filter it costs half that). The
// steep final filter's length grows with its input rate, so for ratios well above 2 the extra
// stage pays for itself: 44.1 kHz -> 16 kHz runs a 224-tap filter on 22.05 kHz instead of a
// 432-tap one on 44.1 kHz, after a half-band stage of 13 tap pairs.
bool halve_first(uint32_t sr_in, uint32_t sr_out, uint32_t keep_hz) {
  if (sr_in % 2 != 0 || sr_in / 2 <= sr_out) return false;
  const double direct = filter_length(sr_in, sr_out) * sr_out;
  const double staged = filter_length(sr_in, sr_in / 2, keep_hz) * (sr_in / 2) +
                        filter_length(sr_in / 2, sr_out) * sr_out;
  return staged < 0.9 * direct;
}

}  // namespace

void resample(const float* x, size_t n, uint32_t sr_in, uint32_t sr_out, float* out) {
  const size_t nout = resampled_length(n, sr_in, sr_out);
  if (sr_in == sr_out) {
    if (n > 0) std::memcpy(out, x, n * sizeof(float));
    return;
  }
  // Rejects extreme ratios (even for n == 0, and even when the staged path below would not use
  // this bank).
  const auto bank = filter_bank_for(sr_in, sr_out);
  if (nout == 0) return;
  const uint32_t keep_hz = sr_out / 2;
  // Pre-decimation by 2 while it saves work. The signal at each rate lives in a buffer that
  // starts `pad` samples before time 0: a stage's filter rings before the first and after the
  // last input sample, and the next stage must see that ringing (not zeros) to match the
  // one-stage result at the edges.
  const float* cur = x;
  size_t cur_n = n, cur_pad = 0;
  uint32_t cur_rate = sr_in;
  std::vector<float> storage, padded, c;
  const FirKernels& kernels = fir_kernels();
  while (halve_first(cur_rate, sr_out, keep_hz)) {
    // A half-band filter (cutoff at a quarter of cur_rate): centre tap, then symmetric pairs
    // at odd distances; the even ones are zero.
    const auto half_bank = filter_bank_for(cur_rate, cur_rate / 2, keep_hz);
    const size_t h = half_bank->half, pairs = h / 2;
    const float* row = half_bank->coeffs.data();  // row[h - 1 - d] is the tap at distance d
    c.assign(pairs + 1, 0.0f);
    c[0] = row[h - 1];
    for (size_t i = 1; i <= pairs; ++i) c[i] = row[h - 2 * i];
    const size_t ring = pairs + 1;  // half-rate samples of ringing on either side
    const size_t next_pad = (cur_pad + 1) / 2 + ring;
    const size_t next_n = next_pad + (cur_n - cur_pad + 1) / 2 + ring;
    // next[k] is centred on cur[2k - front], front = 2 * next_pad - cur_pad, and reads
    // cur[2k - front +- (2 * pairs - 1)]. Outputs [k_a, k_b) read only inside cur and run the
    // SIMD kernel on cur itself; the few at the edges gather with zeros.
    const int64_t front = static_cast<int64_t>(2 * next_pad) - static_cast<int64_t>(cur_pad);
    const int64_t reach = static_cast<int64_t>(2 * pairs) - 1;
    const int64_t len = static_cast<int64_t>(cur_n);
    const int64_t k_a = std::min<int64_t>((front + reach + 1) / 2, static_cast<int64_t>(next_n));
    const int64_t last = len - 1 - reach + front;  // 2k <= last for an inside read
    const int64_t k_b = std::max<int64_t>(
        k_a, std::min<int64_t>(static_cast<int64_t>(next_n), last >= 0 ? last / 2 + 1 : 0));
    storage.resize(next_n);
    float* next = storage.data();
    if (k_b > k_a) {
      kernels.halfband(c.data(), pairs, cur + (2 * k_a - front), k_b - k_a, next + k_a);
    }
    auto at = [&](int64_t j) { return j >= 0 && j < len ? cur[j] : 0.0f; };
    auto edge = [&](int64_t k) {
      const int64_t centre = 2 * k - front;
      float acc = c[0] * at(centre);
      for (size_t i = 1; i <= pairs; ++i) {
        const int64_t d = static_cast<int64_t>(2 * i) - 1;
        acc += c[i] * (at(centre + d) + at(centre - d));
      }
      next[k] = acc;
    };
    for (int64_t k = 0; k < k_a; ++k) edge(k);
    for (int64_t k = k_b; k < static_cast<int64_t>(next_n); ++k) edge(k);
    padded.swap(storage);  // `padded` now owns the half-rate signal, `storage` is free
    cur = padded.data();
    cur_n = next_n;
    cur_pad = next_pad;
    cur_rate /= 2;
  }
  const auto final_bank = cur_rate == sr_in ? bank : filter_bank_for(cur_rate, sr_out);
  run_bank(*final_bank, cur, cur_n, uint64_t{cur_pad} * final_bank->up, out, nout);
}

}  // namespace sdscore
