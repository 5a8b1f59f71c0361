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

// One step t for rows [b0, b0 + R): gates = xp[b][t] + h_prev[b] W_hh^T (skipped at t = 0, where
// h_prev is zero), then c = f c + i g and h = o tanh(c) for rows with t < length; rows past
// their length keep h and c. y (the layer's output sequence, null for the last layer) gets h.
template <int R>
inline void step_tile(size_t b0, size_t t, size_t frames, const int64_t* lengths, const float* xp,
                      const float* panels, size_t hidden, const float* h_prev, float* h_next, float* c,
                      float* y) {
  const size_t gates = 4 * hidden;
  for (size_t j = 0; j < hidden / V::W; ++j) {
    const size_t u = j * V::W;
    Reg acc[R][4];
    for (int r = 0; r < R; ++r) {
      const float* row = xp + ((b0 + r) * frames + t) * gates;
      for (int g = 0; g < 4; ++g) acc[r][g] = V::load(row + g * hidden + u);
    }
    if (t > 0) tile_dot<R>(h_prev + b0 * hidden, hidden, hidden, panels + j * hidden * 4 * V::W, acc);
    for (int r = 0; r < R; ++r) {
      const size_t b = b0 + r;
      if (lengths != nullptr && static_cast<int64_t>(t) >= lengths[b]) {
        V::store(h_next + b * hidden + u, V::load(h_prev + b * hidden + u));
        continue;
      }
      const Reg i = sigmoid(acc[r][0]), f = sigmoid(acc[r][1]), g = vtanh(acc[r][2]), o = sigmoid(acc[r][3]);
      const Reg cell = t > 0 ? V::fmadd(f, V::load(c + b * hidden + u), V::mul(i, g)) : V::mul(i, g);
      V::store(c + b * hidden + u, cell);
      const Reg h = V::mul(o, vtanh(cell));
      V::store(h_next + b * hidden + u, h);
      if (y != nullptr) V::store(y + (b * frames + t) * hidden + u, h);
    }
  }
}

inline void step(size_t batch, size_t t, size_t frames, const int64_t* lengths, const float* xp,
                 const float* panels, size_t hidden, const float* h_prev, float* h_next, float* c, float* y) {
  size_t b = 0;
  for (; b + kRows <= batch; b += kRows) step_tile<kRows>(b, t, frames, lengths, xp, panels, hidden, h_prev, h_next, c, y);
  switch (batch - b) {
    case 5: if constexpr (kRows > 5) step_tile<5>(b, t, frames, lengths, xp, panels, hidden, h_prev, h_next, c, y); break;
    case 4: if constexpr (kRows > 4) step_tile<4>(b, t, frames, lengths, xp, panels, hidden, h_prev, h_next, c, y); break;
    case 3: if constexpr (kRows > 3) step_tile<3>(b, t, frames, lengths, xp, panels, hidden, h_prev, h_next, c, y); break;
    case 2: if constexpr (kRows > 2) step_tile<2>(b, t, frames, lengths, xp, panels, hidden, h_prev, h_next, c, y); break;
    case 1: step_tile<1>(b, t, frames, lengths, xp, panels, hidden, h_prev, h_next, c, y); break;
    default: break;
  }
}

// The whole network; scratch as LstmScratch sizes it (see lstm.cpp).
inline void run(const float* x, size_t batch, size_t frames, const int64_t* lengths,
                const LstmLayerWeights* layers, size_t num_layers, size_t hidden, float* h_out,
                float* panels, float* bias, float* xp, float* seq_a, float* seq_b, float* h_a, float* h_b,
                float* c) {
  const float* in = x;
  for (size_t l = 0; l < num_layers; ++l) {
    const LstmLayerWeights& w = layers[l];
    const size_t k_in = w.input_size;
    pack_gates(w.w_ih, hidden, k_in, panels);
    float* panels_hh = panels + 4 * hidden * k_in;
    pack_gates(w.w_hh, hidden, hidden, panels_hh);
    for (size_t i = 0; i < 4 * hidden; ++i) bias[i] = w.b_ih[i] + w.b_hh[i];
    project(in, batch * frames, k_in, panels, bias, hidden, xp);
    float* y = l + 1 < num_layers ? (l % 2 == 0 ? seq_a : seq_b) : nullptr;
    float* h_prev = h_a;
    float* h_next = h_b;
    for (size_t t = 0; t < frames; ++t) {
      step(batch, t, frames, lengths, xp, panels_hh, hidden, h_prev, h_next, c, y);
      float* swap = h_prev;
      h_prev = h_next;
      h_next = swap;
    }
    for (size_t i = 0; i < batch * hidden; ++i) h_out[l * batch * hidden + i] = h_prev[i];
    in = y;
  }
}
