// Python bindings of the ops area (CPU span attention and GELU for the compact model) for the
// module `sdscore._core` (see module.cpp). Arguments are validated here, the work runs with the
// GIL released, and results are written straight into numpy arrays.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "bindings.hpp"
#include "ops/gelu.hpp"
#include "ops/span_attention.hpp"

namespace py = pybind11;

namespace sdscore {
namespace {

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

void bind_ops(py::module_& m) {
  m.def("span_attention", &span_attention_array, py::arg("qkv"), py::arg("starts"),
        py::arg("lengths"), py::arg("scale"), py::arg("num_threads") = 1,
        "Bidirectional softmax attention within each row's span of a padded batch: qkv float32 "
        "[B, L, 3, H, D] (contiguous), row b attending among positions [starts[b], starts[b] + "
        "lengths[b]). Returns float32 [B, L, H, D], zero outside the spans. fp32 throughout; "
        "AVX-512 kernel for D in {16, 32, 64} where the CPU has it (SDSCORE_DISABLE_AVX512=1: AVX2), "
        "AVX2 for D in {8, 16, 32, 64}, portable loops otherwise.");
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
}

}  // namespace sdscore
