// The areas' halves of the module `sdscore._core`; module.cpp calls each once.
#pragma once

#include <pybind11/pybind11.h>

namespace sdscore {

// audio/bindings.cpp: decode_wav, read_wav, resample, load_many, simd_isa, and the translation
// of the audio errors (audio_errors.hpp) to FileNotFoundError / IsADirectoryError / ValueError.
void bind_audio(pybind11::module_& m);
// mel/bindings.cpp: stft_frames, log_mel_tokens, log_mel_from_waves, fused_log_mel_supported.
void bind_mel(pybind11::module_& m);
// ops/bindings.cpp: span_attention, span_attention_isa, gelu_, gelu_isa.
void bind_ops(pybind11::module_& m);
// rnn/bindings.cpp: lstm_final_hidden, lstm_isa.
void bind_rnn(pybind11::module_& m);

}  // namespace sdscore
