// The span-attention vector kernel, written once over a vector type: span_attention.cpp includes
// this file inside one namespace per instruction set, after defining there `V` (the vector
// operations, V::W floats wide) and the macro SDSCORE_SPAN_TARGET (that instruction set's
// function target attribute, put on every function here, so no translation unit is compiled
// for a wider CPU than the one it runs on; GCC and clang alike).
//
// One (row, head): keys transposed into kt [D][m] (m = n rounded up to 2 V::W, zero-filled),
// values gathered into vg [n][D]; then R queries at a time: scores of 2 V::W keys per pass (two
// registers), exp, and the weighted sum of values with NV = D / V::W registers per query. Every
// lane's arithmetic is the same whatever V::W, so the 8- and 16-lane kernels agree lane by lane;
// only the horizontal sum of the softmax denominator (V::hsum) adds in a width's own order.

using Reg = typename V::Reg;

// exp for x <= 0 (softmax after subtracting the max): Cephes' expf, 2^n * P(r) with a degree-6
// polynomial; relative error ~1e-7. Inputs below -87 give ~0.
SDSCORE_SPAN_TARGET inline Reg vexp(Reg x) {
  x = V::max(x, V::set1(-87.0f));
  const Reg fx = V::floor(V::fmadd(x, V::set1(1.44269504088896341f), V::set1(0.5f)));
  x = V::fnmadd(fx, V::set1(0.693359375f), x);
  x = V::fnmadd(fx, V::set1(-2.12194440e-4f), x);
  Reg y = V::set1(1.9875691500e-4f);
  y = V::fmadd(y, x, V::set1(1.3981999507e-3f));
  y = V::fmadd(y, x, V::set1(8.3334519073e-3f));
  y = V::fmadd(y, x, V::set1(4.1665795894e-2f));
  y = V::fmadd(y, x, V::set1(1.6666665459e-1f));
  y = V::fmadd(y, x, V::set1(5.0000001201e-1f));
  y = V::fmadd(y, V::mul(x, x), V::add(x, V::set1(1.0f)));
  return V::mul(y, V::pow2(fx));
}

template <int NV, int R>
SDSCORE_SPAN_TARGET void head(const Problem& p, size_t b, size_t h, size_t start, size_t n,
                              std::vector<float>& scratch) {
  constexpr size_t W = V::W, D = W * NV;
  const size_t m = (n + 2 * W - 1) & ~(2 * W - 1);  // keys are scored 2 W at a time
  scratch.resize(D * m + n * D + R * m);
  float* kt = scratch.data();
  float* vg = kt + D * m;
  float* s = vg + n * D;
  std::fill(kt, kt + D * m, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    const float* k = p.k(b, start + j, h);
    for (size_t d = 0; d < D; ++d) kt[d * m + j] = k[d];
    std::memcpy(vg + j * D, p.v(b, start + j, h), D * sizeof(float));
  }
  const Reg scale = V::set1(p.scale);
  const Reg none = V::set1(-INFINITY);
  for (size_t i0 = 0; i0 < n; i0 += R) {
    const float* q[R];
    for (int r = 0; r < R; ++r) q[r] = p.q(b, start + std::min(i0 + r, n - 1), h);
    Reg peak[R];
    for (int r = 0; r < R; ++r) peak[r] = none;
    for (size_t j = 0; j < m; j += 2 * W) {
      // two blocks of W keys per pass: each broadcast query element feeds two FMAs
      Reg lo[R], hi[R];
      for (int r = 0; r < R; ++r) lo[r] = hi[r] = V::zero();
      for (size_t d = 0; d < D; ++d) {
        const Reg k0 = V::load(kt + d * m + j), k1 = V::load(kt + d * m + j + W);
        for (int r = 0; r < R; ++r) {
          const Reg qd = V::set1(q[r][d]);
          lo[r] = V::fmadd(qd, k0, lo[r]);
          hi[r] = V::fmadd(qd, k1, hi[r]);
        }
      }
      // keys past n (the zero padding of the last block) must get no weight
      const typename V::Mask valid_lo = V::valid(j, n), valid_hi = V::valid(j + W, n);
      for (int r = 0; r < R; ++r) {
        const Reg s0 = V::select(valid_lo, V::mul(lo[r], scale), none);
        const Reg s1 = V::select(valid_hi, V::mul(hi[r], scale), none);
        V::store(s + r * m + j, s0);
        V::store(s + r * m + j + W, s1);
        peak[r] = V::max(peak[r], V::max(s0, s1));
      }
    }
    float total[R];
    for (int r = 0; r < R; ++r) {
      const Reg top = V::set1(V::hmax(peak[r]));
      Reg sum = V::zero();
      for (size_t j = 0; j < m; j += W) {
        const Reg e = vexp(V::sub(V::load(s + r * m + j), top));
        V::store(s + r * m + j, e);
        sum = V::add(sum, e);
      }
      total[r] = V::hsum(sum);
    }
    Reg acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < NV; ++c) acc[r][c] = V::zero();
    for (size_t j = 0; j < n; ++j) {
      Reg v[NV];
      for (int c = 0; c < NV; ++c) v[c] = V::load(vg + j * D + W * c);
      for (int r = 0; r < R; ++r) {
        const Reg w = V::set1(s[r * m + j]);
        for (int c = 0; c < NV; ++c) acc[r][c] = V::fmadd(w, v[c], acc[r][c]);
      }
    }
    for (int r = 0; r < R && i0 + r < n; ++r) {
      const Reg inv = V::set1(1.0f / total[r]);
      float* o = p.o(b, start + i0 + r, h);
      for (int c = 0; c < NV; ++c) V::store(o + W * c, V::mul(acc[r][c], inv));
    }
  }
}

// The kernel for head size D: NV = D / W registers per query's sum, and R queries at a time so
// that R NV accumulators stay in registers (R = 4 up to 2 registers, 2 at 4, 1 at 8); up to
// D = 64. Null for any other D. (Scalar code: no target attribute, so the dispatch may call it.)
inline HeadFn head_for(size_t D) {
  constexpr size_t W = V::W;
  if (D == W) return head<1, 4>;
  if (D == 2 * W) return head<2, 4>;
  if (D == 4 * W) return head<4, 2>;
  if constexpr (8 * W <= 64) {
    if (D == 8 * W) return head<8, 1>;
  }
  return nullptr;
}
