// direct.gpu_depthwise: 2-D channels-innermost plain depthwise forward, and backward data at
// stride 1 (a forward convolution of dy with the flipped filter), from input tiles staged in
// shared memory. A block computes MIO_TOH rows x MIO_TOW columns of the written tensor for
// MIO_CH channels of one image: it first copies the input rows and columns those outputs read
// (the tile and its halo) to shared memory in 16-byte chunks of channels, each chunk read once
// from global memory, then every thread computes strips of MIO_PIX consecutive outputs of one
// row for its MIO_VEC channels from shared memory. dw_nhwc reads each thread's window through
// L1 in loads of MIO_VEC elements (about three times the input on a 3x3 layer, latency-bound
// at 25% occupancy on 16-bit layers); this moves the input once, in the widest loads, and
// keeps few registers. No channel multiplier.
//
// Strided backward data (MIO_GATHER): a tile of dx stages the dy rows and columns its outputs
// reach, and a thread's strip is MIO_PIX outputs of one row MIO_SW apart (one phase of the
// stride), so that they share their taps and read consecutive staged dy columns.
//
// Compile-time, beside depthwise_common.h's (filter, strides, dilations, MIO_FLIP, MIO_VEC):
//   MIO_TOH, MIO_TOW  output rows and columns of a block's tile
//   MIO_CH            channels of a block's tile (a multiple of the 16-byte chunk and of
//                     MIO_VEC)
//   MIO_PIX           consecutive output columns a thread computes at a time (divides MIO_TOW;
//                     with MIO_GATHER, columns MIO_SW apart: MIO_SW * MIO_PIX divides MIO_TOW)
//   MIO_PY            consecutive output rows of a thread's strip (divides MIO_TOH; default 1;
//                     not with MIO_GATHER): the strip's rows share the staged rows between
//                     them, so each staged element a thread loads and converts to fp32 feeds
//                     up to MIO_FY rows of sums (a 3x3 strip of 2 x 4 outputs loads 24 elements
//                     a channel for 72 multiply-adds, a 1 x 4 strip 18 for 36)
//   MIO_MINB          blocks each SM must hold at once (registers capped to match; default 1)
//   MIO_TILES         tiles a block computes one after the other (default 1). Above 1 the
//                     input is staged into two buffers by asynchronous copies (cp.async on
//                     sm_80+, plain copies elsewhere): the next tile's input is in flight
//                     while this one's outputs are computed, where one tile a block leaves
//                     each block waiting for its whole tile before any arithmetic.
//   MIO_TMA           1: the tensor memory accelerator stages each tile (CUDA sm_90 and later):
//                     one thread copies the tile's box of the read tensor, zeros outside it,
//                     from a 4-D tensor map (channels, columns, rows, images) taken as the
//                     first argument, completing on an mbarrier per buffer. The other threads
//                     spend no instructions on addresses, bounds or copies (the cp.async
//                     staging was about a quarter of a thread's instructions on fp16 3x3
//                     layers: 40 a 16-byte chunk).
//   MIO_CFAST         1: channel blocks first in a one-dimensional grid (x = run * channel
//                     blocks + channel block): a run's channel blocks run side by side, so the
//                     DRAM granules and L2 lines their channels share are read once, where
//                     runs first read them again a sweep of the tensor later
// Block: (MIO_CH / MIO_VEC) channel lanes x (256 / that) pixel lanes. Grid: x over runs of
// MIO_TILES tiles in (image, tile row, tile column) order, the column fastest; y over channel
// blocks (with MIO_CFAST, both along x).
// MioDwParams: tiles_w = tiles along W, tiles = tiles per image.
// The host launches it only where both activation tensors are 16-byte aligned with channels
// innermost in whole chunks (its scalar twin, dw_nhwc, runs the rest).
#include "depthwise_common.h"

#ifndef MIO_TMA
#define MIO_TMA 0
#endif
#ifndef MIO_CFAST
#define MIO_CFAST 0
#endif
#if MIO_TMA
#include "miocore_tma.h"
#endif

#ifndef MIO_TOH
#define MIO_TOH 8
#endif
#ifndef MIO_TOW
#define MIO_TOW 16
#endif
#ifndef MIO_CH
#define MIO_CH 32
#endif
#ifndef MIO_MINB
#define MIO_MINB 1
#endif
#ifndef MIO_TILES
#define MIO_TILES 1
#endif

