// The core's own utility kernels: blend (out = alpha * result + beta * out) and fill, over a
// strided tensor of up to five logical dimensions, fill_random (find's test data, made on the
// device: a host-made tensor costs ~0.1 s per large layer), and spin (holds the stream for a number of
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

// Uniform values in [-1, 1) over `count` consecutive elements, from a hash of (index, seed):
// the same seed gives the same data on every device and run, and no element is left unwritten.
MIO_KERNEL void miocore_fill_random(mio_t* out, mio_index count, unsigned int seed) {
  MIO_GRID_LOOP(i, count) {
    unsigned int h = (unsigned int)i ^ ((unsigned int)(i >> 32) * 0x85ebca6bu) ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    const float unit = (float)(h >> 8) * (1.0f / 16777216.0f);  // 24 random bits in [0, 1)
    mio_store(out + i, 2.0f * unit - 1.0f);
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
