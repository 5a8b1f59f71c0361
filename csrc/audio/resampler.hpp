// Sample-rate conversion of float32 mono signals to any rate (windowed-sinc polyphase).
#pragma once

#include <cstddef>
#include <cstdint>

namespace sdscore {

// Throws std::invalid_argument unless 1 <= sr <= kMaxSampleRate; `what` names the argument.
void check_sample_rate(int64_t sr, const char* what);

// Output length for n input samples: round(n * sr_out / sr_in) with halves rounded up,
// the same length python-soxr returns.
size_t resampled_length(size_t n, uint32_t sr_in, uint32_t sr_out);

// Writes resampled_length(n, sr_in, sr_out) samples to `out`. Output k is the band-limited
// input at time k * sr_in / sr_out input samples (zero phase; samples outside the input
// count as zeros). sr_in == sr_out copies. Rates must be valid (check_sample_rate).
// Thread-safe; throws std::invalid_argument for inputs or ratios too large to handle.
void resample(const float* x, size_t n, uint32_t sr_in, uint32_t sr_out, float* out);

}  // namespace sdscore
