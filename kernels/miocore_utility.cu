// The core's own utility kernels: blend (out = alpha * result + beta * out) and fill, over a
// strided tensor of up to five logical dimensions, and spin (holds the stream for a number of
// clock cycles, so that timed launches queue up behind it). Element type from -DMIO_DTYPE_*.
#include "miocore_gpu.h"

MIO_KERNEL void miocore_blend(mio_t* out, const mio_t* result, MioTensor5 t, float alpha,
                              float beta, int channels_last) {
  const mio_index total = t.len[0] * t.len[1] * t.len[2] * t.len[3] * t.len[4];
  MIO_GRID_LOOP(i, total) {
    mio_index idx[5];
    mio_decode5(t, i, channels_last, idx);
    const mio_index off = mio_offset5(t, idx);
    float v = alpha * mio_load(result + off);
    if (beta != 0.0f) v += beta * mio_load(out + off);
    mio_store(out + off, v);
  }
}

MIO_KERNEL void miocore_fill(mio_t* out, MioTensor5 t, float value, int channels_last) {
  const mio_index total = t.len[0] * t.len[1] * t.len[2] * t.len[3] * t.len[4];
  MIO_GRID_LOOP(i, total) {
    mio_index idx[5];
    mio_decode5(t, i, channels_last, idx);
    mio_store(out + mio_offset5(t, idx), value);
  }
}

// One thread busy for `cycles` clock cycles: find queues it before a timed run so that the
// run's launches are all enqueued before the GPU reaches them, and the events measure device
// time, not the host's launch overhead.
MIO_KERNEL void miocore_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}
