// Parallel load of many audio files into one flat float32 buffer + offsets: read, decode WAV,
// resample, each file independently. Pure C++ (no Python calls), so the bindings run it with
// the GIL released.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "audio/buffer_cache.hpp"

namespace sdscore {

// A float array from acquire_floats, given back with release_floats (also by the numpy array
// its ownership passes to).
struct ReleaseDeleter {
  void operator()(float* p) const { release_floats(p); }
};
using FloatBuffer = std::unique_ptr<float, ReleaseDeleter>;

struct LoadedBatch {
  FloatBuffer data;              // offsets.back() samples (null when there are none)
  std::vector<int64_t> offsets;  // item i is data[offsets[i] .. offsets[i+1]); n + 1 entries
  std::vector<std::string> errors;  // "path: problem" for failed items, "" otherwise
  std::vector<uint8_t> failed;
  std::vector<uint8_t> not_wav;  // readable, but not a WAVE container/codec the core decodes
};

// Loads every path as float32 mono at `sample_rate` on `num_threads` threads (0 = all
// cores). Per-item failures are recorded, never thrown; a failed item is empty. The result
// does not depend on the thread count or scheduling. Throws std::bad_alloc only when the
// packed buffer itself cannot be allocated.
LoadedBatch load_batch(const std::vector<std::string>& paths, uint32_t sample_rate,
                       size_t num_threads, double max_seconds);

}  // namespace sdscore
