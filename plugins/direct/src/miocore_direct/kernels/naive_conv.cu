// direct.naive on GPUs: the universal fallback for every direction, 2-D and 3-D (2-D runs as
// 3-D with depth 1), groups, dilation, any stride and padding, any layout and strides
// (strides are kernel arguments), fp32/fp16/bf16 storage with fp32 accumulation
// (-DMIO_DTYPE_*).
//
// forward          one thread per y element, sums over C/g and the filter taps
// backward data    one thread per dx element, gathers the dy positions its taps reach
// backward weights one block per dw element, threads split N x output space, tree reduction
#include "miocore_gpu.h"

struct MioConvParams {
  MioTensor5 x;  // (N, C, D, H, W)
  MioTensor5 w;  // (K, C/groups, Z, Y, X)
  MioTensor5 y;  // (N, K, Do, Ho, Wo)
  mio_index groups;
  mio_index pad[3];
  mio_index stride[3];
  mio_index dil[3];
  mio_index channels_last;  // decode order of the written tensor
};

MIO_KERNEL void naive_conv_fwd(const mio_t* __restrict__ x, const mio_t* __restrict__ w,
                               mio_t* __restrict__ y, MioConvParams p) {
  const mio_index cg = p.w.len[1];
  const mio_index kg = p.y.len[1] / p.groups;
  const mio_index total = p.y.len[0] * p.y.len[1] * p.y.len[2] * p.y.len[3] * p.y.len[4];
  MIO_GRID_LOOP(i, total) {
    mio_index o[5];
    mio_decode5(p.y, i, (int)p.channels_last, o);
    const mio_index n = o[0], k = o[1];
    const mio_index c0 = (k / kg) * cg;
    float acc = 0.0f;
    for (mio_index fz = 0; fz < p.w.len[2]; ++fz) {
      const mio_index id = o[2] * p.stride[0] - p.pad[0] + fz * p.dil[0];
      if (id < 0 || id >= p.x.len[2]) continue;
      for (mio_index fy = 0; fy < p.w.len[3]; ++fy) {
        const mio_index ih = o[3] * p.stride[1] - p.pad[1] + fy * p.dil[1];
        if (ih < 0 || ih >= p.x.len[3]) continue;
        for (mio_index fx = 0; fx < p.w.len[4]; ++fx) {
          const mio_index iw = o[4] * p.stride[2] - p.pad[2] + fx * p.dil[2];
          if (iw < 0 || iw >= p.x.len[4]) continue;
          const mio_t* xp = x + n * p.x.stride[0] + c0 * p.x.stride[1] + id * p.x.stride[2] +
                            ih * p.x.stride[3] + iw * p.x.stride[4];
          const mio_t* wp = w + k * p.w.stride[0] + fz * p.w.stride[2] + fy * p.w.stride[3] +
                            fx * p.w.stride[4];
          for (mio_index c = 0; c < cg; ++c) {
            acc += mio_load(xp + c * p.x.stride[1]) * mio_load(wp + c * p.w.stride[1]);
          }
        }
      }
    }
    mio_store(y + mio_offset5(p.y, o), acc);
  }
}