#define MIO_BUFFERS (MIO_TILES > 1 ? 2 : 1)
#define MIO_CHUNK (16 / MIO_ESIZE)  // elements of one staged 16-byte load
#define MIO_CHUNKS (MIO_CH / MIO_CHUNK)
#if MIO_GATHER  // every dy row and column the tile's outputs reach (dw_nchw's bound)
#define MIO_TEH ((MIO_TOH - 2 + (MIO_FY - 1) * MIO_DH + MIO_SH) / MIO_SH + 1)
#define MIO_TEW ((MIO_TOW - 2 + (MIO_FX - 1) * MIO_DW + MIO_SW) / MIO_SW + 1)
#define MIO_STRIDE_W MIO_SW  // a strip's outputs: one phase of the stride
#else
#define MIO_TEH ((MIO_TOH - 1) * MIO_SH + (MIO_FY - 1) * MIO_DH + 1)  // staged rows
#define MIO_TEW ((MIO_TOW - 1) * MIO_SW + (MIO_FX - 1) * MIO_DW + 1)  // staged columns
#define MIO_STRIDE_W 1
#endif
#define MIO_STRIPS_W (MIO_TOW / MIO_PIX)
#define MIO_STRIPS_H (MIO_TOH / MIO_PY)  // a strip's staged rows: depthwise_common.h's MIO_ROWS

#if MIO_CH % MIO_CHUNK || MIO_CH % MIO_VEC || MIO_TOW % (MIO_PIX * MIO_STRIDE_W) || MIO_FZ != 1
#error "dw_nhwc_tile: MIO_CH whole chunks and vectors, MIO_PIX strips dividing MIO_TOW, 2-D"
#endif
#if MIO_TOH % MIO_PY || (MIO_GATHER && MIO_PY != 1)
#error "dw_nhwc_tile: MIO_PY divides MIO_TOH, and is 1 for the gather"
#endif

#define MIO_STAGED (MIO_TEH * MIO_TEW * MIO_CHUNKS)  // 16-byte chunks of one tile's input
#if MIO_TMA  // a TMA copy lands on 128-byte boundaries: each buffer rounded up to them
#define MIO_BUFFER_CHUNKS ((MIO_STAGED + 7) / 8 * 8)
#define MIO_TILE_ALIGN __align__(128)
#else
#define MIO_BUFFER_CHUNKS MIO_STAGED
#define MIO_TILE_ALIGN
#endif

// The image and first output row and column of tile t (tiles numbered image by image). In
// 32-bit arithmetic (the host keeps images x tiles within int32): a build that divided in 64
// bits per tile ran the single tiles 1.1-1.3x slower on an H200.
struct MioTileAt {
  unsigned int n;
  int oh0, ow0;
};

MIO_DEVICE MioTileAt dw_tile_at(unsigned int t, const MioDwParams& p) {
  const unsigned int tiles_w = (unsigned int)p.tiles_w;
  const unsigned int tiles_h = (unsigned int)p.tiles / tiles_w;
  MioTileAt at;
  at.ow0 = (int)(t % tiles_w) * MIO_TOW;
  t /= tiles_w;
  at.oh0 = (int)(t % tiles_h) * MIO_TOH;
  at.n = t / tiles_h;
  return at;
}

// The read tensor's row and column at the staged tile's origin (may be negative); the
// gather's: the first dy position any tap of the tile reaches.
struct MioTileOrigin {
  int h, w;
};

MIO_DEVICE MioTileOrigin dw_tile_origin(const MioTileAt& at, const MioDwParams& p) {
  MioTileOrigin o;
#if MIO_GATHER
  o.h = (int)mio_floordiv(at.oh0 + (int)p.pad_h - (MIO_FY - 1) * MIO_DH, MIO_SH);
  o.w = (int)mio_floordiv(at.ow0 + (int)p.pad_w - (MIO_FX - 1) * MIO_DW, MIO_SW);
#else
  o.h = at.oh0 * MIO_SH - (int)p.pad_h;
  o.w = at.ow0 * MIO_SW - (int)p.pad_w;
#endif
  return o;
}

