// igemm_fma.cu's index maps: where row, reduction step and column of each direction's GEMM
// read and write (A and B gather rows, the reduction walk with its residue classes for strided
// backward data, the output row and column). Included by igemm_fma.cu after MioFmaParams and
// its compile-time macros; kept apart so that the kernel file holds the loader and main loop.
#ifndef MIOCORE_IGEMM_FMA_INDEX_H
#define MIOCORE_IGEMM_FMA_INDEX_H

// A gather row (fixed for the whole kernel): base offset, two coordinates, validity.
struct MioRow {
  mio_index off;
  int a, b;
  bool ok;
};

// Backward data, one residue class (rh, rw) of the output pixels: its first valid taps, their
// step, count, and the dy offsets oh = i + boh - u*ky for row ih = rh + i*sh and tap index u.
struct MioCls {
  int rh, rw, fy0, fx0, sy, sx, nfy, nfx, boh, bow, ky, kx, hc, wc;
  mio_index mmax;  // rows of every class: N * ceil(H / sh) * ceil(W / sw)
};

MIO_DEVICE int mio_gcd(int a, int b) {
  while (b) {
    const int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

MIO_DEVICE MioCls mio_cls(const MioFmaParams& p, int cls) {
  MioCls k;
  const int sh = (int)p.sh, sw = (int)p.sw, dh = (int)p.dh, dw = (int)p.dw;
  k.rh = cls / sw;
  k.rw = cls - k.rh * sw;
  k.hc = ((int)p.h + sh - 1) / sh;
  k.wc = ((int)p.w + sw - 1) / sw;
  k.mmax = p.n * k.hc * k.wc;
  k.fy0 = -1;
  for (int f = (int)p.fy - 1; f >= 0; --f)
    if ((k.rh + (int)p.ph - f * dh) % sh == 0) k.fy0 = f;
  k.fx0 = -1;
  for (int f = (int)p.fx - 1; f >= 0; --f)
    if ((k.rw + (int)p.pw - f * dw) % sw == 0) k.fx0 = f;
  const int gh = mio_gcd(sh, dh), gw = mio_gcd(sw, dw);
  k.sy = sh / gh;
  k.sx = sw / gw;
  k.ky = dh / gh;
  k.kx = dw / gw;
  k.nfy = k.fy0 < 0 ? 0 : ((int)p.fy - k.fy0 + k.sy - 1) / k.sy;
  k.nfx = k.fx0 < 0 ? 0 : ((int)p.fx - k.fx0 + k.sx - 1) / k.sx;
  k.boh = k.fy0 < 0 ? 0 : (k.rh + (int)p.ph - k.fy0 * dh) / sh;
  k.bow = k.fx0 < 0 ? 0 : (k.rw + (int)p.pw - k.fx0 * dw) / sw;
  return k;
}

// A reduction coordinate, advanced by MIO_BK per tile: (u, v, q) is (fy, fx, channel) or,
// for backward weights, (n, oh, ow).
struct MioRed {
  int u, v, q;
};

// ---- reduction coordinates -------------------------------------------------------------------
MIO_DEVICE MioRed mio_red_init(const MioFmaParams& p, const MioCls& k, mio_index r) {
  MioRed s;
#if MIO_DIR == 2
  const mio_index hw = p.ho * p.wo;
  const mio_index img = r / hw;
  const mio_index rem = r - img * hw;
  s.u = (int)img;
  s.v = (int)(rem / p.wo);
  s.q = (int)(rem - (mio_index)s.v * p.wo);
#else
  const int ch = MIO_DIR == 0 ? (int)p.cg : (int)p.kg;
  const int nfx = MIO_DIR == 0 ? (int)p.fx : (k.nfx > 0 ? k.nfx : 1);
  const int tap = (int)(r / ch);
  s.q = (int)(r - (mio_index)tap * ch);
  s.u = tap / nfx;
  s.v = tap - s.u * nfx;
#endif
  return s;
}

MIO_DEVICE void mio_red_advance(const MioFmaParams& p, const MioCls& k, MioRed& s, int by) {
#if MIO_DIR == 2
  s.q += by;
  while (s.q >= (int)p.wo) {
    s.q -= (int)p.wo;
    if (++s.v == (int)p.ho) {
      s.v = 0;
      ++s.u;
    }
  }
#else
  const int ch = MIO_DIR == 0 ? (int)p.cg : (int)p.kg;
  const int nfx = MIO_DIR == 0 ? (int)p.fx : k.nfx;
  s.q += by;
  while (s.q >= ch) {
    s.q -= ch;
    if (++s.v >= nfx) {
      s.v = 0;
      ++s.u;
    }
  }
#endif
}

MIO_DEVICE bool mio_red_ok(const MioFmaParams& p, const MioCls& k, const MioRed& s) {
#if MIO_DIR == 2
  return s.u < (int)p.n;
#elif MIO_DIR == 1
  return s.u < k.nfy;
#else
  return s.u < (int)p.fy;
#endif
}

// ---- operand A -------------------------------------------------------------------------------
// Backward data: the class's row m = (n, i, j), ih = rh + i*sh, iw = rw + j*sw; false when
// the pixel is past the image (classes share one row count).
MIO_DEVICE bool mio_cls_row(const MioFmaParams& p, const MioCls& k, mio_index m, mio_index* img,
                            int* i, int* j) {
  if (m >= k.mmax) return false;
  const mio_index per = (mio_index)k.hc * k.wc;
  *img = m / per;
  const int rem = (int)(m - *img * per);
  *i = rem / k.wc;
  *j = rem - *i * k.wc;
  return k.rh + *i * (int)p.sh < (int)p.h && k.rw + *j * (int)p.sw < (int)p.w;
}

MIO_DEVICE MioRow mio_a_row(const MioFmaParams& p, const MioCls& k, mio_index g, mio_index row) {
  MioRow t;
#if MIO_DIR == 2  // dy[., g*Kg + row]
  t.ok = row < p.gm;
  t.off = (g * p.kg + row) * p.ys_c;
  t.a = t.b = 0;
#elif MIO_DIR == 0  // x[n, g*Cg + c, oh*sh - ph + fy*dh, ...]
  t.ok = row < p.gm;
  const mio_index sp_hw = p.ho * p.wo;
  const mio_index img = t.ok ? row / sp_hw : 0;
  const mio_index rem = t.ok ? row - img * sp_hw : 0;
  const int oh = (int)(rem / p.wo);
  const int ow = (int)(rem - (mio_index)oh * p.wo);
  t.off = img * p.xs_n + g * p.cg * p.xs_c;
  t.a = oh * (int)p.sh - (int)p.ph;
  t.b = ow * (int)p.sw - (int)p.pw;
#else  // dy[n, g*Kg + k, i + boh - u*ky, j + bow - v*kx]
  mio_index img = 0;
  t.a = t.b = 0;
  t.ok = mio_cls_row(p, k, row, &img, &t.a, &t.b);
  t.off = img * p.ys_n + g * p.kg * p.ys_c;
  t.a += k.boh;
  t.b += k.bow;
#endif
  return t;
}

// Offset of A[row, r] from the tensor's base, or -1 when it reads as zero.
MIO_DEVICE mio_index mio_a_at(const MioFmaParams& p, const MioCls& k, const MioRow& t,
                              const MioRed& s) {
  if (!t.ok || !mio_red_ok(p, k, s)) return -1;
#if MIO_DIR == 0
  const int ih = t.a + s.u * (int)p.dh;
  const int iw = t.b + s.v * (int)p.dw;
  if (ih < 0 || ih >= (int)p.h || iw < 0 || iw >= (int)p.w) return -1;
  return t.off + ih * p.xs_h + iw * p.xs_w + s.q * p.xs_c;
#elif MIO_DIR == 1
  const int oh = t.a - s.u * k.ky;
  const int ow = t.b - s.v * k.kx;
  if (oh < 0 || ow < 0 || oh >= (int)p.ho || ow >= (int)p.wo) return -1;
  return t.off + oh * p.ys_h + ow * p.ys_w + s.q * p.ys_c;
#else
  return t.off + s.u * p.ys_n + s.v * p.ys_h + s.q * p.ys_w;
#endif
}

// ---- operand B -------------------------------------------------------------------------------
MIO_DEVICE MioRow mio_b_row(const MioFmaParams& p, mio_index g, mio_index row) {
  MioRow t;
  t.ok = row < p.gn;
  t.a = t.b = 0;
#if MIO_DIR == 0  // w[g*Kg + row, c, fy, fx]
  t.off = (g * p.kg + row) * p.ws_k;
#elif MIO_DIR == 1  // w[g*Kg + k, row, fy, fx]
  t.off = row * p.ws_c;
#else  // x[n, g*Cg + c, oh*sh - ph + fy*dh, ...] with row = (fy, fx, c)
  const mio_index cq = t.ok ? row % p.cg : 0;
  const mio_index tap = t.ok ? row / p.cg : 0;
  const int fy = (int)(tap / p.fx);
  const int fx = (int)(tap - (mio_index)fy * p.fx);
  t.off = (g * p.cg + cq) * p.xs_c;
  t.a = fy * (int)p.dh - (int)p.ph;
  t.b = fx * (int)p.dw - (int)p.pw;
#endif
  return t;
}

MIO_DEVICE mio_index mio_b_at(const MioFmaParams& p, const MioCls& k, const MioRow& t,
                              const MioRed& s, mio_index g) {
  if (!t.ok || !mio_red_ok(p, k, s)) return -1;
#if MIO_DIR == 0
  return t.off + s.u * p.ws_y + s.v * p.ws_x + s.q * p.ws_c;
#elif MIO_DIR == 1
  return t.off + (g * p.kg + s.q) * p.ws_k + (k.fy0 + s.u * k.sy) * p.ws_y +
         (k.fx0 + s.v * k.sx) * p.ws_x;
#else
  const int ih = t.a + s.v * (int)p.sh;
  const int iw = t.b + s.q * (int)p.sw;
  if (ih < 0 || ih >= (int)p.h || iw < 0 || iw >= (int)p.w) return -1;
  return t.off + s.u * p.xs_n + ih * p.xs_h + iw * p.xs_w;
#endif
}

// ---- output ----------------------------------------------------------------------------------
// Offset of the output row (fixed per row; -1: no such pixel) and column parts; output
// C[row, col] of group g. Backward data rows are class * mmax + (class row).
MIO_DEVICE mio_index mio_out_row(const MioFmaParams& p, mio_index g, mio_index row) {
#if MIO_DIR == 2
  return (g * p.kg + row) * p.ws_k;
#elif MIO_DIR == 0
  const mio_index sp_hw = p.ho * p.wo;
  const mio_index img = row / sp_hw;
  const mio_index rem = row - img * sp_hw;
  const mio_index oh = rem / p.wo;
  const mio_index ow = rem - oh * p.wo;
  return img * p.ys_n + oh * p.ys_h + ow * p.ys_w + g * p.kg * p.ys_c;
#else
  const mio_index hc = (p.h + p.sh - 1) / p.sh, wc = (p.w + p.sw - 1) / p.sw;
  const mio_index mmax = p.n * hc * wc;
  const mio_index cls = row / mmax;
  const mio_index m = row - cls * mmax;
  const mio_index rh = cls / p.sw, rw = cls - rh * p.sw;
  const mio_index img = m / (hc * wc);
  const mio_index rem = m - img * hc * wc;
  const mio_index i = rem / wc;
  const mio_index ih = rh + i * p.sh, iw = rw + (rem - i * wc) * p.sw;
  if (ih >= p.h || iw >= p.w) return -1;
  return img * p.xs_n + ih * p.xs_h + iw * p.xs_w + g * p.cg * p.xs_c;
#endif
}

MIO_DEVICE mio_index mio_out_col(const MioFmaParams& p, mio_index col) {
#if MIO_DIR == 0
  return col * p.ys_c;
#elif MIO_DIR == 1
  return col * p.xs_c;
#else
  const mio_index cq = col % p.cg;
  const mio_index tap = col / p.cg;
  const mio_index fy = tap / p.fx;
  return fy * p.ws_y + (tap - fy * p.fx) * p.ws_x + cq * p.ws_c;
#endif
}

#endif  // MIOCORE_IGEMM_FMA_INDEX_H
