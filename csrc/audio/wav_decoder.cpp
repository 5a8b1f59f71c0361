// WAV parsing and decoding; see wav_decoder.hpp. All sizes are checked against the buffer
// length in 64-bit arithmetic before any read, so corrupt headers cannot cause out-of-bounds
// access or overflow.
#include "audio/wav_decoder.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "audio/audio_errors.hpp"

namespace sdscore {
namespace {

constexpr uint16_t kTagPcm = 0x0001;
constexpr uint16_t kTagFloat = 0x0003;
constexpr uint16_t kTagExtensible = 0xFFFE;
constexpr uint32_t kSizeUnknown = 0xFFFFFFFFu;  // RF64 placeholder / streamed writers
constexpr uint32_t kSoxPipeSize = 0x7FFFF000u;  // sox writing to a pipe
constexpr uint32_t kWrappedFloor = 0xFFFFF000u;  // "file size - header" written with size 0: -44 etc.

// A data size that streaming writers put in a header they cannot go back and finish: the samples
// run to the end of the file. Seen in the wild: 0xFFFFFFFF (ffmpeg to a pipe, RF64 without ds64),
// 0x7FFFF000 (sox to a pipe), and small negative numbers such as 2^32 - 44 (a writer that stored
// "file length - header" before it knew the length; one ships in Praat's own test sounds).
bool is_placeholder_size(uint32_t declared) {
  return declared == kSoxPipeSize || declared >= kWrappedFloor;
}

// Bytes 2..15 of the KSDATAFORMAT_SUBTYPE_{PCM,IEEE_FLOAT} GUIDs; bytes 0..1 hold the tag.
constexpr uint8_t kSubformatGuidTail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                            0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71};

uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

uint64_t load_u64(const uint8_t* p) {
  return static_cast<uint64_t>(load_u32(p)) | (static_cast<uint64_t>(load_u32(p + 4)) << 32);
}

bool has_id(const uint8_t* p, const char* id) { return std::memcmp(p, id, 4) == 0; }

[[noreturn]] void fail(const std::string& name, const std::string& problem) {
  throw InvalidAudioError(name + ": " + problem);
}

// Seconds formatted with at most 3 decimals and no trailing zeros ("12.3", "10").
std::string format_seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  std::string out(buf);
  out.erase(out.find_last_not_of('0') + 1);
  if (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

struct FmtChunk {
  uint16_t tag;
  uint16_t channels;
  uint32_t sample_rate;
  uint16_t block_align;
  uint16_t bits;
};

// Reads and validates the fmt chunk body. `avail` bytes of it are inside the file,
// `readable` of those are in memory (see parse_wav_prefix).
FmtChunk parse_fmt(const uint8_t* body, uint64_t declared, uint64_t avail, uint64_t readable,
                   const std::string& name) {
  if (declared < 16) fail(name, "fmt chunk too small (" + std::to_string(declared) + " bytes)");
  if (avail < 16) fail(name, "truncated header: file ends inside the fmt chunk");
  if (readable < 16) throw WavPrefixTooShort{};
  FmtChunk f{load_u16(body), load_u16(body + 2), load_u32(body + 4), load_u16(body + 12),
             load_u16(body + 14)};
  if (f.tag == kTagExtensible) {
    if (declared < 40) fail(name, "WAVE_FORMAT_EXTENSIBLE fmt chunk too small");
    if (avail < 40) fail(name, "truncated header: file ends inside the fmt chunk");
    if (readable < 40) throw WavPrefixTooShort{};
    const uint8_t* guid = body + 24;
    if (std::memcmp(guid + 2, kSubformatGuidTail, sizeof kSubformatGuidTail) != 0)
      fail(name, "unsupported WAVE_FORMAT_EXTENSIBLE subformat GUID");
    f.tag = load_u16(guid);
  }
  if (f.channels == 0) fail(name, "0 channels");
  if (f.tag != kTagPcm && f.tag != kTagFloat) {
    char buf[96];
    std::snprintf(buf, sizeof buf,
                  "unsupported format tag 0x%04X (only PCM 0x0001 and IEEE float 0x0003)", f.tag);
    throw NotWavError(name + ": " + buf);  // a codec (mu-law, ADPCM...) another decoder may handle
  }
  const bool bits_ok = f.tag == kTagPcm
                           ? (f.bits == 8 || f.bits == 16 || f.bits == 24 || f.bits == 32)
                           : (f.bits == 32 || f.bits == 64);
  if (!bits_ok) {
    fail(name, "unsupported " + std::to_string(f.bits) + " bits per sample for " +
                   (f.tag == kTagPcm ? "PCM" : "IEEE float"));
  }
  const uint32_t expected_align = static_cast<uint32_t>(f.channels) * (f.bits / 8);
  if (f.block_align != expected_align) {
    fail(name, "block_align " + std::to_string(f.block_align) + " is inconsistent with " +
                   std::to_string(f.channels) + " channels x " + std::to_string(f.bits) +
                   " bits");
  }
  if (f.sample_rate == 0) fail(name, "sample rate 0 Hz is invalid");
  if (f.sample_rate > kMaxSampleRate)
    fail(name, "absurd sample rate " + std::to_string(f.sample_rate) + " Hz");
  return f;
}

SampleFormat sample_format(const FmtChunk& f) {
  if (f.tag == kTagFloat) return f.bits == 32 ? SampleFormat::kFloat32 : SampleFormat::kFloat64;
  switch (f.bits) {
    case 8: return SampleFormat::kUInt8;
    case 16: return SampleFormat::kInt16;
    case 24: return SampleFormat::kInt24;
    default: return SampleFormat::kInt32;
  }
}

// One sample -> float32, exactly as libsndfile's sf_read_float does it (int -> float,
// then an exact power-of-two scale).
struct LoadUInt8 {
  static constexpr size_t kBytes = 1;
  static float load(const uint8_t* p) { return static_cast<float>(int{p[0]} - 128) * (1.0f / 128); }
};
struct LoadInt16 {
  static constexpr size_t kBytes = 2;
  static float load(const uint8_t* p) {
    return static_cast<float>(static_cast<int16_t>(load_u16(p))) * (1.0f / 32768);
  }
};
struct LoadInt24 {
  static constexpr size_t kBytes = 3;
  static float load(const uint8_t* p) {
    const uint32_t u = (uint32_t{p[0]} << 8) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 24);
    return static_cast<float>(static_cast<int32_t>(u) >> 8) * (1.0f / 8388608);
  }
};
struct LoadInt32 {
  static constexpr size_t kBytes = 4;
  static float load(const uint8_t* p) {
    return static_cast<float>(static_cast<int32_t>(load_u32(p))) * (1.0f / 2147483648.0f);
  }
};
struct LoadFloat32 {
  static constexpr size_t kBytes = 4;
  static float raw(const uint8_t* p) {
    const uint32_t u = load_u32(p);
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static float load(const uint8_t* p) { return raw(p); }
  static bool finite(const uint8_t* p) { return std::isfinite(raw(p)); }
};
struct LoadFloat64 {
  static constexpr size_t kBytes = 8;
  static double raw(const uint8_t* p) {
    const uint64_t u = load_u64(p);
    double d;
    std::memcpy(&d, &u, sizeof d);
    return d;
  }
  static float load(const uint8_t* p) { return static_cast<float>(raw(p)); }
  static bool finite(const uint8_t* p) { return std::isfinite(raw(p)); }
};

// Mean over channels, summed in float32 from channel 0 upwards like numpy's mean(axis=1).
template <class Load>
void downmix(const uint8_t* src, size_t frames, uint32_t channels, float* out) {
  if (channels == 1) {
    for (size_t i = 0; i < frames; ++i) out[i] = Load::load(src + i * Load::kBytes);
    return;
  }
  const size_t stride = size_t{channels} * Load::kBytes;
  const float n = static_cast<float>(channels);
  for (size_t i = 0; i < frames; ++i) {
    const uint8_t* frame = src + i * stride;
    float acc = 0.0f;
    for (uint32_t c = 0; c < channels; ++c) acc += Load::load(frame + c * Load::kBytes);
    out[i] = acc / n;
  }
}

// Float data must be finite. A finite mean proves all samples of a frame finite, so the
// common case costs one pass over the output; only a bad file is rescanned to name the frame.
template <class Load>
void decode_float(const WavInfo& info, const uint8_t* src, float* out, const std::string& name) {
  downmix<Load>(src, info.frames, info.channels, out);
  bool all_finite = true;
  for (size_t i = 0; i < info.frames; ++i) all_finite &= std::isfinite(out[i]);
  if (all_finite) return;
  for (size_t i = 0; i < info.frames; ++i) {
    for (size_t c = 0; c < info.channels; ++c) {
      if (!Load::finite(src + (i * info.channels + c) * Load::kBytes))
        fail(name, "non-finite sample (NaN/Inf) at frame " + std::to_string(i));
    }
    if (!std::isfinite(out[i]))
      fail(name, "sample at frame " + std::to_string(i) + " is out of float32 range");
  }
}

}  // namespace

void check_max_seconds(double max_seconds) {
  if (!(max_seconds >= 0.0))  // also rejects NaN
    throw std::invalid_argument("max_seconds must be >= 0 (0 means no cap), got " +
                                std::to_string(max_seconds));
}

WavInfo parse_wav_prefix(const uint8_t* data, size_t available, uint64_t file_size,
                         const std::string& name, double max_seconds) {
  check_max_seconds(max_seconds);
  // Every read is checked twice: against the file (a real error when it runs past the end)
  // and against what is in memory (WavPrefixTooShort: the caller must read more).
  const auto need = [&](uint64_t end) {
    if (end > available) throw WavPrefixTooShort{};
  };
  if (file_size == 0) fail(name, "empty input (0 bytes)");
  if (file_size >= 4) need(4);
  const bool riff = file_size >= 4 && has_id(data, "RIFF");
  const bool rf64 = file_size >= 4 && (has_id(data, "RF64") || has_id(data, "BW64"));
  if (!riff && !rf64) throw NotWavError(name + ": not a RIFF/WAVE file");
  if (file_size < 12) fail(name, "truncated header (" + std::to_string(file_size) + " bytes)");
  need(12);
  if (!has_id(data + 8, "WAVE")) throw NotWavError(name + ": not a RIFF/WAVE file");

  bool have_fmt = false, have_data = false, truncated = false;
  FmtChunk fmt{};
  uint64_t ds64_data_size = 0;
  bool have_ds64 = false;
  uint64_t data_offset = 0, data_size = 0;
  uint64_t pos = 12;
  while (!(have_fmt && have_data)) {
    if (pos + 8 > file_size) {
      truncated = pos < file_size;
      break;
    }
    need(pos + 8);
    const uint8_t* chunk = data + pos;
    const uint64_t declared = load_u32(chunk + 4);
    const uint64_t body = pos + 8;
    const uint64_t avail = file_size - body;
    const uint64_t readable = available > body ? available - body : 0;
    if (rf64 && has_id(chunk, "ds64")) {
      if (declared < 24 || avail < 24) fail(name, "truncated header: incomplete ds64 chunk");
      need(body + 24);
      ds64_data_size = load_u64(data + body + 8);
      have_ds64 = true;
    } else if (has_id(chunk, "fmt ") && !have_fmt) {
      fmt = parse_fmt(data + body, declared, avail, readable, name);
      have_fmt = true;
    } else if (has_id(chunk, "data") && !have_data) {
      // A placeholder size (is_placeholder_size) that the file does not hold means the samples
      // run to the end of the file. Any other size is a promise: one past the end of the file is
      // a truncated file or a header that lies. (A size of 0 is taken at its word: no samples,
      // as libsndfile reads it.)
      const uint64_t n = declared == kSizeUnknown && have_ds64 ? ds64_data_size : declared;
      const bool unknown = !(declared == kSizeUnknown && have_ds64) &&
                           is_placeholder_size(declared) && n > avail;
      if (!unknown && n > avail) {
        fail(name, "truncated or lying header: the data chunk declares " + std::to_string(n) +
                       " bytes but the file holds " + std::to_string(avail) + " after it");
      }
      if (n == 0 && avail > 0) {
        fail(name, "the data chunk declares 0 bytes but " + std::to_string(avail) +
                       " bytes follow it (a streamed file whose header was never finished?)");
      }
      data_offset = body;
      data_size = unknown ? avail : n;
      have_data = true;
      if (unknown) break;  // nothing can follow a chunk that runs to the end of the file
    }
    const uint64_t next = body + declared + (declared & 1);  // odd chunks have a pad byte
    if (next > file_size) {
      truncated = true;
      break;
    }
    pos = next;
  }
  if (!have_fmt) {
    fail(name, truncated ? "truncated header: file ends before a complete fmt chunk"
                         : "missing fmt chunk");
  }
  if (!have_data) fail(name, "missing data chunk");

  WavInfo info{sample_format(fmt), fmt.channels, fmt.sample_rate, fmt.block_align,
               static_cast<size_t>(data_offset), static_cast<size_t>(data_size / fmt.block_align)};
  if (info.frames == 0) fail(name, "no audio samples");
  if (max_seconds > 0.0 && static_cast<double>(info.frames) > max_seconds * info.sample_rate) {
    const double seconds = static_cast<double>(info.frames) / info.sample_rate;
    fail(name, format_seconds(seconds) + " s exceeds the configured cap of " +
                   format_seconds(max_seconds) + " s");
  }
  return info;
}

WavInfo parse_wav_header(const uint8_t* data, size_t size, const std::string& name,
                         double max_seconds) {
  return parse_wav_prefix(data, size, size, name, max_seconds);
}

void decode_wav_frames(const WavInfo& info, const uint8_t* data, float* out,
                       const std::string& name) {
  const uint8_t* src = data + info.data_offset;
  switch (info.format) {
    case SampleFormat::kUInt8: downmix<LoadUInt8>(src, info.frames, info.channels, out); break;
    case SampleFormat::kInt16: downmix<LoadInt16>(src, info.frames, info.channels, out); break;
    case SampleFormat::kInt24: downmix<LoadInt24>(src, info.frames, info.channels, out); break;
    case SampleFormat::kInt32: downmix<LoadInt32>(src, info.frames, info.channels, out); break;
    case SampleFormat::kFloat32: decode_float<LoadFloat32>(info, src, out, name); break;
    case SampleFormat::kFloat64: decode_float<LoadFloat64>(info, src, out, name); break;
  }
}

}  // namespace sdscore
