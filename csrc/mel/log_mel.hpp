// The compact reward model's log-mel front end: from clips to stacked, compressed log-mel tokens
// (power, sparse mel filters, log10, the clip's 80 dB floor, Whisper's (x + 4) / 4,
// silence-filled frames up to a whole token). With AVX2 and an n_fft whose half is a product of
// 2, 3 and 5, all of it in one pass per clip (log_mel_tokens_from_wave, FFT in frame_fft.hpp);
// otherwise in two steps around torch.fft.rfft: windowed frames of many clips into one buffer,
// then their spectra to tokens. Equal, up to float rounding, to engine/sdscore/models/
// log_mel.py's torch reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mel/frame_fft.hpp"

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

// log_mel_tokens of one clip straight from its n samples: frames (centred, zero-padded, hop
// apart), their power spectra by `fft` (FramePowerFft(n_fft, window); only when
// FramePowerFft::supports(n_fft)), the mel filters and the rest as above. No frames or spectrum
// buffer: everything between the samples and the tokens stays in per-thread scratch.
void log_mel_tokens_from_wave(const float* x, size_t n, const FramePowerFft& fft, size_t hop,
                              const MelBands& bands, float top_db, size_t k, float* out);

}  // namespace sdscore
