// WAV (RIFF / RF64 / BW64) parsing and decoding to float32 mono.
//
// Decoding is split in two so callers can size the output before touching the samples:
// parse_wav_header() validates the container and returns where the frames are and how
// many there are; decode_wav_frames() converts them. Both only ever read inside
// [data, data + size), whatever the bytes are (the parser is fuzzed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sdscore {

enum class SampleFormat { kUInt8, kInt16, kInt24, kInt32, kFloat32, kFloat64 };

struct WavInfo {
  SampleFormat format;
  uint32_t channels;
  uint32_t sample_rate;
  uint32_t block_align;  // bytes per frame = channels * bytes per sample
  size_t data_offset;    // first byte of the first frame
  size_t frames;         // whole frames present (never more than the buffer holds)
};

// Largest sample rate accepted, in Hz; anything above is treated as a corrupt header.
constexpr uint32_t kMaxSampleRate = 1000000;

// Validates a WAV byte string and locates its frames. `name` prefixes every error message;
// `max_seconds` > 0 rejects longer audio. Throws NotWavError when the bytes are not a
// RIFF/RF64 WAVE container, InvalidAudioError for any other problem.
WavInfo parse_wav_header(const uint8_t* data, size_t size, const std::string& name,
                         double max_seconds);

// Thrown by parse_wav_prefix when the header continues past the bytes in memory.
struct WavPrefixTooShort {};

// parse_wav_header for callers that hold only the first `available` bytes of a
// `file_size`-byte file (to plan a batch without reading whole files). Gives exactly
// parse_wav_header's result or error on the whole file, or throws WavPrefixTooShort when
// that needs bytes past `available`. Requires available <= file_size.
WavInfo parse_wav_prefix(const uint8_t* data, size_t available, uint64_t file_size,
                         const std::string& name, double max_seconds);

// Converts the frames described by `info` to float32 and downmixes them (mean over channels)
// into out[0 .. info.frames). Scaling matches libsndfile's float conversion exactly.
// Throws InvalidAudioError on NaN/Inf samples in float data.
void decode_wav_frames(const WavInfo& info, const uint8_t* data, float* out,
                       const std::string& name);

// Throws std::invalid_argument unless max_seconds is a number >= 0 (0 means no cap).
void check_max_seconds(double max_seconds);

}  // namespace sdscore
