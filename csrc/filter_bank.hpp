// Kaiser-windowed sinc polyphase filter banks for sample-rate conversion, designed once
// per (sr_in, sr_out) pair and shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace sdscore {

// Output sample k sits at input time t_k = k * down / up (input samples), where
// up/down = sr_out/sr_in reduced by their gcd, and is
//   y[k] = sum_j row(frac(t_k))[j] * x[floor(t_k) - half + 1 + j]:
// each row holds the filter sampled at one fractional delay, in `taps` contiguous floats
// (2 * half real taps, zero-padded to a multiple of 8 for SIMD).
struct FilterBank {
  uint32_t up = 1;
  uint32_t down = 1;
  uint32_t half = 1;
  size_t taps = 8;
  // Exact polyphase: `rows` == up and row p serves frac(t_k) == p / up.
  // Interpolated (when up is too large for one row per phase): row i serves delay i / rows,
  // and an output blends rows i and i+1 linearly, using `deltas` (row i+1 minus row i).
  bool interpolated = false;
  uint32_t rows = 1;
  std::vector<float> coeffs;  // rows x taps
  std::vector<float> deltas;  // rows x taps, interpolated banks only
};

// The bank for sr_in -> sr_out (different, both valid rates), built on first use and cached.
// Thread-safe. Throws std::invalid_argument when the ratio is so extreme that the filter
// would not fit a sane memory budget.
std::shared_ptr<const FilterBank> filter_bank_for(uint32_t sr_in, uint32_t sr_out);

}  // namespace sdscore
