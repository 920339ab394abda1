// direct.gpu_tiled: shared-memory tiled direct convolution for small 2-D filters (up to 7x7),
// every direction, groups, any stride / padding / dilation (runtime arguments), any layout
// and strides (MioTensor5), fp32/fp16/bf16 storage with fp32 accumulation (-DMIO_DTYPE_*).
//
// Compile-time (the solver's performance config and the filter):
//   MIO_FY, MIO_FX   filter height and width (loops over taps unroll)
//   MIO_TH, MIO_TW   the spatial tile of one block (one thread per position of the tile)
//   MIO_KPB          channels of the written tensor one block computes (register accumulators)
//   MIO_CPB          channels of the reduction staged in shared memory per step
//
// forward          block = (spatial tile of y, KPB output channels of one group, image n);
//                  per CPB-chunk of input channels it stages the input tile with its halo and
//                  the KPB x CPB x FY x FX filter slice in shared memory
// backward data    the same over dx: block = (tile of dx, KPB input channels, n); it stages the
//                  dy window the tile's taps reach and gathers the dy positions (stride holes
//                  are skipped)
// backward weights block = (split s, KPB output channels, CPB input channels); each thread owns
//                  MIO_WRW_R filter elements and loops over the (n, tile) items of its split,
//                  staging the x tile with halo and the dy tile; splits > 1 write float
//                  partials to the workspace and tiled_conv_wrw_reduce sums them
// The shared extents (p.in_h, p.in_w) are computed by the host, which passes the dynamic
// shared-memory size at launch.
#include "miocore_gpu.h"

#ifndef MIO_FY
#define MIO_FY 3
#endif
#ifndef MIO_FX
#define MIO_FX 3
#endif
#ifndef MIO_TH
#define MIO_TH 8
#endif
#ifndef MIO_TW
#define MIO_TW 16
#endif
#ifndef MIO_KPB
#define MIO_KPB 8
#endif
#ifndef MIO_CPB
#define MIO_CPB 4
#endif
#define MIO_THREADS (MIO_TH * MIO_TW)
#define MIO_TAPS (MIO_FY * MIO_FX)
#define MIO_WRW_R ((MIO_KPB * MIO_CPB * MIO_TAPS + MIO_THREADS - 1) / MIO_THREADS)

struct MioTiledParams {
  MioTensor5 x;  // (N, C, 1, H, W)
  MioTensor5 w;  // (K, C/groups, 1, FY, FX)
  MioTensor5 y;  // (N, K, 1, Ho, Wo)
  mio_index groups;
  mio_index pad[2];
  mio_index stride[2];
  mio_index dil[2];
  mio_index tiles_w;  // spatial tiles along W of the tiled tensor
  mio_index tiles;    // spatial tiles of one image
  mio_index k_tiles;  // tiles of KPB written channels per group
  mio_index split;    // backward weights: blocks along the reduction
  mio_index in_h;     // shared extent of the staged input tile (rows)
  mio_index in_w;     // (columns)
};