// Copies tile t's input (rows, columns and halo; MIO_CH channels from c0) to buf: consecutive
// threads take consecutive chunks of a pixel, then the next pixel, so a warp reads whole runs
// of channels; zeros outside the image and past the last channel. With MIO_TILES > 1 the
// copies are asynchronous (the caller commits and waits).
MIO_DEVICE void dw_tile_stage(uint4* buf, const mio_t* __restrict__ a, const MioDwParams& p,
                              const MioTileAt& at, int c0, int tid, int threads) {
  const int channels = (int)p.b.len[1];  // plain depthwise: as many read as written
  const int ah = (int)p.a.len[3], aw = (int)p.a.len[4];
  const MioTileOrigin o = dw_tile_origin(at, p);
  const int ih0 = o.h, iw0 = o.w;
  const mio_t* an = a + (mio_index)at.n * p.a.stride[0] + c0;
  for (int i = tid; i < MIO_STAGED; i += threads) {
    const int k = i % MIO_CHUNKS, pixel = i / MIO_CHUNKS;
    const int ih = ih0 + pixel / MIO_TEW, iw = iw0 + pixel % MIO_TEW;
    const bool inside =
        ih >= 0 && ih < ah && iw >= 0 && iw < aw && c0 + k * MIO_CHUNK < channels;
#if MIO_TILES > 1
    const mio_t* src = inside ? an + ih * p.a.stride[3] + iw * p.a.stride[4] + k * MIO_CHUNK : an;
    mio_cp_async16(buf + i, src, inside ? 16 : 0);
#else
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (inside) v = *(const uint4*)(an + ih * p.a.stride[3] + iw * p.a.stride[4] + k * MIO_CHUNK);
    buf[i] = v;
#endif
  }
}

#if MIO_TMA
// Tile t's input copied into buf by the tensor memory accelerator: the box of MIO_CH channels
// from c0, MIO_TEW columns and MIO_TEH rows from the tile's origin (negative and past-the-end
// coordinates read as zeros), completing on bar. Called by one thread.
MIO_DEVICE void dw_tile_stage_tma(uint4* buf, const MioTensorMap* map, unsigned long long* bar,
                                  const MioDwParams& p, const MioTileAt& at, int c0) {
  const MioTileOrigin o = dw_tile_origin(at, p);
  fence_proxy_async_shared();  // the block's reads of this buffer (a barrier back) come first
  bar_expect(bar, MIO_STAGED * 16);
  tma_load_4d(buf, map, bar, c0, o.w, o.h, (int)at.n);
}
#endif

