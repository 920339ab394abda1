// {{name}}.direct on GPUs: forward convolution, one thread per output element (grid-stride
// loop), float32 accumulation, any strides (they are arguments), 2-D as 3-D with depth 1.
// One source for NVRTC (CUDA) and hiprtc (HIP): miocore_gpu.h (shipped with miocore) provides
// MIO_KERNEL, mio_index, mio_t / mio_load / mio_store (-DMIO_DTYPE_FP32/_FP16/_BF16) and
// MIO_GRID_LOOP.
#include "miocore_gpu.h"

// Lengths (N, C, D, H, W) then element strides of one tensor.
#define MIO_DIMS(t) mio_index t##n, mio_index t##c, mio_index t##d, mio_index t##h, \
    mio_index t##w, mio_index t##sn, mio_index t##sc, mio_index t##sd, mio_index t##sh,  \
    mio_index t##sw

MIO_KERNEL void {{name}}_direct_fwd(const mio_t* __restrict__ x, const mio_t* __restrict__ w,
                                    mio_t* __restrict__ y, MIO_DIMS(x_), MIO_DIMS(w_),
                                    MIO_DIMS(y_), mio_index groups, mio_index pd, mio_index ph,
                                    mio_index pw, mio_index sd, mio_index sh, mio_index sw,
                                    mio_index dd, mio_index dh, mio_index dw) {
  const mio_index total = y_n * y_c * y_d * y_h * y_w;
  const mio_index cg = w_c;
  const mio_index kg = y_c / groups;
  MIO_GRID_LOOP(i, total) {
    mio_index r = i;
    const mio_index ow = r % y_w; r /= y_w;
    const mio_index oh = r % y_h; r /= y_h;
    const mio_index od = r % y_d; r /= y_d;
    const mio_index k = r % y_c;
    const mio_index n = r / y_c;
    const mio_index c0 = (k / kg) * cg;
    float acc = 0.0f;
    for (mio_index fz = 0; fz < w_d; ++fz) {
      const mio_index iz = od * sd - pd + fz * dd;
      if (iz < 0 || iz >= x_d) continue;
      for (mio_index fy = 0; fy < w_h; ++fy) {
        const mio_index iy = oh * sh - ph + fy * dh;
        if (iy < 0 || iy >= x_h) continue;
        for (mio_index fx = 0; fx < w_w; ++fx) {
          const mio_index ix = ow * sw - pw + fx * dw;
          if (ix < 0 || ix >= x_w) continue;
          for (mio_index c = 0; c < cg; ++c) {
            acc += mio_load(x + n * x_sn + (c0 + c) * x_sc + iz * x_sd + iy * x_sh + ix * x_sw) *
                   mio_load(w + k * w_sn + c * w_sc + fz * w_sd + fy * w_sh + fx * w_sw);
          }
        }
      }
    }
    mio_store(y + n * y_sn + k * y_sc + od * y_sd + oh * y_sh + ow * y_sw, acc);
  }
}
