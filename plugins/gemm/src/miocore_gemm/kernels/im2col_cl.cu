// Channels-last GEMM lowering for gemm.gpu_nhwc: im2col_cl (x -> rows) and col2im_cl (rows ->
// dx, a gather: no atomics, a deterministic sum). Element type from -DMIO_DTYPE_*.
//
// Row layout for images [n0, n0 + nb): col[m][g][f][cg], m = (n local, output position) over
// the chunk's N*O rows, g the group, f the filter tap (Z, Y, X), cg the group's channel. Each
// group's columns are then one (F*Cg)-wide block of a row-major matrix with row stride G*F*Cg,
// which the BLAS reads directly. im2col_cl is a pure copy, so it moves MIO_UNIT bytes at a
// time (16 where the channel runs and strides allow, else the element size).
#include "miocore_gpu.h"

#ifndef MIO_UNIT
#define MIO_UNIT 4
#endif
#if MIO_UNIT == 16
typedef uint4 mio_unit;
#elif MIO_UNIT == 8
typedef uint2 mio_unit;
#elif MIO_UNIT == 4
typedef unsigned int mio_unit;
#else
typedef unsigned short mio_unit;
#endif

struct MioClParams {
  mio_index in[3];      // input D, H, W (2-D: D = 1)
  mio_index out[3];     // output Do, Ho, Wo
  mio_index fil[3];     // Z, Y, X
  mio_index pad[3];
  mio_index stride[3];
  mio_index dil[3];
  mio_index xs[4];      // element strides of x: N, D, H, W (channel stride 1)
  mio_index c, groups, cg;
  mio_index n0, nb;     // the chunk's first image and image count
};

MIO_KERNEL void im2col_cl(const mio_t* __restrict__ x, mio_t* __restrict__ col, MioClParams p) {
  const mio_index F = p.fil[0] * p.fil[1] * p.fil[2];
  const mio_index O = p.out[0] * p.out[1] * p.out[2];
  const mio_index units = p.cg * (mio_index)sizeof(mio_t) / MIO_UNIT;  // per (row, g, tap)
  const mio_index total = p.nb * O * p.groups * F * units;
  mio_unit* dst = reinterpret_cast<mio_unit*>(col);
  MIO_GRID_LOOP(i, total) {
    const mio_index u = i % units;
    mio_index r = i / units;
    const mio_index f = r % F;
    r /= F;
    const mio_index g = r % p.groups;
    r /= p.groups;
    const mio_index o = r % O;
    const mio_index n = r / O + p.n0;
    const mio_index ow = o % p.out[2], oh = (o / p.out[2]) % p.out[1], od = o / (p.out[2] * p.out[1]);
    const mio_index fx = f % p.fil[2], fy = (f / p.fil[2]) % p.fil[1], fz = f / (p.fil[2] * p.fil[1]);
    const mio_index id = od * p.stride[0] - p.pad[0] + fz * p.dil[0];
    const mio_index ih = oh * p.stride[1] - p.pad[1] + fy * p.dil[1];
    const mio_index iw = ow * p.stride[2] - p.pad[2] + fx * p.dil[2];
    mio_unit v{};
    if (id >= 0 && id < p.in[0] && ih >= 0 && ih < p.in[1] && iw >= 0 && iw < p.in[2]) {
      const mio_t* src = x + n * p.xs[0] + id * p.xs[1] + ih * p.xs[2] + iw * p.xs[3] + g * p.cg;
      v = reinterpret_cast<const mio_unit*>(src)[u];
    }
    dst[i] = v;
  }
}

MIO_KERNEL void col2im_cl(const mio_t* __restrict__ col, mio_t* __restrict__ x, MioClParams p) {
  const mio_index F = p.fil[0] * p.fil[1] * p.fil[2];
  const mio_index O = p.out[0] * p.out[1] * p.out[2];
  const mio_index total = p.nb * p.in[0] * p.in[1] * p.in[2] * p.c;
  MIO_GRID_LOOP(i, total) {
    const mio_index c = i % p.c;
    mio_index r = i / p.c;
    const mio_index iw = r % p.in[2];
    r /= p.in[2];
    const mio_index ih = r % p.in[1];
    r /= p.in[1];
    const mio_index id = r % p.in[0];
    const mio_index n = r / p.in[0];
    const mio_index g = c / p.cg, cc = c % p.cg;
    const mio_t* base = col + (n * O * p.groups + g) * F * p.cg + cc;
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
          acc += mio_load(base + (o * p.groups * F + f) * p.cg);
        }
      }
    }
    mio_store(x + (n + p.n0) * p.xs[0] + id * p.xs[1] + ih * p.xs[2] + iw * p.xs[3] + c, acc);
  }
}
