// GEMM lowering kernels for gemm.gpu_im2col: im2col (x -> columns), col2im (columns -> dx,
// a gather, so no atomics and a deterministic sum) and an fp32 -> element type cast for
// accumulators kept in float. Element type from -DMIO_DTYPE_*.
//
// Column layout for images [n0, n0 + nb): col[n][c][f][o], n local to the chunk, c over all
// input channels, f over the filter taps (Z, Y, X), o over the output positions (Do, Ho, Wo).
// Each group's block col[n][g*Cg .. (g+1)*Cg][..][..] is one contiguous (Cg*F) x O matrix.
#include "miocore_gpu.h"

struct MioIm2colParams {
  MioTensor5 x;        // the convolution's input (N, C, D, H, W), its real strides
  mio_index fil[3];    // Z, Y, X
  mio_index out[3];    // Do, Ho, Wo
  mio_index pad[3];
  mio_index stride[3];
  mio_index dil[3];
  mio_index n0;        // first image of the chunk
  mio_index nb;        // images in the chunk
};

MIO_KERNEL void im2col(const mio_t* __restrict__ x, mio_t* __restrict__ col, MioIm2colParams p) {
  const mio_index C = p.x.len[1];
  const mio_index F = p.fil[0] * p.fil[1] * p.fil[2];
  const mio_index O = p.out[0] * p.out[1] * p.out[2];
  const mio_index total = p.nb * C * F * O;
  MIO_GRID_LOOP(i, total) {
    const mio_index o = i % O;
    mio_index r = i / O;
    const mio_index f = r % F;
    r /= F;
    const mio_index c = r % C;
    const mio_index n = r / C + p.n0;
    const mio_index ow = o % p.out[2], oh = (o / p.out[2]) % p.out[1], od = o / (p.out[2] * p.out[1]);
    const mio_index fx = f % p.fil[2], fy = (f / p.fil[2]) % p.fil[1], fz = f / (p.fil[2] * p.fil[1]);
    const mio_index id = od * p.stride[0] - p.pad[0] + fz * p.dil[0];
    const mio_index ih = oh * p.stride[1] - p.pad[1] + fy * p.dil[1];
    const mio_index iw = ow * p.stride[2] - p.pad[2] + fx * p.dil[2];
    float v = 0.0f;
    if (id >= 0 && id < p.x.len[2] && ih >= 0 && ih < p.x.len[3] && iw >= 0 && iw < p.x.len[4]) {
      v = mio_load(x + n * p.x.stride[0] + c * p.x.stride[1] + id * p.x.stride[2] +
                   ih * p.x.stride[3] + iw * p.x.stride[4]);
    }
    mio_store(col + i, v);
  }
}

MIO_KERNEL void col2im(const mio_t* __restrict__ col, mio_t* __restrict__ x, MioIm2colParams p) {
  const mio_index C = p.x.len[1];
  const mio_index F = p.fil[0] * p.fil[1] * p.fil[2];
  const mio_index O = p.out[0] * p.out[1] * p.out[2];
  const mio_index I = p.x.len[2] * p.x.len[3] * p.x.len[4];
  const mio_index total = p.nb * C * I;
  MIO_GRID_LOOP(i, total) {
    const mio_index u = i % I;
    mio_index r = i / I;
    const mio_index c = r % C;
    const mio_index n = r / C;
    const mio_index iw = u % p.x.len[4], ih = (u / p.x.len[4]) % p.x.len[3];
    const mio_index id = u / (p.x.len[4] * p.x.len[3]);
    const mio_t* base = col + (n * C + c) * F * O;
    float acc = 0.0f;
    for (mio_index fz = 0; fz < p.fil[0]; ++fz) {
      const mio_index tz = id + p.pad[0] - fz * p.dil[0];
      if (tz < 0 || tz % p.stride[0]) continue;
      const mio_index od = tz / p.stride[0];
      if (od >= p.out[0]) continue;
      for (mio_index fy = 0; fy < p.fil[1]; ++fy) {
        const mio_index ty = ih + p.pad[1] - fy * p.dil[1];
        if (ty < 0 || ty % p.stride[1]) continue;
        const mio_index oh = ty / p.stride[1];
        if (oh >= p.out[1]) continue;
        for (mio_index fx = 0; fx < p.fil[2]; ++fx) {
          const mio_index tx = iw + p.pad[2] - fx * p.dil[2];
          if (tx < 0 || tx % p.stride[2]) continue;
          const mio_index ow = tx / p.stride[2];
          if (ow >= p.out[2]) continue;
          const mio_index f = (fz * p.fil[1] + fy) * p.fil[2] + fx;
          const mio_index o = (od * p.out[1] + oh) * p.out[2] + ow;
          acc += mio_load(base + f * O + o);
        }
      }
    }
    mio_store(x + (n + p.n0) * p.x.stride[0] + c * p.x.stride[1] + id * p.x.stride[2] +
                  ih * p.x.stride[3] + iw * p.x.stride[4],
              acc);
  }
}

MIO_KERNEL void cast_from_f32(const float* __restrict__ src, mio_t* __restrict__ dst,
                              mio_index count) {
  MIO_GRID_LOOP(i, count) { mio_store(dst + i, src[i]); }
}