MIO_DEVICE mio_index mio_floordiv(mio_index a, mio_index b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

MIO_DEVICE int mio_imin(mio_index a, mio_index b) { return (int)(a < b ? a : b); }

// Stage CPB channels x in_h x in_w of tensor t (channel offset cbase, origin (h0, w0)) as
// float; channels >= ccount and positions outside the image read as zero. The index order
// follows the memory order so that NCHW and NHWC loads both coalesce.
MIO_DEVICE void mio_stage(float* s, const mio_t* base, const MioTensor5& t, mio_index cbase,
                          int ccount, mio_index h0, mio_index w0, int ih, int iw, int tid) {
  const bool cl = t.stride[1] == 1 && t.len[1] > 1;
  const int total = MIO_CPB * ih * iw;
  for (int i = tid; i < total; i += MIO_THREADS) {
    int c, r, q;
    if (cl) {
      c = i % MIO_CPB;
      const int s2 = i / MIO_CPB;
      q = s2 % iw;
      r = s2 / iw;
    } else {
      q = i % iw;
      const int s2 = i / iw;
      r = s2 % ih;
      c = s2 / ih;
    }
    const mio_index h = h0 + r, w = w0 + q;
    float v = 0.0f;
    if (c < ccount && h >= 0 && h < t.len[3] && w >= 0 && w < t.len[4]) {
      v = mio_load(base + (cbase + c) * t.stride[1] + h * t.stride[3] + w * t.stride[4]);
    }
    s[(c * ih + r) * iw + q] = v;
  }
}

MIO_KERNEL void tiled_conv_fwd(const mio_t* __restrict__ x, const mio_t* __restrict__ w,
                               mio_t* __restrict__ y, MioTiledParams p) {
  extern __shared__ float mio_smem[];
  const int ih = (int)p.in_h, iw = (int)p.in_w;
  float* s_in = mio_smem;                     // [CPB][ih][iw]
  float* s_w = mio_smem + MIO_CPB * ih * iw;  // [KPB][CPB][FY][FX]
  const int tid = (int)threadIdx.x;
  const int ty = tid / MIO_TW, tx = tid % MIO_TW;
  const int sh = (int)p.stride[0], sw = (int)p.stride[1];
  const int dh = (int)p.dil[0], dw = (int)p.dil[1];
  const mio_index tile = blockIdx.x;
  const mio_index oh0 = (tile / p.tiles_w) * MIO_TH, ow0 = (tile % p.tiles_w) * MIO_TW;
  const mio_index g = blockIdx.y / p.k_tiles, kt = blockIdx.y % p.k_tiles;
  const mio_index n = blockIdx.z;
  const mio_index cg = p.w.len[1], kg = p.y.len[1] / p.groups;
  const mio_index k0 = g * kg + kt * MIO_KPB;
  const int kcount = mio_imin(MIO_KPB, kg - kt * MIO_KPB);
  const mio_t* xn = x + n * p.x.stride[0];
  float acc[MIO_KPB];
#pragma unroll
  for (int k = 0; k < MIO_KPB; ++k) acc[k] = 0.0f;
  for (mio_index c0 = 0; c0 < cg; c0 += MIO_CPB) {
    const int ccount = mio_imin(MIO_CPB, cg - c0);
    mio_stage(s_in, xn, p.x, g * cg + c0, ccount, oh0 * sh - p.pad[0], ow0 * sw - p.pad[1], ih,
              iw, tid);
    for (int i = tid; i < MIO_KPB * MIO_CPB * MIO_TAPS; i += MIO_THREADS) {
      const int f = i % MIO_TAPS, s2 = i / MIO_TAPS;
      const int c = s2 % MIO_CPB, k = s2 / MIO_CPB;
      float v = 0.0f;
      if (k < kcount && c < ccount) {
        v = mio_load(w + (k0 + k) * p.w.stride[0] + (c0 + c) * p.w.stride[1] +
                     (f / MIO_FX) * p.w.stride[3] + (f % MIO_FX) * p.w.stride[4]);
      }
      s_w[i] = v;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < MIO_CPB; ++c) {
#pragma unroll
      for (int fy = 0; fy < MIO_FY; ++fy) {
        const float* row = s_in + (c * ih + ty * sh + fy * dh) * iw + tx * sw;
#pragma unroll
        for (int fx = 0; fx < MIO_FX; ++fx) {
          const float v = row[fx * dw];
          const float* wp = s_w + c * MIO_TAPS + fy * MIO_FX + fx;
#pragma unroll
          for (int k = 0; k < MIO_KPB; ++k) acc[k] += v * wp[k * MIO_CPB * MIO_TAPS];
        }
      }
    }
    __syncthreads();
  }
  const mio_index oh = oh0 + ty, ow = ow0 + tx;
  if (oh < p.y.len[3] && ow < p.y.len[4]) {
    mio_t* yp = y + n * p.y.stride[0] + k0 * p.y.stride[1] + oh * p.y.stride[3] +
                ow * p.y.stride[4];
#pragma unroll
    for (int k = 0; k < MIO_KPB; ++k) {
      if (k < kcount) mio_store(yp + k * p.y.stride[1], acc[k]);
    }
  }
}

MIO_KERNEL void tiled_conv_bwd(mio_t* __restrict__ x, const mio_t* __restrict__ w,
                               const mio_t* __restrict__ y, MioTiledParams p) {
  extern __shared__ float mio_smem[];
  const int ih = (int)p.in_h, iw = (int)p.in_w;
  float* s_dy = mio_smem;                     // [CPB][ih][iw]: dy window
  float* s_w = mio_smem + MIO_CPB * ih * iw;  // [KPB (dx channels)][CPB (dy channels)][taps]
  const int tid = (int)threadIdx.x;
  const int ty = tid / MIO_TW, tx = tid % MIO_TW;
  const int sh = (int)p.stride[0], sw = (int)p.stride[1];
  const int dh = (int)p.dil[0], dw = (int)p.dil[1];
  const mio_index tile = blockIdx.x;
  const mio_index h0 = (tile / p.tiles_w) * MIO_TH, w0 = (tile % p.tiles_w) * MIO_TW;
  const mio_index g = blockIdx.y / p.k_tiles, ct = blockIdx.y % p.k_tiles;
  const mio_index n = blockIdx.z;
  const mio_index cg = p.w.len[1], kg = p.y.len[1] / p.groups;
  const mio_index c0 = ct * MIO_KPB;  // within the group
  const int ccount = mio_imin(MIO_KPB, cg - c0);
  // first dy row / column any tap of this tile reaches (floor division: may be negative)
  const mio_index ohb = mio_floordiv(h0 + p.pad[0] - (MIO_FY - 1) * (mio_index)dh, sh);
  const mio_index owb = mio_floordiv(w0 + p.pad[1] - (MIO_FX - 1) * (mio_index)dw, sw);
  const int th = (int)(h0 + ty + p.pad[0] - ohb * sh);  // >= (FY-1)*dh by construction
  const int tw = (int)(w0 + tx + p.pad[1] - owb * sw);
  const mio_t* yn = y + n * p.y.stride[0];
  float acc[MIO_KPB];
#pragma unroll
  for (int c = 0; c < MIO_KPB; ++c) acc[c] = 0.0f;
  for (mio_index k0 = 0; k0 < kg; k0 += MIO_CPB) {
    const int kcount = mio_imin(MIO_CPB, kg - k0);
    mio_stage(s_dy, yn, p.y, g * kg + k0, kcount, ohb, owb, ih, iw, tid);
    for (int i = tid; i < MIO_KPB * MIO_CPB * MIO_TAPS; i += MIO_THREADS) {
      const int f = i % MIO_TAPS, s2 = i / MIO_TAPS;
      const int k = s2 % MIO_CPB, c = s2 / MIO_CPB;
      float v = 0.0f;
      if (k < kcount && c < ccount) {
        v = mio_load(w + (g * kg + k0 + k) * p.w.stride[0] + (c0 + c) * p.w.stride[1] +
                     (f / MIO_FX) * p.w.stride[3] + (f % MIO_FX) * p.w.stride[4]);
      }
      s_w[i] = v;
    }
    __syncthreads();
#pragma unroll
    for (int fy = 0; fy < MIO_FY; ++fy) {
      const int t = th - fy * dh;
      if (t % sh) continue;
      const int r = t / sh;
#pragma unroll
      for (int fx = 0; fx < MIO_FX; ++fx) {
        const int u = tw - fx * dw;
        if (u % sw) continue;
        const int q = u / sw;
#pragma unroll
        for (int k = 0; k < MIO_CPB; ++k) {
          const float v = s_dy[(k * ih + r) * iw + q];
          const float* wp = s_w + k * MIO_TAPS + fy * MIO_FX + fx;
#pragma unroll
          for (int c = 0; c < MIO_KPB; ++c) acc[c] += v * wp[c * MIO_CPB * MIO_TAPS];
        }
      }
    }
    __syncthreads();
  }
  const mio_index hh = h0 + ty, ww = w0 + tx;
  if (hh < p.x.len[3] && ww < p.x.len[4]) {
    mio_t* xp = x + n * p.x.stride[0] + (g * cg + c0) * p.x.stride[1] + hh * p.x.stride[3] +
                ww * p.x.stride[4];
#pragma unroll
    for (int c = 0; c < MIO_KPB; ++c) {
      if (c < ccount) mio_store(xp + c * p.x.stride[1], acc[c]);
    }
  }
}

MIO_KERNEL void tiled_conv_wrw(const mio_t* __restrict__ x, mio_t* __restrict__ w,
                               const mio_t* __restrict__ y, float* __restrict__ part,
                               MioTiledParams p) {
  extern __shared__ float mio_smem[];
  const int ih = (int)p.in_h, iw = (int)p.in_w;
  float* s_in = mio_smem;                      // [CPB][ih][iw]: x tile with halo
  float* s_dy = mio_smem + MIO_CPB * ih * iw;  // [KPB][TH][TW]
  const int tid = (int)threadIdx.x;
  const int sh = (int)p.stride[0], sw = (int)p.stride[1];
  const int dh = (int)p.dil[0], dw = (int)p.dil[1];
  const mio_index split = blockIdx.x;
  const mio_index g = blockIdx.y / p.k_tiles, kt = blockIdx.y % p.k_tiles;
  const mio_index ct = blockIdx.z;
  const mio_index cg = p.w.len[1], kg = p.y.len[1] / p.groups;
  const mio_index k0 = kt * MIO_KPB, c0 = ct * MIO_CPB;  // within the group
  const int kcount = mio_imin(MIO_KPB, kg - k0);
  const int ccount = mio_imin(MIO_CPB, cg - c0);
  const mio_index items = p.x.len[0] * p.tiles;
  float acc[MIO_WRW_R];
#pragma unroll
  for (int j = 0; j < MIO_WRW_R; ++j) acc[j] = 0.0f;
  for (mio_index item = split; item < items; item += p.split) {
    const mio_index n = item / p.tiles, tile = item % p.tiles;
    const mio_index oh0 = (tile / p.tiles_w) * MIO_TH, ow0 = (tile % p.tiles_w) * MIO_TW;
    mio_stage(s_in, x + n * p.x.stride[0], p.x, g * cg + c0, ccount, oh0 * sh - p.pad[0],
              ow0 * sw - p.pad[1], ih, iw, tid);
    for (int i = tid; i < MIO_KPB * MIO_THREADS; i += MIO_THREADS) {
      const int q = i % MIO_TW, s2 = i / MIO_TW;
      const int r = s2 % MIO_TH, k = s2 / MIO_TH;
      const mio_index oh = oh0 + r, ow = ow0 + q;
      float v = 0.0f;
      if (k < kcount && oh < p.y.len[3] && ow < p.y.len[4]) {
        v = mio_load(y + n * p.y.stride[0] + (g * kg + k0 + k) * p.y.stride[1] +
                     oh * p.y.stride[3] + ow * p.y.stride[4]);
      }
      s_dy[i] = v;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < MIO_WRW_R; ++j) {
      const int e = tid + j * MIO_THREADS;
      if (e < MIO_KPB * MIO_CPB * MIO_TAPS) {
        const int f = e % MIO_TAPS, s2 = e / MIO_TAPS;
        const int c = s2 % MIO_CPB, k = s2 / MIO_CPB;
        const int fy = f / MIO_FX, fx = f % MIO_FX;
        const float* dyp = s_dy + k * MIO_THREADS;
        const float* xp = s_in + (c * ih + fy * dh) * iw + fx * dw;
        float sum = 0.0f;
        for (int r = 0; r < MIO_TH; ++r) {
#pragma unroll
          for (int q = 0; q < MIO_TW; ++q) sum += dyp[r * MIO_TW + q] * xp[r * sh * iw + q * sw];
        }
        acc[j] += sum;
      }
    }
    __syncthreads();
  }
  const mio_index wcount = p.w.len[0] * cg * MIO_TAPS;
#pragma unroll
  for (int j = 0; j < MIO_WRW_R; ++j) {
    const int e = tid + j * MIO_THREADS;
    if (e >= MIO_KPB * MIO_CPB * MIO_TAPS) continue;
    const int f = e % MIO_TAPS, s2 = e / MIO_TAPS;
    const int c = s2 % MIO_CPB, k = s2 / MIO_CPB;
    if (k >= kcount || c >= ccount) continue;
    const mio_index kk = g * kg + k0 + k, cc = c0 + c;
    if (part) {
      part[split * wcount + (kk * cg + cc) * MIO_TAPS + f] = acc[j];
    } else {
      mio_store(w + kk * p.w.stride[0] + cc * p.w.stride[1] + (f / MIO_FX) * p.w.stride[3] +
                    (f % MIO_FX) * p.w.stride[4],
                acc[j]);
    }
  }
}

// Sums the p.split float partials of every dw element and stores it in the element type.
MIO_KERNEL void tiled_conv_wrw_reduce(mio_t* __restrict__ w, const float* __restrict__ part,
                                      MioTiledParams p) {
  const mio_index cg = p.w.len[1];
  const mio_index wcount = p.w.len[0] * cg * MIO_TAPS;
  MIO_GRID_LOOP(i, wcount) {
    float sum = 0.0f;
    for (mio_index s = 0; s < p.split; ++s) sum += part[s * wcount + i];
    const mio_index f = i % MIO_TAPS, kc = i / MIO_TAPS;
    const mio_index c = kc % cg, k = kc / cg;
    mio_store(w + k * p.w.stride[0] + c * p.w.stride[1] + (f / MIO_FX) * p.w.stride[3] +
                  (f % MIO_FX) * p.w.stride[4],
              sum);
  }
}
