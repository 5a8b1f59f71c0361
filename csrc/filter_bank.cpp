// Filter design for filter_bank.hpp.
//
// The anti-alias / anti-image low-pass has its cutoff at the lower of the two Nyquist
// frequencies, a transition band from 0.82 to 1.18 of it and ~80 dB stopband. Everything
// below 0.8 x Nyquist is passed with < 1e-4 ripple, which is what scoring features use, and
// the short filter (~28 taps at the lower rate) keeps the dot products cheap. Aliases from
// the transition band land above 0.82 x Nyquist.
#include "filter_bank.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>

namespace sdscore {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kStopbandDb = 80.0;
constexpr double kTransitionWidth = 0.36;  // 0.82 .. 1.18 of the cutoff
constexpr uint32_t kMaxExactPhases = 1024;
constexpr uint32_t kInterpolatedRows = 256;  // linear-interpolation error < 3e-5 of full scale
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

std::shared_ptr<const FilterBank> design_bank(uint32_t sr_in, uint32_t sr_out) {
  auto bank = std::make_shared<FilterBank>();
  const uint32_t g = std::gcd(sr_in, sr_out);
  bank->up = sr_out / g;
  bank->down = sr_in / g;

  // Cutoff in cycles per input sample; Kaiser's length formula for the transition width.
  const double cutoff = 0.5 * std::min(1.0, static_cast<double>(sr_out) / sr_in);
  const double length = (kStopbandDb - 7.95) / (2.285 * 2.0 * kPi * kTransitionWidth * cutoff);
  const double beta = 0.1102 * (kStopbandDb - 8.7);
  bank->half = static_cast<uint32_t>(std::ceil(length / 2.0));
  bank->taps = (2 * size_t{bank->half} + 7) / 8 * 8;

  bank->interpolated = bank->up > kMaxExactPhases;
  bank->rows = bank->interpolated ? kInterpolatedRows : bank->up;
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

std::shared_ptr<const FilterBank> filter_bank_for(uint32_t sr_in, uint32_t sr_out) {
  static std::mutex mutex;
  static std::map<uint64_t, std::shared_ptr<const FilterBank>> cache;
  const uint64_t key = (static_cast<uint64_t>(sr_in) << 32) | sr_out;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto bank = design_bank(sr_in, sr_out);  // under the lock: each pair is designed once
  if (cache.size() >= kMaxCachedBanks) cache.clear();  // callers keep their shared_ptr alive
  cache.emplace(key, bank);
  return bank;
}

}  // namespace sdscore
