// FFT convolution helpers for fft.gpu_rfft (the transforms themselves are cuFFT / hipFFT).
//
//   fft_pack    tensor (a, b, D, H, W) of any layout/strides -> packed float32 buffer
//               [a * len_b + b][L0][L1][L2], zero beyond the tensor's extents (the circular
//               transform's padding); fp16/bf16 are widened here.
//   fft_cmac    per frequency bin f: out[i, j, f] = sum_r opA(a[i, r, f]) * opB(b[j, r, f]),
//               op = identity or complex conjugate; one thread per bin and TI x TJ (i, j) tile.
//   fft_unpack  packed float32 buffer (the inverse transform, unnormalised) -> tensor:
//               t[a, b, s] = scale * buf[a * len_b + b][(s + off) mod L], cast to the dtype,
//               written through the descriptor's strides (NCHW, NHWC, ...).
#include "miocore_gpu.h"

#ifndef MIO_FFT_TI
#define MIO_FFT_TI 4
#endif
#ifndef MIO_FFT_TJ
#define MIO_FFT_TJ 4
#endif

struct alignas(8) MioComplex {
  float re;
  float im;
};

// FFT lengths and read offsets of one problem (2-D problems have L0 = 1, offset 0).
struct MioFftGeom {
  mio_index len[3];
  mio_index off[3];
};

// Per-bin channel reduction; strides in complex elements, bins innermost (stride 1).
struct MioFftMac {
  mio_index ni, nj, nr, bins;
  mio_index a_i, a_r, b_j, b_r, o_i, o_j;
  mio_index conj_a, conj_b;
};

MIO_KERNEL void fft_pack(const mio_t* __restrict__ src, float* __restrict__ dst, MioTensor5 t,
                         MioFftGeom g) {
  const mio_index l0 = g.len[0], l1 = g.len[1], l2 = g.len[2];
  const mio_index total = t.len[0] * t.len[1] * l0 * l1 * l2;
  MIO_GRID_LOOP(i, total) {
    mio_index r = i;
    const mio_index z2 = r % l2;
    r /= l2;
    const mio_index z1 = r % l1;
    r /= l1;
    const mio_index z0 = r % l0;
    r /= l0;
    const mio_index b = r % t.len[1];
    const mio_index a = r / t.len[1];
    float v = 0.0f;
    if (z0 < t.len[2] && z1 < t.len[3] && z2 < t.len[4]) {
      v = mio_load(src + a * t.stride[0] + b * t.stride[1] + z0 * t.stride[2] +
                   z1 * t.stride[3] + z2 * t.stride[4]);
    }
    dst[i] = v;
  }
}

MIO_KERNEL void fft_cmac(const MioComplex* __restrict__ a, const MioComplex* __restrict__ b,
                         MioComplex* __restrict__ out, MioFftMac m) {
  const mio_index f = (mio_index)blockIdx.x * blockDim.x + threadIdx.x;
  if (f >= m.bins) return;
  const mio_index i0 = (mio_index)blockIdx.y * MIO_FFT_TI;
  const mio_index j0 = (mio_index)blockIdx.z * MIO_FFT_TJ;
  const float sa = m.conj_a ? -1.0f : 1.0f;
  const float sb = m.conj_b ? -1.0f : 1.0f;
  float acc_re[MIO_FFT_TI][MIO_FFT_TJ];
  float acc_im[MIO_FFT_TI][MIO_FFT_TJ];
#pragma unroll
  for (int ti = 0; ti < MIO_FFT_TI; ++ti) {
#pragma unroll
    for (int tj = 0; tj < MIO_FFT_TJ; ++tj) {
      acc_re[ti][tj] = 0.0f;
      acc_im[ti][tj] = 0.0f;
    }
  }
  // Rows past the end read row 0 (always valid) and are never stored: no branch in the loop.
  mio_index a_row[MIO_FFT_TI];
  mio_index b_row[MIO_FFT_TJ];
#pragma unroll
  for (int ti = 0; ti < MIO_FFT_TI; ++ti) {
    a_row[ti] = (i0 + ti < m.ni ? i0 + ti : 0) * m.a_i + f;
  }
#pragma unroll
  for (int tj = 0; tj < MIO_FFT_TJ; ++tj) {
    b_row[tj] = (j0 + tj < m.nj ? j0 + tj : 0) * m.b_j + f;
  }
  for (mio_index r = 0; r < m.nr; ++r) {
    MioComplex av[MIO_FFT_TI];
    MioComplex bv[MIO_FFT_TJ];
#pragma unroll
    for (int ti = 0; ti < MIO_FFT_TI; ++ti) {
      av[ti] = a[a_row[ti] + r * m.a_r];
      av[ti].im *= sa;
    }
#pragma unroll
    for (int tj = 0; tj < MIO_FFT_TJ; ++tj) {
      bv[tj] = b[b_row[tj] + r * m.b_r];
      bv[tj].im *= sb;
    }
#pragma unroll
    for (int ti = 0; ti < MIO_FFT_TI; ++ti) {
#pragma unroll
      for (int tj = 0; tj < MIO_FFT_TJ; ++tj) {
        acc_re[ti][tj] += av[ti].re * bv[tj].re - av[ti].im * bv[tj].im;
        acc_im[ti][tj] += av[ti].re * bv[tj].im + av[ti].im * bv[tj].re;
      }
    }
  }
#pragma unroll
  for (int ti = 0; ti < MIO_FFT_TI; ++ti) {
#pragma unroll
    for (int tj = 0; tj < MIO_FFT_TJ; ++tj) {
      if (i0 + ti < m.ni && j0 + tj < m.nj) {
        MioComplex v;
        v.re = acc_re[ti][tj];
        v.im = acc_im[ti][tj];
        out[(i0 + ti) * m.o_i + (j0 + tj) * m.o_j + f] = v;
      }
    }
  }
}

MIO_KERNEL void fft_unpack(const float* __restrict__ src, mio_t* __restrict__ dst, MioTensor5 t,
                           MioFftGeom g, int channels_last, float scale) {
  const mio_index l0 = g.len[0], l1 = g.len[1], l2 = g.len[2];
  const mio_index total = t.len[0] * t.len[1] * t.len[2] * t.len[3] * t.len[4];
  MIO_GRID_LOOP(i, total) {
    mio_index idx[5];
    mio_decode5(t, i, channels_last, idx);
    const mio_index z0 = (idx[2] + g.off[0]) % l0;
    const mio_index z1 = (idx[3] + g.off[1]) % l1;
    const mio_index z2 = (idx[4] + g.off[2]) % l2;
    const mio_index row = idx[0] * t.len[1] + idx[1];
    mio_store(dst + mio_offset5(t, idx), scale * src[((row * l0 + z0) * l1 + z1) * l2 + z2]);
  }
}
