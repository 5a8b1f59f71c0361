// Inner loops of the polyphase resampler: one FIR dot product per output sample over a
// FilterBank row (four outputs that share a row per pass), the column loop of small up/down
// ratios (one output per vector lane), and the half-band decimator of the multi-stage path. Built for AVX-512F, AVX2+FMA and a portable baseline in the same binary
// (GCC function target attributes); the CPU picks one once at first use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "audio/filter_bank.hpp"

namespace sdscore {

// Computes `count` consecutive outputs. The first reads x[0 .. bank.taps) with fractional
// phase `rem` / bank.up; each next output advances by bank.down / bank.up input samples.
// The caller guarantees every read stays inside its buffer.
using FirRunFn = void (*)(const FilterBank& bank, uint32_t rem, const float* x, size_t count,
                          float* out);

// Half-band decimation by 2 (a symmetric filter whose even taps other than the centre are
// zero): out[k] = c[0] * x[2k] + sum_{i=1..pairs} c[i] * (x[2k + 2i - 1] + x[2k - 2i + 1]) for
// k < count. The caller guarantees x[1 - 2 * pairs .. 2 * count + 2 * pairs - 2) is readable.
using HalfbandFn = void (*)(const float* c, size_t pairs, const float* x, size_t count,
                            float* out);

// Vectorised across outputs, for banks with a column copy (filter_bank.hpp): for m < periods and
// r < bank.up, out[m * up + r] = sum_{c < column_width} columns[c * up + r] * x[m * down + c].
// Each output is one lane's multiply-adds in order of c, so how the loop splits the periods
// between lanes and tiles does not change it. Requires periods >= column_min_periods; the
// caller guarantees x[0 .. (periods - 1) * down + column_width) is readable.
using FirColumnsFn = void (*)(const FilterBank& bank, const float* x, size_t periods, float* out);

struct FirKernels {
  FirRunFn run;             // picks the exact or interpolated loop from the bank
  HalfbandFn halfband;
  const char* isa;          // "avx512f", "avx2+fma" or "generic"
  FirColumnsFn columns;     // null on the portable baseline
  size_t column_min_periods;
};

// Kernels for this CPU. Setting SDSCORE_DISABLE_SIMD=1 before first use forces the portable
// ones, SDSCORE_DISABLE_AVX512=1 the AVX2 ones (used by tests to check all agree).
const FirKernels& fir_kernels();

}  // namespace sdscore
