// libFuzzer harness for the WAV parser/decoder (and the resampler behind it).
// Built and run by run_fuzzer.sh with AddressSanitizer + UBSan. For every input it checks:
//   - parsing and decoding never crash or read out of bounds, and throw only InvalidAudioError;
//   - decoded samples are finite;
//   - parsing a prefix (held in its own exact-size allocation, so ASan sees overreads) gives
//     the whole-file result or asks for more bytes (the batch loader relies on this);
//   - resampling the decoded audio to 16 kHz stays in bounds (rates up to 192 kHz).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "audio/audio_errors.hpp"
#include "audio/resampler.hpp"
#include "audio/wav_decoder.hpp"

namespace {

using sdscore::InvalidAudioError;
using sdscore::WavInfo;

// Parse result reduced to something comparable: the error text, or the header fields.
std::string describe(const uint8_t* data, size_t available, size_t size, bool* too_short) {
  *too_short = false;
  try {
    const WavInfo i = sdscore::parse_wav_prefix(data, available, size, "fuzz", 0.0);
    return "ok " + std::to_string(static_cast<int>(i.format)) + " " + std::to_string(i.channels) +
           " " + std::to_string(i.sample_rate) + " " + std::to_string(i.data_offset) + " " +
           std::to_string(i.frames);
  } catch (const InvalidAudioError& e) {
    return e.what();
  } catch (const sdscore::WavPrefixTooShort&) {
    *too_short = true;
    return "";
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  bool too_short = false;
  const std::string whole = describe(data, size, size, &too_short);
  if (too_short) std::abort();  // the whole file can never be too short

  if (size > 0) {
    const size_t available = data[size - 1] % (size + 1);  // input-chosen prefix length
    std::vector<uint8_t> prefix(data, data + available);
    const std::string part = describe(prefix.data(), available, size, &too_short);
    if (!too_short && part != whole) std::abort();
  }

  try {
    const WavInfo info = sdscore::parse_wav_header(data, size, "fuzz", 0.0);
    std::vector<float> samples(info.frames);
    sdscore::decode_wav_frames(info, data, samples.data(), "fuzz");
    for (float v : samples) {
      if (!std::isfinite(v)) std::abort();
    }
    // Keep each run fast: skip rates whose filter design or output would dominate the time.
    const size_t n = sdscore::resampled_length(samples.size(), info.sample_rate, 16000);
    if (info.sample_rate <= 192000 && n <= (size_t{1} << 18)) {
      std::vector<float> resampled(n);
      sdscore::resample(samples.data(), samples.size(), info.sample_rate, 16000, resampled.data());
    }
  } catch (const InvalidAudioError&) {
    // Rejecting bad input is the expected outcome for most fuzz inputs.
  }
  return 0;
}
