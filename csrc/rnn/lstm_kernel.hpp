// The LSTM's loops, written once over a vector type: lstm.cpp includes this file inside one
// namespace per instruction set, after defining there `V` (the vector operations, V::W floats
// wide) and `kRows` (rows per register tile), under that instruction set's target pragma. No
// standard-library templates here: their out-of-line copies would be shared between the
// instruction sets at link time.
//
// Weight panels: a gate matrix W [4H, K] (torch's layout) is packed as H / V::W panels, panel j
// holding for every k the four gates' weights of hidden units [j W, j W + W):
// panel[j][k][gate][lane] = W[gate H + j W + lane][k]. A tile of R rows times one panel is then
// R x 4 vector accumulators: all four gates of the same W hidden units.

using Reg = typename V::Reg;
// The panel rows tile_dot asks the cache for ahead of use (its stream outruns the hardware
// prefetcher's from L2).
constexpr size_t kPrefetchAhead = 16;

// Packs W [4H, K] into H / V::W panels at out (4 H K floats).
inline void pack_gates(const float* w, size_t hidden, size_t k_size, float* out) {
  const size_t lanes = V::W;
  for (size_t j = 0; j < hidden / lanes; ++j) {
    for (size_t k = 0; k < k_size; ++k) {
      for (size_t g = 0; g < 4; ++g) {
        for (size_t l = 0; l < lanes; ++l) {
          *out++ = w[(g * hidden + j * lanes + l) * k_size + k];
        }
      }
    }
  }
}

// acc[r][g] += sum over k of a[r lda + k] * panel[k][g]: R rows of A against one panel. Not
// inlined, and on a local copy of acc (a vector type may alias the float inputs, so acc itself
// would be kept in memory): the 4 R accumulators stay in registers, which the caller's
// constants (the exp polynomial's) would otherwise take.
template <int R>
__attribute__((noinline)) void tile_dot(const float* a, size_t lda, size_t k_size, const float* panel,
                                        Reg (&acc)[R][4]) {
  Reg sum[R][4];
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < 4; ++g) sum[r][g] = acc[r][g];
  }
  for (size_t k = 0; k < k_size; ++k) {
    const float* p = panel + k * 4 * V::W;
    V::prefetch(p + kPrefetchAhead * 4 * V::W);
    const Reg b0 = V::load(p), b1 = V::load(p + V::W), b2 = V::load(p + 2 * V::W), b3 = V::load(p + 3 * V::W);
    for (int r = 0; r < R; ++r) {
      const Reg s = V::set1(a[r * lda + k]);
      sum[r][0] = V::fmadd(s, b0, sum[r][0]);
      sum[r][1] = V::fmadd(s, b1, sum[r][1]);
      sum[r][2] = V::fmadd(s, b2, sum[r][2]);
      sum[r][3] = V::fmadd(s, b3, sum[r][3]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < 4; ++g) acc[r][g] = sum[r][g];
  }
}

// exp(x) for float: x clamped to [-87.3, 88.3] (normal results), n = round(x / ln 2), the
// Cephes degree-7 polynomial on x - n ln 2 (ln 2 in two parts), times 2^n. Within ~2 ulp.
inline Reg vexp(Reg x) {
  x = V::min(V::max(x, V::set1(-87.3f)), V::set1(88.3f));
  const Reg n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
  Reg r = V::fmadd(n, V::set1(-0.693359375f), x);
  r = V::fmadd(n, V::set1(2.12194440e-4f), r);
  Reg p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::scale2(p, n);
}

inline Reg sigmoid(Reg x) {
  const Reg one = V::set1(1.0f);
  return V::recip(V::add(one, vexp(V::sub(V::zero(), x))));
}

// tanh(x) = 2 sigmoid(2x) - 1 (absolute error ~1e-7 near 0).
inline Reg vtanh(Reg x) {
  const Reg one = V::set1(1.0f);
  const Reg two = V::set1(2.0f);
  return V::fmsub(two, V::recip(V::add(one, vexp(V::mul(V::set1(-2.0f), x)))), one);
}

