// Python bindings of the mel area (the compact model's log-mel front end) for the module
// `sdscore._core` (see module.cpp). Arguments are validated here, the work runs with the GIL
// released, and results are written straight into numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "common/parallel.hpp"
#include "mel/frame_fft.hpp"
#include "mel/log_mel.hpp"

namespace py = pybind11;

namespace sdscore {
namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// Each item of `waves` as a contiguous float32 array; invalid_argument naming `fn` and the clip
// when one is not 1-D.
std::vector<FloatArray> mono_clips(const py::sequence& waves, const char* fn) {
  std::vector<FloatArray> clips;
  clips.reserve(waves.size());
  for (size_t i = 0; i < waves.size(); ++i) {
    clips.push_back(waves[i].cast<FloatArray>());
    if (clips.back().ndim() != 1) {
      throw std::invalid_argument(std::string(fn) + ": clip " + std::to_string(i) + " must be a 1-D waveform, got " +
                                  std::to_string(clips.back().ndim()) + " dimensions");
    }
  }
  return clips;
}

// Windowed frames of a centred STFT of every clip, one after another: [sum(1 + n / hop), n_fft].
py::array_t<float> stft_frames(const py::sequence& waves, int64_t n_fft, int64_t hop,
                               const FloatArray& window, int64_t num_threads) {
  if (n_fft < 2 || hop < 1) {
    throw std::invalid_argument("stft_frames needs n_fft >= 2 and hop >= 1, got n_fft=" +
                                std::to_string(n_fft) + ", hop=" + std::to_string(hop));
  }
  if (window.ndim() != 1 || window.shape(0) != n_fft) {
    throw std::invalid_argument("stft_frames: window must have n_fft=" + std::to_string(n_fft) +
                                " samples");
  }
  if (num_threads < 1) throw std::invalid_argument("stft_frames: num_threads must be >= 1");
  const std::vector<FloatArray> clips = mono_clips(waves, "stft_frames");
  std::vector<size_t> first_row;  // clip i's frames start at this row
  size_t rows = 0;
  for (const FloatArray& clip : clips) {
    first_row.push_back(rows);
    rows += stft_frame_count(static_cast<size_t>(clip.shape(0)), static_cast<size_t>(hop));
  }
  py::array_t<float> out({static_cast<py::ssize_t>(rows), static_cast<py::ssize_t>(n_fft)});
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    parallel_for(clips.size(), static_cast<size_t>(num_threads), [&](size_t i) {
      frame_clip(clips[i].data(), static_cast<size_t>(clips[i].shape(0)), static_cast<size_t>(n_fft),
                 static_cast<size_t>(hop), window.data(), dst + first_row[i] * static_cast<size_t>(n_fft));
    });
  }
  return out;
}

// Spectra of consecutive clips ([sum(frames), n_bins, 2]: re, im) → their stacked log-mel
// tokens, one after another: [sum(ceil(frames / k)), k * n_mels].
py::array_t<float> log_mel_tokens_many(const FloatArray& spec,
                                       const py::array_t<int64_t, py::array::c_style |
                                                                      py::array::forcecast>& frames,
                                       const FloatArray& filters, double top_db,
                                       int64_t frames_per_token, int64_t num_threads) {
  if (spec.ndim() != 3 || spec.shape(2) != 2) {
    throw std::invalid_argument("log_mel_tokens: spec must be [frames, bins, 2] (re, im)");
  }
  if (filters.ndim() != 2 || filters.shape(1) != spec.shape(1)) {
    throw std::invalid_argument("log_mel_tokens: filters must be [n_mels, " +
                                std::to_string(spec.shape(1)) + "] to match the spectrum");
  }
  if (frames.ndim() != 1 || frames_per_token < 1) {
    throw std::invalid_argument("log_mel_tokens: frames must be 1-D and frames_per_token >= 1");
  }
  if (num_threads < 1) throw std::invalid_argument("log_mel_tokens: num_threads must be >= 1");
  const auto k = static_cast<size_t>(frames_per_token);
  const auto n_mels = static_cast<size_t>(filters.shape(0));
  const int64_t* counts = frames.data();
  std::vector<size_t> first_frame, first_token;  // where clip i starts in spec and in out
  size_t total_frames = 0, tokens = 0;
  for (py::ssize_t i = 0; i < frames.shape(0); ++i) {
    if (counts[i] < 1) {
      throw std::invalid_argument("log_mel_tokens: clip " + std::to_string(i) +
                                  " has no frames (every clip has at least one)");
    }
    first_frame.push_back(total_frames);
    first_token.push_back(tokens);
    total_frames += static_cast<size_t>(counts[i]);
    tokens += token_count(static_cast<size_t>(counts[i]), k);
  }
  if (total_frames != static_cast<size_t>(spec.shape(0))) {
    throw std::invalid_argument("log_mel_tokens: the clips have " + std::to_string(total_frames) +
                                " frames but spec has " + std::to_string(spec.shape(0)));
  }
  const MelBands bands = make_mel_bands(filters.data(), n_mels, static_cast<size_t>(spec.shape(1)));
  py::array_t<float> out({static_cast<py::ssize_t>(tokens), static_cast<py::ssize_t>(k * n_mels)});
  {
    py::gil_scoped_release nogil;
    const float* src = spec.data();
    float* dst = out.mutable_data();
    parallel_for(first_frame.size(), static_cast<size_t>(num_threads), [&](size_t i) {
      log_mel_tokens(src + first_frame[i] * 2 * bands.n_bins, static_cast<size_t>(counts[i]), bands,
                     static_cast<float>(top_db), k, dst + first_token[i] * k * n_mels);
    });
  }
  return out;
}