#if MIO_GATHER
// This thread's strips of dx tile t from its staged dy (buf) and the taps (wr): a strip is
// MIO_PIX outputs of one row MIO_SW apart, so the taps whose dy position is whole are the
// same for all of them (a row's and a phase's) and their dy columns consecutive.
MIO_DEVICE void dw_tile_compute(const uint4* buf, const float (*wr)[MIO_VEC], mio_t* b,
                                const MioDwParams& p, const MioTileAt& at, int lane, int c) {
  const int bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const mio_t* s_in = (const mio_t*)buf + lane * MIO_VEC;
  mio_t* bn = b + (mio_index)at.n * p.b.stride[0] + c;
  // offsets that keep the dividends whole for % and / (taps reach (F - 1) * d back)
  const int oy = (MIO_FY - 1) * MIO_DH * MIO_SH, ox = (MIO_FX - 1) * MIO_DW * MIO_SW;
  const MioTileOrigin o = dw_tile_origin(at, p);
  const int rh0 = o.h, rw0 = o.w;
  for (int s = (int)threadIdx.y; s < MIO_TOH * MIO_STRIPS_W; s += (int)blockDim.y) {
    const int ry = s / MIO_STRIPS_W, m = s % MIO_STRIPS_W;
    const int rx = m % MIO_SW + (m / MIO_SW) * MIO_PIX * MIO_SW;  // the strip's first column
    const int oh = at.oh0 + ry, ow = at.ow0 + rx;
    if (oh >= bh || ow >= bw) continue;
    float acc[MIO_PIX][MIO_VEC] = {};
#pragma unroll
    for (int fy = 0; fy < MIO_FY; ++fy) {
      const int ty = oh + (int)p.pad_h - fy * MIO_DH + oy;
      if (ty % MIO_SH) continue;  // uniform over the strip
      const mio_t* row = s_in + (ty / MIO_SH - oy / MIO_SH - rh0) * MIO_TEW * MIO_CH;
#pragma unroll
      for (int fx = 0; fx < MIO_FX; ++fx) {
        const int tx = ow + (int)p.pad_w - fx * MIO_DW + ox;
        if (tx % MIO_SW) continue;  // the same phase for every output of the strip
        const int col = tx / MIO_SW - ox / MIO_SW - rw0;
#pragma unroll
        for (int q = 0; q < MIO_PIX; ++q) {
          float v[MIO_VEC];
          mio_loadv(row + (col + q) * MIO_CH, v);
#pragma unroll
          for (int e = 0; e < MIO_VEC; ++e) acc[q][e] += v[e] * wr[fy * MIO_FX + fx][e];
        }
      }
    }
    mio_t* out = bn + oh * p.b.stride[3];
#pragma unroll
    for (int q = 0; q < MIO_PIX; ++q) {
      if (ow + q * MIO_SW < bw) mio_storev(out + (ow + q * MIO_SW) * p.b.stride[4], acc[q]);
    }
  }
}
#else
// This thread's strips of tile t, computed from its staged input (buf) and the taps (wr): a
// strip is MIO_PY x MIO_PIX outputs, and each staged row and column it reads is loaded once
// and added into every output of the strip whose window holds it.
MIO_DEVICE void dw_tile_compute(const uint4* buf, const float (*wr)[MIO_VEC], mio_t* b,
                                const MioDwParams& p, const MioTileAt& at, int lane, int c) {
  const int bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const mio_t* s_in = (const mio_t*)buf + lane * MIO_VEC;
  mio_t* bn = b + (mio_index)at.n * p.b.stride[0] + c;
  for (int s = (int)threadIdx.y; s < MIO_STRIPS_H * MIO_STRIPS_W; s += (int)blockDim.y) {
    const int ry = (s / MIO_STRIPS_W) * MIO_PY, rx = (s % MIO_STRIPS_W) * MIO_PIX;
    const int oh = at.oh0 + ry, ow = at.ow0 + rx;
    if (oh >= bh || ow >= bw) continue;
    float acc[MIO_PY][MIO_PIX][MIO_VEC] = {};
#pragma unroll
    for (int r = 0; r < MIO_ROWS; ++r) {  // every staged row once for the strip
      const mio_t* row = s_in + ((ry * MIO_SH + r) * MIO_TEW + rx * MIO_SW) * MIO_CH;
#pragma unroll
      for (int col = 0; col < MIO_WIN; ++col) {  // every staged column once for the strip
        float v[MIO_VEC];
        bool used = false;  // compile-time after unrolling: rows between dilated taps skip
#pragma unroll
        for (int qr = 0; qr < MIO_PY; ++qr) {
          const int ty = r - qr * MIO_SH;
          used = used || (ty >= 0 && ty % MIO_DH == 0 && ty / MIO_DH < MIO_FY);
        }
        if (!used) continue;
        mio_loadv(row + col * MIO_CH, v);
#pragma unroll
        for (int qr = 0; qr < MIO_PY; ++qr) {
          const int ty = r - qr * MIO_SH;  // this output row's filter row, times the dilation
          if (ty < 0 || ty % MIO_DH || ty / MIO_DH >= MIO_FY) continue;
#pragma unroll
          for (int q = 0; q < MIO_PIX; ++q) {
            const int tx = col - q * MIO_SW;
            if (tx >= 0 && tx % MIO_DW == 0 && tx / MIO_DW < MIO_FX) {
              const float* tap = wr[(ty / MIO_DH) * MIO_FX + tx / MIO_DW];
#pragma unroll
              for (int e = 0; e < MIO_VEC; ++e) acc[qr][q][e] += v[e] * tap[e];
            }
          }
        }
      }
    }
#pragma unroll
    for (int qr = 0; qr < MIO_PY; ++qr) {
      if (oh + qr >= bh) break;
      mio_t* out = bn + (oh + qr) * p.b.stride[3];
#pragma unroll
      for (int q = 0; q < MIO_PIX; ++q) {
        if (ow + q < bw) mio_storev(out + (ow + q) * p.b.stride[4], acc[qr][q]);
      }
    }
  }
}

#endif

// The filter's taps for this thread's MIO_VEC channels, in registers (zeros on idle lanes).
MIO_DEVICE void dw_tile_taps(float (*wr)[MIO_VEC], const mio_t* __restrict__ w,
                             const MioDwParams& p, int c, bool active) {
#pragma unroll
  for (int f = 0; f < MIO_FY * MIO_FX; ++f)
#pragma unroll
    for (int e = 0; e < MIO_VEC; ++e)
      wr[f][e] = active ? mio_wtap(w, p.w, c + e, 0, f / MIO_FX, f % MIO_FX) : 0.0f;
}

