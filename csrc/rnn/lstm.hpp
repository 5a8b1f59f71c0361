// A multi-layer LSTM's final hidden states on the CPU, for the GE2E speaker encoder (3 x 256 over
// 160 mel frames): per layer one GEMM projects every frame's input onto the four gates, then each
// step adds h_{t-1} W_hh^T with a register-tiled kernel whose tile holds all four gates of the same
// hidden units, so the gate nonlinearities and the cell update run on the accumulators (the gate
// pre-activations never reach memory). Single-threaded per call: callers run calls side by side.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sdscore {

// One layer's weights in torch.nn.LSTM's layout: w_ih [4H, input_size], w_hh [4H, H], b_ih and
// b_hh [4H], gates in the order input, forget, cell, output. Row-major, contiguous.
struct LstmLayerWeights {
  const float* w_ih;
  const float* w_hh;
  const float* b_ih;
  const float* b_hh;
  size_t input_size;
};

// h_out [num_layers, batch, hidden] = each layer's hidden state after row b's last frame, from zero
// initial states (torch.nn.LSTM's h_n). x is [batch, frames, layers[0].input_size] row-major;
// lengths holds each row's frame count, each in [1, frames] (null: every row has all frames).
// Every row's arithmetic is the same whatever the other rows and its place in the batch are, so a
// row's result is the same bits alone or in any batch.
void lstm_final_hidden(const float* x, size_t batch, size_t frames, const int64_t* lengths,
                       const LstmLayerWeights* layers, size_t num_layers, size_t hidden, float* h_out);

// The instruction set lstm_final_hidden uses for this hidden size on this CPU: "avx512f",
// "avx2+fma" or "generic".
const char* lstm_isa(size_t hidden);

}  // namespace sdscore
