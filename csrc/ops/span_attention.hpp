// Bidirectional softmax attention over each row's own span of a padded batch, for small heads
// on the CPU (the compact reward model: head size 16, where torch's flash kernel runs its GEMMs
// far below peak). Reads the fused QKV projection as it comes out of the Linear and writes the
// heads already merged, so neither side needs a transpose copy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace sdscore {

// qkv: float32 [B, L, 3, H, D] contiguous (q, k, v of every position); row b attends among its
// positions [starts[b], starts[b] + lengths[b]) only. out: float32 [B, L, H, D]; positions outside
// a row's span are set to zero. softmax(q·k * scale) · v per (row, head, query), fp32 throughout.
// Work is split over num_threads threads (>= 1) by (row, head) with parallel_for (common/parallel.hpp).
// Callers check arguments.
void span_attention(const float* qkv, size_t B, size_t L, size_t H, size_t D,
                    const int64_t* starts, const int64_t* lengths, float scale, float* out,
                    size_t num_threads);

// "avx512f" when the 16-lane kernel runs for head size D on this CPU (D in {16, 32, 64}; 1.2x the
// 8-lane one at D = 16, 1.5x at D = 32; SDSCORE_DISABLE_AVX512=1 keeps the 8-lane kernel),
// "avx2+fma" when the 8-lane one does, else "generic".
// SDSCORE_DISABLE_SIMD=1 (read once) forces the generic loops, as for the FIR kernels.
const char* span_attention_isa(size_t D);

}  // namespace sdscore