MIO_KERNEL void __launch_bounds__(256, MIO_MINB)
    dw_nhwc_tile(
#if MIO_TMA
        const __grid_constant__ MioTensorMap a_map,  // the read tensor, for the copies
#endif
        const mio_t* __restrict__ a, const mio_t* __restrict__ w, mio_t* __restrict__ b,
        MioDwParams p) {
  // [buffer][row][column][chunk]
  __shared__ MIO_TILE_ALIGN uint4 s_tile[MIO_BUFFERS][MIO_BUFFER_CHUNKS];
  const int tid = (int)(threadIdx.y * blockDim.x + threadIdx.x);
  const int threads = (int)(blockDim.x * blockDim.y);
#if MIO_CFAST
  // channel blocks first: one run of tiles' channel blocks are neighbours in launch order,
  // so the memory their channels share is read once while they all run
  const unsigned int channel_blocks = (unsigned int)((p.b.len[1] + MIO_CH - 1) / MIO_CH);
  const unsigned int block_c = blockIdx.x % channel_blocks;
  const unsigned int block_t = blockIdx.x / channel_blocks;
#else
  const unsigned int block_c = blockIdx.y, block_t = blockIdx.x;
#endif
  const int c0 = (int)block_c * MIO_CH;
  const int lane = (int)threadIdx.x;  // this thread's channel vector in the block
  const int c = c0 + lane * MIO_VEC;
  const bool active = c < (int)p.b.len[1];
  float wr[MIO_FY * MIO_FX][MIO_VEC];
#if MIO_TMA
  __shared__ unsigned long long s_full[MIO_BUFFERS];  // a buffer's copy has landed
  if (tid == 0) {
    for (int i = 0; i < MIO_BUFFERS; ++i) bar_init(&s_full[i], 1);
    bar_init_fence();
  }
  __syncthreads();
#endif
#if MIO_TILES == 1
  // one tile: stage, then the taps and the outputs (the order the defaults were timed in)
  const MioTileAt at = dw_tile_at(block_t, p);
#if MIO_TMA
  if (tid == 0) dw_tile_stage_tma(s_tile[0], &a_map, &s_full[0], p, at, c0);
  if (!active) return;  // no block-wide barrier follows
  dw_tile_taps(wr, w, p, c, true);  // while the copy is in flight
  bar_wait(&s_full[0], 0);
#else
  dw_tile_stage(s_tile[0], a, p, at, c0, tid, threads);
  __syncthreads();
  if (!active) return;  // after the only barrier
  dw_tile_taps(wr, w, p, c, true);
#endif
  dw_tile_compute(s_tile[0], wr, b, p, at, lane, c);
#else
  // runs of tiles: tile j + 1's input copied into the other buffer while tile j computes;
  // idle lanes still stage and meet every barrier
  const unsigned int total = (unsigned int)(p.b.len[0] * p.tiles);  // within int32 (host)
  const unsigned int first = block_t * MIO_TILES;
  MioTileAt at = dw_tile_at(first, p);
#if MIO_TMA
  if (tid == 0) dw_tile_stage_tma(s_tile[0], &a_map, &s_full[0], p, at, c0);
#else
  dw_tile_stage(s_tile[0], a, p, at, c0, tid, threads);
  mio_cp_async_commit();
#endif
  dw_tile_taps(wr, w, p, c, active);
  for (int j = 0; j < MIO_TILES && first + j < total; ++j) {  // uniform over the block
    const bool more = j + 1 < MIO_TILES && first + j + 1 < total;
    const MioTileAt next = more ? dw_tile_at(first + j + 1, p) : at;
#if MIO_TMA
    // the other buffer, read by tile j - 1 before the last barrier; buffer j % 2's k-th copy
    // (k = j / 2) completes its barrier's phase k
    if (more && tid == 0) {
      dw_tile_stage_tma(s_tile[(j + 1) % 2], &a_map, &s_full[(j + 1) % 2], p, next, c0);
    }
    bar_wait(&s_full[j % 2], (unsigned)(j / 2) & 1u);
#else
    if (more) {  // the other buffer, read by tile j - 1 before the last barrier
      dw_tile_stage(s_tile[(j + 1) % 2], a, p, next, c0, tid, threads);
    }
    mio_cp_async_commit();  // possibly empty: tile j's copies are then always one group back
    mio_cp_async_wait(1);
    __syncthreads();
#endif
    if (active) dw_tile_compute(s_tile[j % 2], wr, b, p, at, lane, c);
    __syncthreads();  // every thread done with this buffer before it is staged again
    at = next;
  }
#endif
}
