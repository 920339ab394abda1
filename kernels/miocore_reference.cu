// The core's float64 reference of a slice of a convolution's output, and the comparison of a
// candidate's output with it: find's accuracy check on the device (miocore/find/accuracy.py,
// miocore/backends/_gpu/reference.py). One thread per reference element sums its products in
// double from the stored inputs (exact in fp16/bf16/fp32 -> double); no tiling, no shared
// memory: the slice is small and this runs once per find, while the comparison runs once per
// candidate and returns three numbers instead of the output slice.
//
// The slice `s` is the first s.len[0] images (or output channels, backward weights) and the
// first s.len[1] channels of the direction's output, in logical order; its elements are
// written contiguously (N, C, D, H, W order) into `ref`. Element type from -DMIO_DTYPE_*.
#include "miocore_gpu.h"

// Convolution geometry in (D, H, W) order; a 2-D problem has D = 1, pad 0, stride 1, dil 1.
struct MioConvGeom {
  int pad[3];
  int stride[3];
  int dil[3];
  int groups;
};

MIO_DEVICE mio_index mio_slice_total(const MioTensor5& s) {
  return s.len[0] * s.len[1] * s.len[2] * s.len[3] * s.len[4];
}

MIO_DEVICE double mio_load_f64(const mio_t* base, const MioTensor5& t, const mio_index* idx) {
  return (double)mio_load(base + mio_offset5(t, idx));
}

// y[n, k, od, oh, ow] = sum over (c, fd, fh, fw) of x[n, g*Cg + c, i..] * w[k, c, f..]
MIO_KERNEL void miocore_ref_forward(double* ref, MioTensor5 s, const mio_t* x, MioTensor5 tx,
                                    const mio_t* w, MioTensor5 tw, MioConvGeom g) {
  const mio_index cg = tw.len[1];
  const mio_index kg = tw.len[0] / g.groups;
  MIO_GRID_LOOP(i, mio_slice_total(s)) {
    mio_index o[5];
    mio_decode5(s, i, 0, o);
    const mio_index first_c = (o[1] / kg) * cg;
    double acc = 0.0;
    for (mio_index fd = 0; fd < tw.len[2]; ++fd) {
      const mio_index id = o[2] * g.stride[0] - g.pad[0] + fd * g.dil[0];
      if (id < 0 || id >= tx.len[2]) continue;
      for (mio_index fh = 0; fh < tw.len[3]; ++fh) {
        const mio_index ih = o[3] * g.stride[1] - g.pad[1] + fh * g.dil[1];
        if (ih < 0 || ih >= tx.len[3]) continue;
        for (mio_index fw = 0; fw < tw.len[4]; ++fw) {
          const mio_index iw = o[4] * g.stride[2] - g.pad[2] + fw * g.dil[2];
          if (iw < 0 || iw >= tx.len[4]) continue;
          for (mio_index c = 0; c < cg; ++c) {
            const mio_index xi[5] = {o[0], first_c + c, id, ih, iw};
            const mio_index wi[5] = {o[1], c, fd, fh, fw};
            acc += mio_load_f64(x, tx, xi) * mio_load_f64(w, tw, wi);
          }
        }
      }
    }
    ref[i] = acc;
  }
}

// dx[n, c, id, ih, iw] = sum over (k of c's group, f..) with i = o * stride - pad + f * dil of
// dy[n, k, o..] * w[k, c % Cg, f..]
MIO_KERNEL void miocore_ref_backward_data(double* ref, MioTensor5 s, const mio_t* dy,
                                          MioTensor5 ty, const mio_t* w, MioTensor5 tw,
                                          MioConvGeom g) {
  const mio_index cg = tw.len[1];
  const mio_index kg = tw.len[0] / g.groups;
  MIO_GRID_LOOP(i, mio_slice_total(s)) {
    mio_index o[5];
    mio_decode5(s, i, 0, o);
    const mio_index first_k = (o[1] / cg) * kg;
    const mio_index c = o[1] % cg;
    double acc = 0.0;
    for (mio_index fd = 0; fd < tw.len[2]; ++fd) {
      const mio_index td = o[2] + g.pad[0] - fd * g.dil[0];
      if (td < 0 || td % g.stride[0] != 0 || td / g.stride[0] >= ty.len[2]) continue;
      for (mio_index fh = 0; fh < tw.len[3]; ++fh) {
        const mio_index th = o[3] + g.pad[1] - fh * g.dil[1];
        if (th < 0 || th % g.stride[1] != 0 || th / g.stride[1] >= ty.len[3]) continue;
        for (mio_index fw = 0; fw < tw.len[4]; ++fw) {
          const mio_index tw_ = o[4] + g.pad[2] - fw * g.dil[2];
          if (tw_ < 0 || tw_ % g.stride[2] != 0 || tw_ / g.stride[2] >= ty.len[4]) continue;
          for (mio_index kk = 0; kk < kg; ++kk) {
            const mio_index yi[5] = {o[0], first_k + kk, td / g.stride[0], th / g.stride[1],
                                     tw_ / g.stride[2]};
            const mio_index wi[5] = {first_k + kk, c, fd, fh, fw};
            acc += mio_load_f64(dy, ty, yi) * mio_load_f64(w, tw, wi);
          }
        }
      }
    }
    ref[i] = acc;
  }
}

