// Kaiser-windowed sinc polyphase filter banks for sample-rate conversion, designed once
// per (sr_in, sr_out) pair and shared between threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <vector>

namespace sdscore {

// Allocates on 64-byte boundaries, so that every row (a multiple of 16 floats) starts on a
// cache line and the FIR kernels' coefficient loads never straddle two lines.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) noexcept { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept { return true; }
  template <class U>
  bool operator!=(const CacheLineAllocator<U>&) const noexcept { return false; }
};

// Output sample k sits at input time t_k = k * down / up (input samples), where
// up/down = sr_out/sr_in reduced by their gcd, and is
//   y[k] = sum_j row(frac(t_k))[j] * x[floor(t_k) - half + 1 + j]:
// each row holds the filter sampled at one fractional delay, in `taps` contiguous floats
// (2 * half real taps, zero-padded to a multiple of 16 for SIMD), rows cache-line aligned.
struct FilterBank {
  uint32_t up = 1;
  uint32_t down = 1;
  uint32_t half = 1;
  size_t taps = 16;
  // Exact polyphase: `rows` == up and row p serves frac(t_k) == p / up.
  // Interpolated (when one row per phase would take too many rows or too much memory): row i
  // serves delay i / rows, and an output blends rows i and i+1 linearly, using `deltas`
  // (row i+1 minus row i).
  bool interpolated = false;
  uint32_t rows = 1;
  std::vector<float, CacheLineAllocator<float>> coeffs;  // rows x taps
  std::vector<float, CacheLineAllocator<float>> deltas;  // rows x taps, interpolated banks only

  // Exact banks with an even `up` also carry a blocked copy for the register-blocked AVX-512
  // loop. Output j (counted from an output at input time 0) has phase (j * down) % up and
  // starts reading floor(j * down / up) samples later. Outputs are taken in blocks of
  // `block_g` whose first index is a multiple of block_g; block b < up / block_g holds
  // block_g rows of `block_taps` floats: row r is the phase row of output b * block_g + r,
  // placed `r`'s whole-sample advance over the block's first output further in and zero
  // elsewhere, so the whole block reads one window of x. block_start[b] is floor(b *
  // block_g * down / up); down_inverse is down's inverse modulo up (finds a phase's index).
  uint32_t block_g = 0;  // 0: no blocked copy
  size_t block_taps = 0;
  uint32_t down_inverse = 0;
  std::vector<uint32_t> block_start;
  // (up / block_g) blocks x block_g rows x block_taps floats
  std::vector<float, CacheLineAllocator<float>> block_coeffs;

  // Exact banks with up in 2..kMaxColumnUp and down <= kMaxColumnDown (integer and near-integer
  // upsampling: 8 -> 16/24 kHz, 16 -> 24/48 kHz) also carry a column copy for the vectorised-
  // across-outputs loop. Counting outputs from one whose input time is a whole sample T, output
  // m * up + r reads x[T - half + 1 + m * down + c] with weight columns[c * up + r], for
  // c < column_width: the phase row of output r, (r * down) % up, placed floor(r * down / up)
  // columns in (zero elsewhere). column_width is a multiple of down. 0: no column copy.
  static constexpr uint32_t kMaxColumnUp = 4;
  static constexpr uint32_t kMaxColumnDown = 4;
  size_t column_width = 0;
  std::vector<float, CacheLineAllocator<float>> columns;  // column_width x up
};

// The bank for sr_in -> sr_out (different, both valid rates), built on first use and cached.
// keep_hz == 0: the anti-alias / anti-image low-pass (soxr HQ's band edges, see the .cpp).
// keep_hz > 0: a cheap pre-decimation stage (sr_out < sr_in) that passes [0, keep_hz] flat and
// rejects only what would alias onto it at sr_out (stopband from sr_out - keep_hz); a later
// stage removes the rest. Thread-safe. Throws std::invalid_argument when the ratio is so
// extreme that the filter would not fit a sane memory budget.
std::shared_ptr<const FilterBank> filter_bank_for(uint32_t sr_in, uint32_t sr_out,
                                                  uint32_t keep_hz = 0);

// The length in input samples (before rounding and padding) of that bank's filter.
double filter_length(uint32_t sr_in, uint32_t sr_out, uint32_t keep_hz = 0);

}  // namespace sdscore