// Input projection of one layer: xp[m][4H] = in[m][K] W_ih^T + bias for m in [0, rows).
template <int R>
inline void project_tile(const float* in, size_t k_size, const float* panels, const float* bias,
                         size_t hidden, float* xp) {
  const size_t gates = 4 * hidden;
  for (size_t j = 0; j < hidden / V::W; ++j) {
    Reg acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int g = 0; g < 4; ++g) acc[r][g] = V::load(bias + g * hidden + j * V::W);
    }
    tile_dot<R>(in, k_size, k_size, panels + j * k_size * 4 * V::W, acc);
    for (int r = 0; r < R; ++r) {
      for (int g = 0; g < 4; ++g) V::store(xp + r * gates + g * hidden + j * V::W, acc[r][g]);
    }
  }
}

inline void project(const float* in, size_t rows, size_t k_size, const float* panels, const float* bias,
                    size_t hidden, float* xp) {
  const size_t gates = 4 * hidden;
  size_t m = 0;
  for (; m + kRows <= rows; m += kRows) project_tile<kRows>(in + m * k_size, k_size, panels, bias, hidden, xp + m * gates);
  switch (rows - m) {  // the same per-row arithmetic on fewer rows
    case 5: if constexpr (kRows > 5) project_tile<5>(in + m * k_size, k_size, panels, bias, hidden, xp + m * gates); break;
    case 4: if constexpr (kRows > 4) project_tile<4>(in + m * k_size, k_size, panels, bias, hidden, xp + m * gates); break;
    case 3: if constexpr (kRows > 3) project_tile<3>(in + m * k_size, k_size, panels, bias, hidden, xp + m * gates); break;
    case 2: if constexpr (kRows > 2) project_tile<2>(in + m * k_size, k_size, panels, bias, hidden, xp + m * gates); break;
    case 1: project_tile<1>(in + m * k_size, k_size, panels, bias, hidden, xp + m * gates); break;
    default: break;
  }
}

// What one step of one layer reads and writes; y (the layer's output sequence, time-major) is
// null for the last layer; partial holds batch x 4 V::W running gate sums between k blocks.
struct Step {
  size_t batch, t, hidden;
  size_t xt;  // step t's row block in xp (xp holds the frames of the current chunk)
  const int64_t* lengths;
  const float* xp;
  const float* panels;
  const float* h_prev;
  float* h_next;
  float* c;
  float* y;
  float* partial;
};

// Step s.t for rows [b0, b0 + R) and hidden units [j W, j W + W), over h's entries [k0, k1):
// gates = xp[t][b] (k0 = 0) or the partial sums so far, plus h_prev[b][k0:k1] W_hh^T[k0:k1]
// (nothing at t = 0, where h_prev is zero). Before the last block the sums go to s.partial; after
// it c = f c + i g and h = o tanh(c) for rows with t < length, and rows past their length keep
// h and c. Every row's sums run over k in the same order whatever the blocks.
template <int R>
inline void step_tile(const Step& s, size_t b0, size_t j, size_t k0, size_t k1) {
  const size_t gates = 4 * s.hidden, u = j * V::W;
  Reg acc[R][4];
  for (int r = 0; r < R; ++r) {
    const float* row = k0 == 0 ? s.xp + (s.xt * s.batch + b0 + r) * gates + u : s.partial + (b0 + r) * 4 * V::W;
    const size_t stride = k0 == 0 ? s.hidden : V::W;
    for (int g = 0; g < 4; ++g) acc[r][g] = V::load(row + g * stride);
  }
  if (s.t > 0) tile_dot<R>(s.h_prev + b0 * s.hidden + k0, s.hidden, k1 - k0, s.panels + (j * s.hidden + k0) * 4 * V::W, acc);
  if (k1 < s.hidden) {
    for (int r = 0; r < R; ++r) {
      for (int g = 0; g < 4; ++g) V::store(s.partial + (b0 + r) * 4 * V::W + g * V::W, acc[r][g]);
    }
    return;
  }
  for (int r = 0; r < R; ++r) {
    const size_t b = b0 + r;
    if (s.lengths != nullptr && static_cast<int64_t>(s.t) >= s.lengths[b]) {
      V::store(s.h_next + b * s.hidden + u, V::load(s.h_prev + b * s.hidden + u));
      continue;
    }
    const Reg i = sigmoid(acc[r][0]), f = sigmoid(acc[r][1]), g = vtanh(acc[r][2]), o = sigmoid(acc[r][3]);
    const Reg cell = s.t > 0 ? V::fmadd(f, V::load(s.c + b * s.hidden + u), V::mul(i, g)) : V::mul(i, g);
    V::store(s.c + b * s.hidden + u, cell);
    const Reg h = V::mul(o, vtanh(cell));
    V::store(s.h_next + b * s.hidden + u, h);
    if (s.y != nullptr) V::store(s.y + (s.t * s.batch + b) * s.hidden + u, h);
  }
}