// dw[k, c, fd, fh, fw] = sum over (n, od, oh, ow) of x[n, g*Cg + c, i..] * dy[n, k, o..]
MIO_KERNEL void miocore_ref_backward_weights(double* ref, MioTensor5 s, const mio_t* x,
                                             MioTensor5 tx, const mio_t* dy, MioTensor5 ty,
                                             MioConvGeom g) {
  const mio_index cg = s.len[1];
  const mio_index kg = ty.len[1] / g.groups;
  MIO_GRID_LOOP(i, mio_slice_total(s)) {
    mio_index o[5];
    mio_decode5(s, i, 0, o);
    const mio_index xc = (o[0] / kg) * cg + o[1];
    double acc = 0.0;
    for (mio_index n = 0; n < ty.len[0]; ++n) {
      for (mio_index od = 0; od < ty.len[2]; ++od) {
        const mio_index id = od * g.stride[0] - g.pad[0] + o[2] * g.dil[0];
        if (id < 0 || id >= tx.len[2]) continue;
        for (mio_index oh = 0; oh < ty.len[3]; ++oh) {
          const mio_index ih = oh * g.stride[1] - g.pad[1] + o[3] * g.dil[1];
          if (ih < 0 || ih >= tx.len[3]) continue;
          for (mio_index ow = 0; ow < ty.len[4]; ++ow) {
            const mio_index iw = ow * g.stride[2] - g.pad[2] + o[4] * g.dil[2];
            if (iw < 0 || iw >= tx.len[4]) continue;
            const mio_index xi[5] = {n, xc, id, ih, iw};
            const mio_index yi[5] = {n, o[0], od, oh, ow};
            acc += mio_load_f64(x, tx, xi) * mio_load_f64(dy, ty, yi);
          }
        }
      }
    }
    ref[i] = acc;
  }
}

// Whether an infinite output value `v` is the type's rounding of the exact value `r`: the
// same sign and |r| at least MIO_MAX_FINITE less 1/64 (an accumulation within its error
// bound may round up to infinity from just below the largest finite value). A backward
// weights reduction over a whole batch of correlated data exceeds fp16's range; every
// correct kernel then writes infinity, and counting that as a wrong answer denied them all.
MIO_DEVICE bool mio_overflows(double r, double v) {
  return (v > 0.0) == (r > 0.0) && fabs(r) >= MIO_MAX_FINITE * (63.0 / 64.0);
}

// result[0] = max |out - ref| and result[1] = max |ref| over the elements whose reference is a
// number (as IEEE bits: non-negative doubles order as unsigned integers); result[2] |= 1 where
// the output is not finite there (save an infinity where the exact value overflows,
// which is skipped), |= 2 where the reference has a NaN. Launch with 256 threads
// per block; result zeroed before.
MIO_KERNEL void miocore_ref_compare(unsigned long long* result, const double* ref, MioTensor5 s,
                                    const mio_t* out, MioTensor5 tout) {
  __shared__ double diff_max[256];
  __shared__ double ref_max[256];
  double diff = 0.0, scale = 0.0;
  unsigned long long flags = 0;
  MIO_GRID_LOOP(i, mio_slice_total(s)) {
    mio_index o[5];
    mio_decode5(s, i, 0, o);
    const double r = ref[i];
    if (r != r) {
      flags |= 2;
      continue;
    }
    const double v = mio_load_f64(out, tout, o);
    if (v != v) {
      flags |= 1;
      continue;
    }
    if (v - v != 0.0) {  // infinite: right only where the exact value overflows the type
      if (!mio_overflows(r, v)) flags |= 1;
      continue;
    }
    diff = fmax(diff, fabs(v - r));
    scale = fmax(scale, fabs(r));
  }
  diff_max[threadIdx.x] = diff;
  ref_max[threadIdx.x] = scale;
  __syncthreads();
  for (unsigned int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      diff_max[threadIdx.x] = fmax(diff_max[threadIdx.x], diff_max[threadIdx.x + half]);
      ref_max[threadIdx.x] = fmax(ref_max[threadIdx.x], ref_max[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicMax(result, (unsigned long long)__double_as_longlong(diff_max[0]));
    atomicMax(result + 1, (unsigned long long)__double_as_longlong(ref_max[0]));
  }
  if (flags) atomicOr(result + 2, flags);
}
