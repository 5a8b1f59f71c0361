// Exact (erf) GELU in place, for the compact reward model's feed-forward layers on the CPU:
// torch's CPU gelu runs ~1 ns per element on the bench machine; this one is a vectorised
// rational erf (AVX2+FMA) spread over the host's OpenMP team.
#pragma once

#include <cstddef>

namespace sdscore {

// x = GELU(x + bias) in place, with GELU(v) = 0.5 v (1 + erf(v / sqrt(2))): x is rows x cols
// (row-major), bias has cols entries or is null (no bias). On up to num_threads threads. The
// vector path's erf is within ~1e-7 of the exact one; the portable path uses std::erf.
void gelu_inplace(float* x, size_t rows, size_t cols, const float* bias, size_t num_threads);

// "avx2+fma" when the vector path runs on this CPU, else "generic".
const char* gelu_isa();

}  // namespace sdscore
