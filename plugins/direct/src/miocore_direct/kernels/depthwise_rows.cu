// direct.gpu_depthwise: NCHW depthwise forward, and backward data at stride 1 (a forward
// convolution of dy with the flipped filter), from registers. Each thread computes a run of
// MIO_OX outputs along a row for MIO_OY rows of one plane: it loads the input rows those
// outputs read straight into registers (aligned 8-byte chunks where the tensor allows, 4-byte
// ones on 16-bit rows of a width that is even but not a multiple of 4), so
// there is no shared memory and no barrier, and every load of a thread is independent of its
// others (many in flight). 2-D only; strided backward data keeps dw_nchw's gather.
//
// Compile-time, beside depthwise.cu's (filter, strides, dilations, MIO_R, MIO_M, MIO_FLIP,
// MIO_NV):
//   MIO_OX, MIO_OY  outputs per thread along a row (a multiple of MIO_NV) and rows
//   MIO_PWM         the kernel's padding along W modulo MIO_NV: where a thread's input window
//                   starts inside its first chunk (its outputs start on a chunk boundary)
//
// Threads run over (image, written channel, row group, column run), the column run fastest;
// MioDwParams: tiles_w = column runs per row, tiles = row groups per plane, items = all runs.
#include "depthwise_common.h"

#ifndef MIO_OX
#define MIO_OX 8
#endif
#ifndef MIO_OY
#define MIO_OY 1
#endif
#ifndef MIO_PWM
#define MIO_PWM 0
#endif
// input columns and rows one thread's outputs read
#define MIO_IX ((MIO_OX - 1) * MIO_SW + (MIO_FX - 1) * MIO_DW + 1)
#define MIO_IY ((MIO_OY - 1) * MIO_SH + (MIO_FY - 1) * MIO_DH + 1)
// where the window starts in its first chunk, and the chunks that cover it
#define MIO_OFF ((MIO_NV - MIO_PWM % MIO_NV) % MIO_NV)
#define MIO_NCHR ((MIO_OFF + MIO_IX + MIO_NV - 1) / MIO_NV)

// Input columns iw0 .. iw0 + MIO_IX - 1 of one row as floats, zeros outside [0, aw).
MIO_DEVICE void mio_rows_load(const mio_t* row, const MioTensor5& t, int iw0, int aw,
                              bool chunked, float* v) {
#if MIO_NV > 1
  if (chunked) {
    const int c0 = iw0 - MIO_OFF;  // a chunk boundary (the host keeps MIO_PWM right)
    float c[MIO_NCHR * MIO_NV];
#pragma unroll
    for (int k = 0; k < MIO_NCHR; ++k) mio_load_chunk(row, c0 + k * MIO_NV, aw, c + k * MIO_NV);
#pragma unroll
    for (int i = 0; i < MIO_IX; ++i) v[i] = c[i + MIO_OFF];
    return;
  }
#endif
#pragma unroll
  for (int i = 0; i < MIO_IX; ++i) {
    const int col = iw0 + i;
    v[i] = col >= 0 && col < aw ? mio_load(row + col * t.stride[4]) : 0.0f;
  }
}

MIO_KERNEL void dw_nchw_rows(const mio_t* __restrict__ a, const mio_t* __restrict__ w,
                             mio_t* __restrict__ b, MioDwParams p) {
  const int ah = (int)p.a.len[3], aw = (int)p.a.len[4];
  const int bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const mio_index kout = p.b.len[1];
#if MIO_NV > 1
  const bool chunked_in = mio_nchw_chunked(a, p.a);
  const bool chunked_out = mio_nchw_chunked(b, p.b);
#else
  const bool chunked_in = false;
#endif
  // 32-bit index arithmetic (the host keeps the runs below 2**31): a 64-bit division per
  // item would cost about as many instructions as the item's multiply-adds
  const unsigned int runs = (unsigned int)p.tiles_w, groups = (unsigned int)p.tiles;
  const unsigned int kout32 = (unsigned int)kout;
  MIO_GRID_LOOP(item, p.items) {
    unsigned int t = (unsigned int)item;
    const int run = (int)(t % runs);
    t /= runs;
    const int group = (int)(t % groups);
    t /= groups;
    const mio_index o = t % kout32;  // written channel
    const mio_index n = t / kout32;
    const int oh0 = group * MIO_OY, ow0 = run * MIO_OX;
    const int ih0 = oh0 * MIO_SH - (int)p.pad_h;
    const int iw0 = ow0 * MIO_SW - (int)p.pad_w;
    float acc[MIO_OY][MIO_OX];
#pragma unroll
    for (int q = 0; q < MIO_OY; ++q) {
#pragma unroll
      for (int x = 0; x < MIO_OX; ++x) acc[q][x] = 0.0f;
    }
    for (int j = 0; j < MIO_R; ++j) {
      const mio_index kw = o * MIO_R + j;  // filter channel; its read channel is kw / M
      float wr[MIO_FY][MIO_FX];
#pragma unroll
      for (int fy = 0; fy < MIO_FY; ++fy) {
#pragma unroll
        for (int fx = 0; fx < MIO_FX; ++fx) wr[fy][fx] = mio_wtap(w, p.w, kw, 0, fy, fx);
      }
      const mio_t* plane = a + n * p.a.stride[0] + (kw / MIO_M) * p.a.stride[1];
#pragma unroll
      for (int r = 0; r < MIO_IY; ++r) {
        const int ih = ih0 + r;
        if (ih < 0 || ih >= ah) continue;
        float v[MIO_IX];
        mio_rows_load(plane + ih * p.a.stride[3], p.a, iw0, aw, chunked_in, v);
        // every (output row q, filter row fy) this input row feeds: q*SH + fy*DH == r
#pragma unroll
        for (int q = 0; q < MIO_OY; ++q) {
#pragma unroll
          for (int fy = 0; fy < MIO_FY; ++fy) {
            if (q * MIO_SH + fy * MIO_DH != r) continue;  // decided at compile time
#pragma unroll
            for (int x = 0; x < MIO_OX; ++x) {
#pragma unroll
              for (int fx = 0; fx < MIO_FX; ++fx) {
                acc[q][x] += v[x * MIO_SW + fx * MIO_DW] * wr[fy][fx];
              }
            }
          }
        }
      }
    }
    mio_t* out = b + n * p.b.stride[0] + o * p.b.stride[1];
#pragma unroll
    for (int q = 0; q < MIO_OY; ++q) {
      const int oh = oh0 + q;
      if (oh >= bh) break;
      mio_t* row = out + oh * p.b.stride[3];
#if MIO_NV > 1
      if (chunked_out && ow0 + MIO_OX <= bw) {
#pragma unroll
        for (int k = 0; k < MIO_OX / MIO_NV; ++k) {
          const float* vals = &acc[q][k * MIO_NV];
#if MIO_NV * MIO_ESIZE == 8
          constexpr int per = 4 / MIO_ESIZE;  // elements per 32-bit word
          *(uint2*)(row + ow0 + k * MIO_NV) =
              make_uint2(mio_pack_word(vals), mio_pack_word(vals + per));
#else
          *(unsigned int*)(row + ow0 + k * MIO_NV) = mio_pack_word(vals);
#endif
        }
        continue;
      }
#endif
#pragma unroll
      for (int x = 0; x < MIO_OX; ++x) {
        if (ow0 + x < bw) mio_store(row + (ow0 + x) * p.b.stride[4], acc[q][x]);
      }
    }
  }
}
