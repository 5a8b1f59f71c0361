// Batch loading for batch_loader.hpp, in two parallel passes so that every sample is
// written once, straight into the packed buffer (no per-file vectors, no final copy):
//   1. plan: read each file's header (its first 64 KiB) -> exact output length or error;
//   2. fill: read, decode and resample each planned file into its slice.
// A file that fails only in pass 2 (NaN samples, changed on disk) leaves a gap, closed by
// moving later items down. Workers pull indices from an atomic counter (files differ in
// length) and keep their file/decode buffers across files.
#include "audio/batch_loader.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <system_error>
#include <thread>

#include "audio/audio_errors.hpp"
#include "audio/file_reader.hpp"
#include "audio/resampler.hpp"
#include "audio/wav_decoder.hpp"

namespace sdscore {
namespace {

constexpr size_t kHeaderProbeBytes = 64 * 1024;

struct WorkerScratch {
  ByteBuffer file;
  std::vector<float> decoded;  // native-rate samples awaiting resampling
};

struct ItemPlan {
  size_t frames = 0;   // input frames
  uint32_t rate = 0;   // input sample rate
  size_t length = 0;   // output samples
};

constexpr size_t kMaxThreads = 1024;  // more only burns memory on thread stacks

size_t thread_count(size_t num_threads) {
  if (num_threads > 0) return std::min(num_threads, kMaxThreads);
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? hw : 1;
}

// Runs body(i) for every i in [0, count) on up to `threads` threads, the caller being one
// of them. make_body() is called once per thread, so per-thread state can live in the
// closure it returns. Bodies must not throw.
template <class MakeBody>
void parallel_for(size_t count, size_t threads, MakeBody make_body) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    auto body = make_body();
    for (size_t i = next.fetch_add(1); i < count; i = next.fetch_add(1)) body(i);
  };
  threads = std::min(threads, count);
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) {
    try {
      pool.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // out of threads: those already started (and the caller) do all the work
    }
  }
  worker();
  for (auto& th : pool) th.join();
}

// Runs fn(); on failure records the error text for item i. Messages of our own error types
// already start with the path.
template <class Fn>
void run_guarded(LoadedBatch& batch, size_t i, const std::string& path, Fn fn) {
  std::string error;
  try {
    fn();
    return;
  } catch (const NotWavError& e) {
    batch.not_wav[i] = 1;
    error = e.what();
  } catch (const InvalidAudioError& e) {
    error = e.what();
  } catch (const FileMissingError& e) {
    error = e.what();
  } catch (const IsDirectoryError& e) {
    error = e.what();
  } catch (const std::bad_alloc&) {
    error = path + ": out of memory";
  } catch (const std::exception& e) {
    error = path + ": " + e.what();
  } catch (...) {
    error = path + ": unknown error";
  }
  batch.failed[i] = 1;
  batch.errors[i] = std::move(error);
}

ItemPlan plan_one(const std::string& path, uint32_t sample_rate, double max_seconds,
                  WorkerScratch& scratch) {
  const uint64_t file_size = read_file(path, scratch.file, kHeaderProbeBytes);
  WavInfo info;
  try {
    info = parse_wav_prefix(scratch.file.data(), scratch.file.size(), file_size, path, max_seconds);
  } catch (const WavPrefixTooShort&) {  // chunks before fmt/data span more than the probe
    read_file(path, scratch.file);
    info = parse_wav_header(scratch.file.data(), scratch.file.size(), path, max_seconds);
  }
  const size_t length = info.sample_rate == sample_rate
                            ? info.frames
                            : resampled_length(info.frames, info.sample_rate, sample_rate);
  return {info.frames, info.sample_rate, length};
}

void fill_one(const std::string& path, const ItemPlan& plan, uint32_t sample_rate,
              double max_seconds, WorkerScratch& scratch, float* out) {
  read_file(path, scratch.file);
  const uint8_t* bytes = scratch.file.data();
  const WavInfo info = parse_wav_header(bytes, scratch.file.size(), path, max_seconds);
  if (info.frames != plan.frames || info.sample_rate != plan.rate)
    throw InvalidAudioError(path + ": file changed while it was being loaded");
  if (info.sample_rate == sample_rate) {
    decode_wav_frames(info, bytes, out, path);
    return;
  }
  if (scratch.decoded.size() < info.frames) scratch.decoded.resize(info.frames);
  decode_wav_frames(info, bytes, scratch.decoded.data(), path);
  resample(scratch.decoded.data(), info.frames, info.sample_rate, sample_rate, out);
}

}  // namespace

LoadedBatch load_batch(const std::vector<std::string>& paths, uint32_t sample_rate,
                       size_t num_threads, double max_seconds) {
  const size_t n = paths.size();
  const size_t threads = thread_count(num_threads);
  LoadedBatch batch;
  batch.errors.resize(n);
  batch.failed.assign(n, 0);
  batch.not_wav.assign(n, 0);

  std::vector<ItemPlan> plans(n);
  parallel_for(n, threads, [&] {
    return [&, scratch = WorkerScratch()](size_t i) mutable {
      run_guarded(batch, i, paths[i],
                  [&] { plans[i] = plan_one(paths[i], sample_rate, max_seconds, scratch); });
    };
  });

  std::vector<int64_t> planned(n + 1, 0);
  for (size_t i = 0; i < n; ++i)
    planned[i + 1] = planned[i] + static_cast<int64_t>(batch.failed[i] ? 0 : plans[i].length);
  batch.data = FloatBuffer(acquire_floats(static_cast<size_t>(planned[n])));

  std::vector<uint8_t> failed_in_plan = batch.failed;
  parallel_for(n, threads, [&] {
    return [&, scratch = WorkerScratch()](size_t i) mutable {
      if (failed_in_plan[i]) return;
      run_guarded(batch, i, paths[i], [&] {
        float* out = batch.data.get() + planned[i];
        fill_one(paths[i], plans[i], sample_rate, max_seconds, scratch, out);
      });
    };
  });

  // Close the gaps left by items that failed while filling.
  batch.offsets.assign(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    const int64_t length = batch.failed[i] ? 0 : planned[i + 1] - planned[i];
    batch.offsets[i + 1] = batch.offsets[i] + length;
    if (length > 0 && batch.offsets[i] != planned[i]) {
      std::memmove(batch.data.get() + batch.offsets[i], batch.data.get() + planned[i],
                   static_cast<size_t>(length) * sizeof(float));
    }
  }
  return batch;
}

}  // namespace sdscore
