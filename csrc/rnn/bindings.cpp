// Python bindings of the rnn area (the GE2E speaker encoder's LSTM) for the module
// `sdscore._core` (see module.cpp). Arguments are validated here, the work runs with the GIL
// released (callers run several calls side by side on threads), and the result is a numpy array.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bindings.hpp"
#include "rnn/lstm.hpp"

namespace py = pybind11;

namespace sdscore {
namespace {

using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;
using LayerArrays = std::tuple<Floats, Floats, Floats, Floats>;

std::string shape_of(const Floats& a) {
  std::string s = "[";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + "]";
}

void check_shape(const Floats& a, const char* name, size_t layer, std::vector<size_t> want) {
  bool ok = a.ndim() == static_cast<py::ssize_t>(want.size());
  for (size_t d = 0; ok && d < want.size(); ++d) ok = static_cast<size_t>(a.shape(d)) == want[d];
  if (!ok) {
    std::string w = "[";
    for (size_t d = 0; d < want.size(); ++d) w += (d ? ", " : "") + std::to_string(want[d]);
    throw std::invalid_argument("lstm_final_hidden: layer " + std::to_string(layer) + "'s " + name +
                                " must be float32 " + w + "], got " + shape_of(a));
  }
}

py::array_t<float> lstm_final_hidden_array(const Floats& x, const std::vector<LayerArrays>& layers,
                                           const std::optional<py::array_t<int64_t, py::array::c_style |
                                                                                        py::array::forcecast>>& lengths) {
  if (x.ndim() != 3) {
    throw std::invalid_argument("lstm_final_hidden: x must be float32 [batch, frames, features], got " +
                                shape_of(x));
  }
  if (layers.empty()) throw std::invalid_argument("lstm_final_hidden: layers is empty (needs at least one)");
  const auto batch = static_cast<size_t>(x.shape(0)), frames = static_cast<size_t>(x.shape(1));
  const auto& first_hh = std::get<1>(layers[0]);
  if (first_hh.ndim() != 2 || first_hh.shape(1) < 1) {
    throw std::invalid_argument("lstm_final_hidden: layer 0's w_hh must be float32 [4 hidden, hidden], got " +
                                shape_of(first_hh));
  }
  const auto hidden = static_cast<size_t>(first_hh.shape(1));
  std::vector<LstmLayerWeights> weights;
  for (size_t l = 0; l < layers.size(); ++l) {
    const auto& [w_ih, w_hh, b_ih, b_hh] = layers[l];
    const size_t input = l == 0 ? static_cast<size_t>(x.shape(2)) : hidden;
    check_shape(w_ih, "w_ih", l, {4 * hidden, input});
    check_shape(w_hh, "w_hh", l, {4 * hidden, hidden});
    check_shape(b_ih, "b_ih", l, {4 * hidden});
    check_shape(b_hh, "b_hh", l, {4 * hidden});
    weights.push_back({w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data(), input});
  }
  const int64_t* lens = nullptr;
  if (lengths) {
    if (lengths->ndim() != 1 || static_cast<size_t>(lengths->shape(0)) != batch) {
      throw std::invalid_argument("lstm_final_hidden: lengths must be 1-D with one entry per row (" +
                                  std::to_string(batch) + ")");
    }
    lens = lengths->data();
    for (size_t b = 0; b < batch; ++b) {
      if (lens[b] < 1 || lens[b] > static_cast<int64_t>(frames)) {
        throw std::invalid_argument("lstm_final_hidden: row " + std::to_string(b) + " has length " +
                                    std::to_string(lens[b]) + "; each must be in [1, " +
                                    std::to_string(frames) + "] (an empty sequence has no final state)");
      }
    }
  } else if (batch > 0 && frames == 0) {
    throw std::invalid_argument("lstm_final_hidden: x has no frames (an empty sequence has no final state)");
  }
  py::array_t<float> out({static_cast<py::ssize_t>(layers.size()), static_cast<py::ssize_t>(batch),
                          static_cast<py::ssize_t>(hidden)});
  float* dst = out.mutable_data();
  const float* src = x.data();
  {
    py::gil_scoped_release nogil;
    lstm_final_hidden(src, batch, frames, lens, weights.data(), weights.size(), hidden, dst);
  }
  return out;
}

}  // namespace

void bind_rnn(py::module_& m) {
  m.def("lstm_final_hidden", &lstm_final_hidden_array, py::arg("x"), py::arg("layers"),
        py::arg("lengths") = py::none(),
        "Final hidden states float32 [layers, batch, hidden] of a multi-layer LSTM (torch.nn.LSTM's "
        "h_n, zero initial state, batch_first) over x float32 [batch, frames, features]: layers is a "
        "list of (w_ih [4H, in], w_hh [4H, H], b_ih [4H], b_hh [4H]) in torch's layout and gate order; "
        "lengths (optional, int64 [batch], each in [1, frames]) gives each row's frame count. fp32; "
        "each row's result is the same bits alone or in any batch. One thread per call, GIL released.");
  m.def("lstm_isa", [](int64_t hidden) {
          return std::string(lstm_isa(static_cast<size_t>(hidden > 0 ? hidden : 1)));
        }, py::arg("hidden"),
        "The instruction set lstm_final_hidden uses for this hidden size on this CPU.");
}

}  // namespace sdscore