MIO_KERNEL void naive_conv_bwd(mio_t* __restrict__ x, const mio_t* __restrict__ w,
                               const mio_t* __restrict__ y, MioConvParams p) {
  const mio_index cg = p.w.len[1];
  const mio_index kg = p.y.len[1] / p.groups;
  const mio_index total = p.x.len[0] * p.x.len[1] * p.x.len[2] * p.x.len[3] * p.x.len[4];
  MIO_GRID_LOOP(i, total) {
    mio_index u[5];
    mio_decode5(p.x, i, (int)p.channels_last, u);
    const mio_index n = u[0], c = u[1];
    const mio_index g = c / cg, cl = c - g * cg;
    float acc = 0.0f;
    for (mio_index fz = 0; fz < p.w.len[2]; ++fz) {
      const mio_index tz = u[2] + p.pad[0] - fz * p.dil[0];
      if (tz < 0 || tz % p.stride[0]) continue;
      const mio_index od = tz / p.stride[0];
      if (od >= p.y.len[2]) continue;
      for (mio_index fy = 0; fy < p.w.len[3]; ++fy) {
        const mio_index ty = u[3] + p.pad[1] - fy * p.dil[1];
        if (ty < 0 || ty % p.stride[1]) continue;
        const mio_index oh = ty / p.stride[1];
        if (oh >= p.y.len[3]) continue;
        for (mio_index fx = 0; fx < p.w.len[4]; ++fx) {
          const mio_index tx = u[4] + p.pad[2] - fx * p.dil[2];
          if (tx < 0 || tx % p.stride[2]) continue;
          const mio_index ow = tx / p.stride[2];
          if (ow >= p.y.len[4]) continue;
          const mio_t* yp = y + n * p.y.stride[0] + (g * kg) * p.y.stride[1] +
                            od * p.y.stride[2] + oh * p.y.stride[3] + ow * p.y.stride[4];
          const mio_t* wp = w + (g * kg) * p.w.stride[0] + cl * p.w.stride[1] +
                            fz * p.w.stride[2] + fy * p.w.stride[3] + fx * p.w.stride[4];
          for (mio_index k = 0; k < kg; ++k) {
            acc += mio_load(yp + k * p.y.stride[1]) * mio_load(wp + k * p.w.stride[0]);
          }
        }
      }
    }
    mio_store(x + mio_offset5(p.x, u), acc);
  }
}

#define MIO_WRW_THREADS 256

MIO_KERNEL void naive_conv_wrw(const mio_t* __restrict__ x, mio_t* __restrict__ w,
                               const mio_t* __restrict__ y, MioConvParams p) {
  __shared__ float partial[MIO_WRW_THREADS];
  const mio_index cg = p.w.len[1];
  const mio_index kg = p.y.len[1] / p.groups;
  const mio_index outputs = p.w.len[0] * p.w.len[1] * p.w.len[2] * p.w.len[3] * p.w.len[4];
  const mio_index per_image = p.y.len[2] * p.y.len[3] * p.y.len[4];
  const mio_index work = p.y.len[0] * per_image;
  for (mio_index e = blockIdx.x; e < outputs; e += gridDim.x) {
    mio_index f[5];  // (k, c, fz, fy, fx) in logical order
    mio_index r = e;
    f[4] = r % p.w.len[4]; r /= p.w.len[4];
    f[3] = r % p.w.len[3]; r /= p.w.len[3];
    f[2] = r % p.w.len[2]; r /= p.w.len[2];
    f[1] = r % p.w.len[1]; r /= p.w.len[1];
    f[0] = r;
    const mio_index k = f[0];
    const mio_index xc = (k / kg) * cg + f[1];
    float acc = 0.0f;
    for (mio_index j = threadIdx.x; j < work; j += blockDim.x) {
      mio_index q = j;
      const mio_index ow = q % p.y.len[4]; q /= p.y.len[4];
      const mio_index oh = q % p.y.len[3]; q /= p.y.len[3];
      const mio_index od = q % p.y.len[2]; q /= p.y.len[2];
      const mio_index n = q;
      const mio_index id = od * p.stride[0] - p.pad[0] + f[2] * p.dil[0];
      const mio_index ih = oh * p.stride[1] - p.pad[1] + f[3] * p.dil[1];
      const mio_index iw = ow * p.stride[2] - p.pad[2] + f[4] * p.dil[2];
      if (id < 0 || id >= p.x.len[2] || ih < 0 || ih >= p.x.len[3] || iw < 0 ||
          iw >= p.x.len[4]) {
        continue;
      }
      acc += mio_load(x + n * p.x.stride[0] + xc * p.x.stride[1] + id * p.x.stride[2] +
                      ih * p.x.stride[3] + iw * p.x.stride[4]) *
             mio_load(y + n * p.y.stride[0] + k * p.y.stride[1] + od * p.y.stride[2] +
                      oh * p.y.stride[3] + ow * p.y.stride[4]);
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = MIO_WRW_THREADS / 2; half > 0; half >>= 1) {
      if ((int)threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0) mio_store(w + mio_offset5(p.w, f), partial[0]);
    __syncthreads();
  }
}
