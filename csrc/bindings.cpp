// Python bindings: the module `sdscore._core`. Arguments are validated here, the work runs
// with the GIL released, and results are written straight into numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "audio_errors.hpp"
#include "batch_loader.hpp"
#include "file_reader.hpp"
#include "fir_kernels.hpp"
#include "gelu.hpp"
#include "log_mel.hpp"
#include "parallel.hpp"
#include "resampler.hpp"
#include "span_attention.hpp"
#include "wav_decoder.hpp"

namespace py = pybind11;
using namespace sdscore;

namespace {

// Paths travel as raw file-system bytes and come back through surrogateescape, so any
// path, even one that is not valid UTF-8, round-trips into messages unchanged.
py::str to_py_str(const std::string& s) {
  PyObject* obj =
      PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "surrogateescape");
  if (obj == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(obj);
}

// str / bytes / os.PathLike -> file-system bytes (os.fsencode).
std::string to_fs_path(py::handle path) {
  return py::module_::import("os").attr("fsencode")(path).cast<std::string>();
}

void set_python_error(PyObject* type, const char* message) {
  py::str text = to_py_str(message);
  PyErr_SetObject(type, text.ptr());
}

py::tuple decode_to_array(const uint8_t* bytes, size_t size, const std::string& name,
                          double max_seconds) {
  const WavInfo info = parse_wav_header(bytes, size, name, max_seconds);
  py::array_t<float> out(static_cast<py::ssize_t>(info.frames));
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    decode_wav_frames(info, bytes, dst, name);
  }
  return py::make_tuple(out, info.sample_rate);
}

py::tuple decode_wav(const py::buffer& data, const py::object& name, double max_seconds) {
  const py::buffer_info buf = data.request();
  const bool contiguous_bytes =
      buf.itemsize == 1 && buf.ndim == 1 && (buf.shape[0] <= 1 || buf.strides[0] == 1);
  if (!contiguous_bytes) throw py::type_error("decode_wav expects contiguous bytes-like data");
  return decode_to_array(static_cast<const uint8_t*>(buf.ptr), static_cast<size_t>(buf.size),
                         to_fs_path(name), max_seconds);
}

py::tuple read_wav(const py::object& path, double max_seconds) {
  check_max_seconds(max_seconds);
  const std::string fs_path = to_fs_path(path);
  ByteBuffer file;
  {
    py::gil_scoped_release nogil;
    read_file(fs_path, file);
  }
  return decode_to_array(file.data(), file.size(), fs_path, max_seconds);
}

py::array_t<float> resample_array(
    const py::array_t<float, py::array::c_style | py::array::forcecast>& x, int64_t sr_in,
    int64_t sr_out) {
  if (x.ndim() != 1) {
    throw std::invalid_argument("resample expects a 1-D array, got " + std::to_string(x.ndim()) +
                                " dimensions");
  }
  check_sample_rate(sr_in, "sr_in");
  check_sample_rate(sr_out, "sr_out");
  const size_t n = static_cast<size_t>(x.shape(0));
  const auto in_rate = static_cast<uint32_t>(sr_in), out_rate = static_cast<uint32_t>(sr_out);
  py::array_t<float> out(static_cast<py::ssize_t>(resampled_length(n, in_rate, out_rate)));
  const float* src = x.data();
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    resample(src, n, in_rate, out_rate, dst);
  }
  return out;
}

// Hands the buffer to numpy without a copy; the array frees it.
py::array_t<float> to_numpy(FloatBuffer data, int64_t size) {
  if (size == 0) return py::array_t<float>(0);
  py::capsule owner(data.get(), [](void* p) { release_floats(static_cast<float*>(p)); });
  float* ptr = data.release();
  return py::array_t<float>({static_cast<py::ssize_t>(size)}, {sizeof(float)}, ptr, owner);
}

