// Python bindings of the audio area (WAV decoding, resampling, batch loading) for the module
// `sdscore._core` (see module.cpp). Arguments are validated here, the work runs with the GIL
// released, and results are written straight into numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "audio/audio_errors.hpp"
#include "audio/batch_loader.hpp"
#include "audio/file_reader.hpp"
#include "audio/fir_kernels.hpp"
#include "audio/resampler.hpp"
#include "audio/wav_decoder.hpp"
#include "bindings.hpp"

namespace py = pybind11;

namespace sdscore {
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

}  // namespace

void bind_audio(py::module_& m) {
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
  m.def("simd_isa", [] { return std::string(fir_kernels().isa); },
        "The instruction set the resampler's FIR kernels use on this CPU.");
}

}  // namespace sdscore
