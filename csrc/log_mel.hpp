// The compact reward model's log-mel front end around the FFT: windowed STFT frames of many
// clips into one buffer, and from their spectra to stacked, compressed log-mel tokens in one
// pass (power, sparse mel filters, log10, the clip's 80 dB floor, Whisper's (x + 4) / 4,
// silence-filled frames up to a whole token). The FFT itself runs in between (torch.fft.rfft,
// MKL). Equal, up to float rounding, to engine/sdscore/models/log_mel.py's torch reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace sdscore {

// Non-zero span of each mel filter of a dense [n_mels, n_bins] filterbank.
struct MelBands {
  size_t n_mels = 0, n_bins = 0;
  std::vector<uint32_t> start, count;  // filter m weights bins [start[m], start[m] + count[m])
  std::vector<size_t> offset;          // filter m's weights are weights[offset[m] ...]
  std::vector<float> weights;
};

MelBands make_mel_bands(const float* dense, size_t n_mels, size_t n_bins);

// Frames of a centred STFT with zero ("constant") padding: 1 + n / hop.
inline size_t stft_frame_count(size_t n, size_t hop) { return 1 + n / hop; }

// Writes stft_frame_count(n, hop) rows of n_fft: row t is x[t * hop - n_fft / 2 + j] * window[j]
// (zero outside [0, n)).
void frame_clip(const float* x, size_t n, size_t n_fft, size_t hop, const float* window,
                float* out);

// Tokens per clip of `frames` STFT frames: ceil(frames / k).
inline size_t token_count(size_t frames, size_t k) { return (frames + k - 1) / k; }

// From one clip's spectrum (`frames` rows of n_bins interleaved (re, im) pairs) to its
// token_count(frames, k) * k rows of n_mels: log10(max(mel power, 1e-10)), floored at the clip's
// peak - top_db / 10, then (x + 4) / 4; rows past `frames` hold silence (floor, at least -10).
// frames must be >= 1.
void log_mel_tokens(const float* spec, size_t frames, const MelBands& bands, float top_db,
                    size_t k, float* out);

}  // namespace sdscore