py::tuple load_many(const py::sequence& paths, int64_t sample_rate, int64_t num_threads,
                    double max_seconds) {
  if (py::isinstance<py::str>(paths) || py::isinstance<py::bytes>(paths))
    throw py::type_error("load_many expects a list of paths, not a single path");
  check_sample_rate(sample_rate, "sample_rate");
  if (num_threads < 0) {
    throw std::invalid_argument("num_threads must be >= 0 (0 means all cores), got " +
                                std::to_string(num_threads));
  }
  check_max_seconds(max_seconds);
  std::vector<std::string> fs_paths;
  fs_paths.reserve(paths.size());
  for (const py::handle p : paths) fs_paths.push_back(to_fs_path(p));

  LoadedBatch batch;
  {
    py::gil_scoped_release nogil;
    batch = load_batch(fs_paths, static_cast<uint32_t>(sample_rate),
                       static_cast<size_t>(num_threads), max_seconds);
  }
  const size_t n = fs_paths.size();
  py::list errors(n), not_wav(n);
  for (size_t i = 0; i < n; ++i) {
    errors[i] = batch.failed[i] ? py::object(to_py_str(batch.errors[i])) : py::object(py::none());
    not_wav[i] = py::bool_(batch.not_wav[i] != 0);
  }
  py::array_t<int64_t> offsets(static_cast<py::ssize_t>(batch.offsets.size()));
  std::copy(batch.offsets.begin(), batch.offsets.end(), offsets.mutable_data());
  return py::make_tuple(to_numpy(std::move(batch.data), batch.offsets.back()), offsets, errors,
                        not_wav);
}


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

