// The module `sdscore._core`: its docstring and version here, its functions bound area by area
// beside the code they wrap (audio/, mel/, ops/, rnn/ bindings.cpp). engine/sdscore/_core.pyi is
// its typed stub; tests/test_core_stub.py keeps the two in step.
#include <pybind11/pybind11.h>

#include "bindings.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "sdscore's compiled core: WAV decoding, resampling, batch loading, the log-mel front end, span attention and GELU, the GE2E LSTM.";
#ifdef SDSCORE_VERSION
  m.attr("__version__") = SDSCORE_VERSION;
#endif

  sdscore::bind_audio(m);
  sdscore::bind_mel(m);
  sdscore::bind_ops(m);
  sdscore::bind_rnn(m);
}
