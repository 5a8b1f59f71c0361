// Filter design for filter_bank.hpp.
//
// The anti-alias / anti-image low-pass follows soxr's HQ preset, relative to the lower of the
// two Nyquist frequencies: flat passband to 0.913 of it, stopband from 1.0 of it (nothing just
// above the output Nyquist folds back) with >= kStopbandDb of rejection. A Kaiser-windowed sinc
// with its -6 dB point at the middle of that transition band; Kaiser's length formula gives
// ~196 taps at the lower rate (the steep band edge is what costs; the old 0.82..1.18, 80 dB
// filter had ~28). 130 dB: a 105-dB design measured 10 dB less rejection than soxr HQ just above
// Nyquist (-117.6 vs -128.9 dB at 1.01 x); this one at least as much there (-130.5), and about
// -135 dB deeper in the stopband, where the float32 coefficients set the floor. Measured
// response: docs/audio.md, "Resampler response".
#include "audio/filter_bank.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>

namespace sdscore {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kStopbandDb = 130.0;
constexpr double kPassbandEnd = 0.913;   // of the lower Nyquist frequency
constexpr double kStopbandBegin = 1.0;   // of the lower Nyquist frequency
constexpr uint32_t kMaxExactPhases = 1024;
constexpr size_t kMaxExactFloats = size_t{1} << 21;  // larger exact banks become interpolated
// Interpolated banks: rows = kRowsPerCycle * (cutoff in cycles per input sample), at least
// kMinInterpolatedRows. Blending rows spaced 1/rows apart linearly leaves images of the filter
// at multiples of `rows` cycles per input sample, scaled by about (cutoff / rows)^2: with
// cutoff / rows <= 1/4096 they sit ~144 dB down, below the stopband.
constexpr double kRowsPerCycle = 4096.0;
constexpr uint32_t kMinInterpolatedRows = 64;
constexpr size_t kMaxBankFloats = size_t{1} << 24;  // 64 MiB per bank
constexpr size_t kMaxCachedBanks = 32;

// Modified Bessel function of the first kind, order 0 (power series; converges fast for
// the beta values of a Kaiser window).
double bessel_i0(double x) {
  const double q = x * x / 4.0;
  double term = 1.0, sum = 1.0;
  for (int k = 1; k < 500 && term > 1e-17 * sum; ++k) {
    term *= q / (static_cast<double>(k) * k);
    sum += term;
  }
  return sum;
}

// Fills `row` (taps floats) with the filter for fractional delay `frac` in [0, 1],
// normalised to unit DC gain so every phase passes a constant exactly.
void design_row(double frac, double cutoff, uint32_t half, double beta, float* row, size_t taps) {
  const double i0_beta = bessel_i0(beta);
  std::vector<double> h(2 * half);
  double sum = 0.0;
  for (uint32_t j = 0; j < 2 * half; ++j) {
    const double d = frac + half - 1.0 - j;  // distance from the output instant, input samples
    const double r = d / half;
    const double window =
        std::fabs(r) >= 1.0 ? 0.0 : bessel_i0(beta * std::sqrt(1.0 - r * r)) / i0_beta;
    const double arg = 2.0 * cutoff * d;
    const double sinc = arg == 0.0 ? 1.0 : std::sin(kPi * arg) / (kPi * arg);
    h[j] = 2.0 * cutoff * sinc * window;
    sum += h[j];
  }
  for (size_t j = 0; j < taps; ++j) row[j] = j < h.size() ? static_cast<float>(h[j] / sum) : 0.0f;
}

// Band edges in cycles per input sample: the standard low-pass (keep_hz == 0) or a
// pre-decimation stage that keeps [0, keep_hz] and rejects what would alias onto it.
struct Edges {
  double pass, stop;
};

Edges band_edges(uint32_t sr_in, uint32_t sr_out, uint32_t keep_hz) {
  if (keep_hz == 0) {
    const double nyquist = 0.5 * std::min(1.0, static_cast<double>(sr_out) / sr_in);
    return {kPassbandEnd * nyquist, kStopbandBegin * nyquist};
  }
  return {static_cast<double>(keep_hz) / sr_in,
          static_cast<double>(sr_out - keep_hz) / sr_in};
}

// Kaiser's length formula (input samples) for the transition width.
double kaiser_length(const Edges& e) {
  return (kStopbandDb - 7.95) / (2.285 * 2.0 * kPi * (e.stop - e.pass));
}

// The blocked copy described in filter_bank.hpp: blocks of 4 outputs when 4 divides up, of 2
// when 2 does (odd `up` banks keep only the plain rows).
void add_blocked_copy(FilterBank& bank) {
  const uint64_t up = bank.up, down = bank.down;
  const uint32_t g = up % 4 == 0 ? 4 : up % 2 == 0 ? 2 : 0;
  if (g == 0) return;
  uint64_t inverse = 0;
  while ((inverse * down) % up != 1 % up) ++inverse;  // up <= kMaxExactPhases: a short search
  // The largest whole-sample advance inside a block sets how far its rows reach.
  uint64_t reach = 0;
  for (uint64_t j = 0; j < up; j += g)
    reach = std::max(reach, ((j + g - 1) * down) / up - (j * down) / up);
  bank.block_g = g;
  bank.down_inverse = static_cast<uint32_t>(inverse);
  bank.block_taps = (bank.taps + reach + 15) / 16 * 16;
  const size_t blocks = up / g, width = bank.block_taps;
  bank.block_start.resize(blocks);
  bank.block_coeffs.assign(blocks * g * width, 0.0f);
  for (size_t b = 0; b < blocks; ++b) {
    const uint64_t first = b * g;
    bank.block_start[b] = static_cast<uint32_t>((first * down) / up);
    for (uint32_t r = 0; r < g; ++r) {
      const uint64_t j = first + r;
      const size_t shift = (j * down) / up - bank.block_start[b];
      const float* row = &bank.coeffs[((j * down) % up) * bank.taps];
      std::copy(row, row + bank.taps, &bank.block_coeffs[(b * g + r) * width + shift]);
    }
  }
}

// The column copy described in filter_bank.hpp (small up and down only).
void add_column_copy(FilterBank& bank) {
  const uint32_t up = bank.up, down = bank.down;
  if (up < 2 || up > FilterBank::kMaxColumnUp || down > FilterBank::kMaxColumnDown) return;
  const size_t real_taps = 2 * size_t{bank.half};
  const size_t reach = (size_t{up - 1} * down) / up;  // the last output's whole-sample advance
  bank.column_width = (real_taps + reach + down - 1) / down * down;
  bank.columns.assign(bank.column_width * up, 0.0f);
  for (uint32_t r = 0; r < up; ++r) {
    const size_t shift = (size_t{r} * down) / up;
    const float* row = &bank.coeffs[((size_t{r} * down) % up) * bank.taps];
    for (size_t j = 0; j < real_taps; ++j) bank.columns[(shift + j) * up + r] = row[j];
  }
}

std::shared_ptr<const FilterBank> design_bank(uint32_t sr_in, uint32_t sr_out, uint32_t keep_hz) {
  auto bank = std::make_shared<FilterBank>();
  const uint32_t g = std::gcd(sr_in, sr_out);
  bank->up = sr_out / g;
  bank->down = sr_in / g;

  // The sinc's cutoff sits mid-way through the transition band (for a pre-decimation stage
  // that is exactly sr_out / (2 sr_in): a half-band filter when sr_out = sr_in / 2).
  const Edges edges = band_edges(sr_in, sr_out, keep_hz);
  const double cutoff = keep_hz == 0 ? 0.5 * (edges.pass + edges.stop)
                                     : static_cast<double>(sr_out) / (2.0 * sr_in);
  const double length = kaiser_length(edges);
  const double beta = 0.1102 * (kStopbandDb - 8.7);
  if (length > 2.0 * kMaxBankFloats) {
    throw std::invalid_argument("resampling " + std::to_string(sr_in) + " Hz -> " +
                                std::to_string(sr_out) +
                                " Hz needs a filter too long to be practical; resample in steps");
  }
  bank->half = static_cast<uint32_t>(std::ceil(length / 2.0));
  bank->taps = (2 * size_t{bank->half} + 15) / 16 * 16;

  bank->interpolated =
      bank->up > kMaxExactPhases || size_t{bank->up} * bank->taps > kMaxExactFloats;
  bank->rows = bank->up;
  if (bank->interpolated) {
    bank->rows = std::max(kMinInterpolatedRows,
                          static_cast<uint32_t>(std::ceil(kRowsPerCycle * cutoff)));
  }
  const size_t floats = size_t{bank->rows} * bank->taps * (bank->interpolated ? 2 : 1);
  if (floats > kMaxBankFloats) {
    throw std::invalid_argument("resampling " + std::to_string(sr_in) + " Hz -> " +
                                std::to_string(sr_out) +
                                " Hz needs a filter too long to be practical; resample in steps");
  }
  const size_t taps = bank->taps;
  bank->coeffs.assign(size_t{bank->rows} * taps, 0.0f);
  if (!bank->interpolated) {
    for (uint32_t p = 0; p < bank->rows; ++p)
      design_row(static_cast<double>(p) / bank->up, cutoff, bank->half, beta,
                 &bank->coeffs[p * taps], taps);
    add_blocked_copy(*bank);
    add_column_copy(*bank);
    return bank;
  }
  std::vector<float> next(taps);
  bank->deltas.assign(bank->coeffs.size(), 0.0f);
  design_row(0.0, cutoff, bank->half, beta, &bank->coeffs[0], taps);
  for (uint32_t i = 0; i < bank->rows; ++i) {
    float* row = &bank->coeffs[i * taps];
    design_row(static_cast<double>(i + 1) / bank->rows, cutoff, bank->half, beta, next.data(),
               taps);
    for (size_t j = 0; j < taps; ++j) bank->deltas[i * taps + j] = next[j] - row[j];
    if (i + 1 < bank->rows) std::copy(next.begin(), next.end(), &bank->coeffs[(i + 1) * taps]);
  }
  return bank;
}

}  // namespace

double filter_length(uint32_t sr_in, uint32_t sr_out, uint32_t keep_hz) {
  return kaiser_length(band_edges(sr_in, sr_out, keep_hz));
}

std::shared_ptr<const FilterBank> filter_bank_for(uint32_t sr_in, uint32_t sr_out,
                                                  uint32_t keep_hz) {
  static std::mutex mutex;
  static std::map<std::array<uint32_t, 3>, std::shared_ptr<const FilterBank>> cache;
  const std::array<uint32_t, 3> key{sr_in, sr_out, keep_hz};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto bank = design_bank(sr_in, sr_out, keep_hz);  // under the lock: each is designed once
  if (cache.size() >= kMaxCachedBanks) cache.clear();  // callers keep their shared_ptr alive
  cache.emplace(key, bank);
  return bank;
}

}  // namespace sdscore