// Softmax attention within each row's span of a padded batch; see span_attention.hpp.
py::array_t<float> span_attention_array(
    const py::array_t<float, py::array::c_style>& qkv,
    const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& starts,
    const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& lengths, double scale,
    int64_t num_threads) {
  if (qkv.ndim() != 5 || qkv.shape(2) != 3) {
    throw std::invalid_argument("span_attention: qkv must be float32 [B, L, 3, H, D], got " +
                                std::to_string(qkv.ndim()) + " dimensions");
  }
  const auto B = static_cast<size_t>(qkv.shape(0)), L = static_cast<size_t>(qkv.shape(1));
  const auto H = static_cast<size_t>(qkv.shape(3)), D = static_cast<size_t>(qkv.shape(4));
  if (starts.ndim() != 1 || lengths.ndim() != 1 || static_cast<size_t>(starts.shape(0)) != B ||
      static_cast<size_t>(lengths.shape(0)) != B) {
    throw std::invalid_argument("span_attention: starts and lengths must be 1-D with one entry per row (" +
                                std::to_string(B) + ")");
  }
  for (size_t b = 0; b < B; ++b) {
    const int64_t a = starts.data()[b], n = lengths.data()[b];
    if (a < 0 || n < 0 || a + n > static_cast<int64_t>(L)) {
      throw std::invalid_argument("span_attention: row " + std::to_string(b) + " spans [" +
                                  std::to_string(a) + ", " + std::to_string(a + n) +
                                  "), outside its " + std::to_string(L) + " positions");
    }
  }
  if (num_threads < 1) throw std::invalid_argument("span_attention: num_threads must be >= 1");
  py::array_t<float> out({qkv.shape(0), qkv.shape(1), qkv.shape(3), qkv.shape(4)});
  const float* src = qkv.data();
  float* dst = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    span_attention(src, B, L, H, D, starts.data(), lengths.data(), static_cast<float>(scale), dst,
                   static_cast<size_t>(num_threads));
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "sdscore's compiled core: WAV decoding, resampling, batch loading, the log-mel front end, span attention and GELU.";
#ifdef SDSCORE_VERSION
  m.attr("__version__") = SDSCORE_VERSION;
#endif

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const FileMissingError& e) {
      set_python_error(PyExc_FileNotFoundError, e.what());
    } catch (const IsDirectoryError& e) {
      set_python_error(PyExc_IsADirectoryError, e.what());
    } catch (const InvalidAudioError& e) {
      set_python_error(PyExc_ValueError, e.what());
    }
  });

  m.def("decode_wav", &decode_wav, py::arg("data"), py::arg("name") = "<bytes>",
        py::arg("max_seconds") = 0.0,
        "Decode WAV bytes to (float32 mono array, sample rate). Multi-channel audio is "
        "averaged over channels. Raises ValueError('{name}: {problem}') on bad input; "
        "max_seconds > 0 rejects longer audio.");
  m.def("read_wav", &read_wav, py::arg("path"), py::arg("max_seconds") = 0.0,
        "Read a WAV file to (float32 mono array, sample rate). Raises FileNotFoundError, "
        "IsADirectoryError or ValueError, each message starting with the path.");
  m.def("resample", &resample_array, py::arg("x"), py::arg("sr_in"), py::arg("sr_out"),
        "Resample a 1-D float32 signal from sr_in to sr_out Hz (Kaiser-windowed sinc, zero "
        "phase). Output length is round(len(x) * sr_out / sr_in), as soxr.");
  m.def("load_many", &load_many, py::arg("paths"), py::arg("sample_rate"),
        py::arg("num_threads") = 0, py::arg("max_seconds") = 0.0,
        "Load WAV files as float32 mono at sample_rate on num_threads threads (0 = all cores). "
        "Returns (data, offsets[n+1], errors, not_wav): item i is data[offsets[i]:offsets[i+1]] "
        "(empty when errors[i] is set); not_wav[i] marks readable files that are not "
        "RIFF/WAVE or use a WAVE codec the core does not decode (mu-law, ADPCM), for another "
        "decoder to try.");
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
  m.def("span_attention", &span_attention_array, py::arg("qkv"), py::arg("starts"),
        py::arg("lengths"), py::arg("scale"), py::arg("num_threads") = 1,
        "Bidirectional softmax attention within each row's span of a padded batch: qkv float32 "
        "[B, L, 3, H, D] (contiguous), row b attending among positions [starts[b], starts[b] + "
        "lengths[b]). Returns float32 [B, L, H, D], zero outside the spans. fp32 throughout; "
        "AVX2 kernel for D in {8, 16, 32, 64}, portable loops otherwise.");
  m.def("gelu_", [](py::array_t<float> x, std::optional<py::array_t<float>> bias, int64_t num_threads) {
          if (!(x.flags() & py::array::c_style) || !x.writeable()) {
            throw std::invalid_argument("gelu_: x must be a writable, C-contiguous float32 array");
          }
          if (num_threads < 1) throw std::invalid_argument("gelu_: num_threads must be >= 1");
          const size_t cols = x.ndim() > 0 ? static_cast<size_t>(x.shape(x.ndim() - 1)) : 1;
          const float* b = nullptr;
          if (bias) {
            if (bias->ndim() != 1 || static_cast<size_t>(bias->shape(0)) != cols ||
                !(bias->flags() & py::array::c_style)) {
              throw std::invalid_argument("gelu_: bias must be a contiguous float32 vector of " +
                                          std::to_string(cols) + " (x's last dimension)");
            }
            b = bias->data();
          }
          float* data = x.mutable_data();
          const size_t rows = cols ? static_cast<size_t>(x.size()) / cols : 0;
          {
            py::gil_scoped_release nogil;
            gelu_inplace(data, rows, cols, b, static_cast<size_t>(num_threads));
          }
        }, py::arg("x").noconvert(), py::arg("bias").noconvert() = py::none(), py::arg("num_threads") = 1,
        "Exact (erf) GELU of x + bias, in place: x a writable C-contiguous float32 array, bias "
        "None or a float32 vector over x's last dimension; 0.5 v (1 + erf(v / sqrt(2))) with v = "
        "x + bias, on num_threads threads.");
  m.def("gelu_isa", [] { return std::string(gelu_isa()); },
        "The instruction set gelu_ uses on this CPU.");
  m.def("span_attention_isa", [](int64_t head_size) {
          return std::string(span_attention_isa(static_cast<size_t>(std::max<int64_t>(head_size, 0))));
        }, py::arg("head_size"),
        "The instruction set span_attention uses for this head size on this CPU.");
  m.def("simd_isa", [] { return std::string(fir_kernels().isa); },
        "The instruction set the resampler's FIR kernels use on this CPU.");
}