// One step of all rows: for each panel, h's entries in blocks of kStepBlock, every row tile per
// block, so a block of the panel (kStepBlock x 4 V::W floats) and of h stay in L1 across tiles.
constexpr size_t kStepBlock = 128;

inline void step(const Step& s) {
  const size_t block = s.t > 0 ? kStepBlock : s.hidden;
  for (size_t j = 0; j < s.hidden / V::W; ++j) {
    for (size_t k0 = 0; k0 < s.hidden; k0 += block) {
      const size_t k1 = k0 + block < s.hidden ? k0 + block : s.hidden;
      size_t b = 0;
      for (; b + kRows <= s.batch; b += kRows) step_tile<kRows>(s, b, j, k0, k1);
      switch (s.batch - b) {
        case 5: if constexpr (kRows > 5) step_tile<5>(s, b, j, k0, k1); break;
        case 4: if constexpr (kRows > 4) step_tile<4>(s, b, j, k0, k1); break;
        case 3: if constexpr (kRows > 3) step_tile<3>(s, b, j, k0, k1); break;
        case 2: if constexpr (kRows > 2) step_tile<2>(s, b, j, k0, k1); break;
        case 1: step_tile<1>(s, b, j, k0, k1); break;
        default: break;
      }
    }
  }
}

// The whole network on time-major input x [frames][batch][input] (every sequence below is
// time-major too, so a step reads one contiguous block of xp); scratch as lstm.cpp sizes it.
// Each layer projects its input kChunkFrames frames at a time, just before their steps: xp
// stays small enough for the caches (and is not faulted in afresh at every call).
inline void run(const float* x, size_t batch, size_t frames, const int64_t* lengths,
                const LstmLayerWeights* layers, size_t num_layers, size_t hidden, float* h_out,
                float* panels, float* bias, float* xp, float* seq_a, float* seq_b, float* h_a, float* h_b,
                float* c, float* partial) {
  const float* in = x;
  for (size_t l = 0; l < num_layers; ++l) {
    const LstmLayerWeights& w = layers[l];
    const size_t k_in = w.input_size;
    pack_gates(w.w_ih, hidden, k_in, panels);
    float* panels_hh = panels + 4 * hidden * k_in;
    pack_gates(w.w_hh, hidden, hidden, panels_hh);
    for (size_t i = 0; i < 4 * hidden; ++i) bias[i] = w.b_ih[i] + w.b_hh[i];
    float* y = l + 1 < num_layers ? (l % 2 == 0 ? seq_a : seq_b) : nullptr;
    float* h_prev = h_a;
    float* h_next = h_b;
    for (size_t t0 = 0; t0 < frames; t0 += kChunkFrames) {
      const size_t chunk = frames - t0 < kChunkFrames ? frames - t0 : kChunkFrames;
      project(in + t0 * batch * k_in, chunk * batch, k_in, panels, bias, hidden, xp);
      for (size_t t = t0; t < t0 + chunk; ++t) {
        step(Step{batch, t, hidden, t - t0, lengths, xp, panels_hh, h_prev, h_next, c, y, partial});
        float* swap = h_prev;
        h_prev = h_next;
        h_next = swap;
      }
    }
    for (size_t i = 0; i < batch * hidden; ++i) h_out[l * batch * hidden + i] = h_prev[i];
    in = y;
  }
}
