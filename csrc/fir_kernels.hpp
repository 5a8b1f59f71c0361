// Inner loops of the polyphase resampler: one FIR dot product per output sample over a
// FilterBank row. Built for AVX2+FMA and for a portable baseline in the same binary (GCC
// function target attributes); the CPU picks one once at first use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "filter_bank.hpp"

namespace sdscore {

// Computes `count` consecutive outputs. The first reads x[0 .. bank.taps) with fractional
// phase `rem` / bank.up; each next output advances by bank.down / bank.up input samples.
// The caller guarantees every read stays inside its buffer.
using FirRunFn = void (*)(const FilterBank& bank, uint32_t rem, const float* x, size_t count,
                          float* out);

struct FirKernels {
  FirRunFn run;        // picks the exact or interpolated loop from the bank
  const char* isa;     // "avx2+fma" or "generic"
};

// Kernels for this CPU. Setting SDSCORE_DISABLE_SIMD=1 before first use forces the portable
// ones (used by tests to check both agree).
const FirKernels& fir_kernels();

}  // namespace sdscore