// Clips straight to their stacked log-mel tokens, one after another (FramePowerFft inside).
py::array_t<float> log_mel_from_waves(const py::sequence& waves, int64_t n_fft, int64_t hop,
                                      const FloatArray& window, const FloatArray& filters,
                                      double top_db, int64_t frames_per_token, int64_t num_threads) {
  if (n_fft < 2 || hop < 1 || frames_per_token < 1 || num_threads < 1) {
    throw std::invalid_argument("log_mel_from_waves needs n_fft >= 2, hop >= 1, frames_per_token >= 1 "
                                "and num_threads >= 1");
  }
  if (!FramePowerFft::supports(static_cast<size_t>(n_fft))) {
    throw std::invalid_argument("log_mel_from_waves: n_fft=" + std::to_string(n_fft) +
                                " is not supported here (see fused_log_mel_supported)");
  }
  if (window.ndim() != 1 || window.shape(0) != n_fft) {
    throw std::invalid_argument("log_mel_from_waves: window must have n_fft=" + std::to_string(n_fft) + " samples");
  }
  const auto bins = static_cast<py::ssize_t>(n_fft / 2 + 1);
  if (filters.ndim() != 2 || filters.shape(1) != bins) {
    throw std::invalid_argument("log_mel_from_waves: filters must be [n_mels, " + std::to_string(bins) + "]");
  }
  const auto k = static_cast<size_t>(frames_per_token), hop_u = static_cast<size_t>(hop);
  const auto n_mels = static_cast<size_t>(filters.shape(0));
  const std::vector<FloatArray> clips = mono_clips(waves, "log_mel_from_waves");
  std::vector<size_t> first_token;  // clip i's tokens start at this row
  size_t tokens = 0;
  for (const FloatArray& clip : clips) {
    first_token.push_back(tokens);
    tokens += token_count(stft_frame_count(static_cast<size_t>(clip.shape(0)), hop_u), k);
  }
  const MelBands bands = make_mel_bands(filters.data(), n_mels, static_cast<size_t>(bins));
  const FramePowerFft fft(static_cast<size_t>(n_fft), window.data());
  py::array_t<float> out({static_cast<py::ssize_t>(tokens), static_cast<py::ssize_t>(k * n_mels)});
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    parallel_for(clips.size(), static_cast<size_t>(num_threads), [&](size_t i) {
      log_mel_tokens_from_wave(clips[i].data(), static_cast<size_t>(clips[i].shape(0)), fft, hop_u, bands,
                               static_cast<float>(top_db), k, dst + first_token[i] * k * n_mels);
    });
  }
  return out;
}

}  // namespace

void bind_mel(py::module_& m) {
  m.def("stft_frames", &stft_frames, py::arg("waves"), py::arg("n_fft"), py::arg("hop"),
        py::arg("window"), py::arg("num_threads") = 1,
        "Windowed frames of a centred, zero-padded STFT of each 1-D float32 clip, one clip "
        "after another: float32 [sum(1 + len // hop), n_fft]. Feed them to an rFFT. Clips are "
        "spread over num_threads threads.");
  m.def("log_mel_tokens", &log_mel_tokens_many, py::arg("spec"), py::arg("frames"),
        py::arg("filters"), py::arg("top_db"), py::arg("frames_per_token"),
        py::arg("num_threads") = 1,
        "From the rFFT of consecutive clips' frames (float32 [sum(frames), bins, 2]) and each "
        "clip's frame count to stacked compressed log-mel tokens, one clip after another: "
        "float32 [sum(ceil(frames / k)), k * n_mels]. Per clip: log10 of the mel power "
        "(floored at 1e-10), floored at its peak - top_db / 10, then (x + 4) / 4; the last "
        "token is filled with silence. Clips are spread over num_threads threads.");
  m.def("log_mel_from_waves", &log_mel_from_waves, py::arg("waves"), py::arg("n_fft"), py::arg("hop"),
        py::arg("window"), py::arg("filters"), py::arg("top_db"), py::arg("frames_per_token"),
        py::arg("num_threads") = 1,
        "stft_frames + rFFT + log_mel_tokens in one pass per clip (an AVX2 FFT with 8 frames in "
        "the lanes; no frames or spectrum buffers): the clips' tokens one after another, float32 "
        "[sum(ceil((1 + len // hop) / k)), k * n_mels]. Only where fused_log_mel_supported(n_fft).");
  m.def("fused_log_mel_supported", [](int64_t n_fft) {
          return n_fft > 0 && FramePowerFft::supports(static_cast<size_t>(n_fft));
        }, py::arg("n_fft"),
        "True when log_mel_from_waves runs for this n_fft on this CPU (AVX2+FMA, SDSCORE_DISABLE_SIMD "
        "unset, n_fft even with n_fft / 2 a product of 2, 3 and 5).");
}

}  // namespace sdscore
