// direct.gpu_depthwise: depthwise convolution (groups == C, K = M * C: one input channel per
// group, M output channels per group), 2-D and 3-D, every direction, fp32/fp16/bf16 storage
// with fp32 accumulation (-DMIO_DTYPE_*). Any layout and strides (MioTensor5); the solver picks
// the kernel whose thread mapping suits the layout.
//
// Why ~840 lines in one file: it is one program. Its three entry points (dw_nhwc, dw_nchw,
// backward weights) are compiled together from the same compile-time parameters below, which
// every section reads; the parameter struct and the element-vector helpers they share live in
// depthwise_common.h, which depthwise_rows.cu (NCHW rows from registers) includes too.
//
// Compile-time: the filter (MIO_FZ, MIO_FY, MIO_FX), strides (MIO_SD/SH/SW) and dilations
// (MIO_DD/DH/DW), so the tap loops unroll and the stride tests are constant divisions; and
//   MIO_R, MIO_M  channel map of the "read" tensor a: written channel o sums the R source
//                 channels o*R + j (j < R), each read from channel (o*R + j) / M of a, with
//                 filter channel o*R + j. Forward: R = 1, M = mult. Backward data: R = mult,
//                 M = 1 (a = dy, written = dx).
//   MIO_FLIP      read the filter flipped (backward data at stride 1 runs as a forward
//                 convolution of dy with the flipped filter and padding (F-1)*d - p)
//   MIO_GATHER    backward data at stride > 1: for each dx element sum the taps whose dy
//                 position is whole ((i + p - f*d) % s == 0) and in range; no atomics
//   MIO_VEC       channels per thread in the channels-innermost kernels (one 4/8/16-byte load)
//   MIO_PIX       dw_nhwc: consecutive output columns per thread (the input columns they share
//                 are loaded once)
//   MIO_WREG      dw_nhwc: the thread's filter taps live in registers (small filters)
//   MIO_WSH       dw_nhwc, larger filters: the block's filter taps are staged once in shared
//                 memory as floats (MIO_CT channel vectors wide) and read as vectors; with
//                 neither, every tap is read from global memory at each use
//   MIO_CT        dw_nhwc: channel vectors per block (blockDim.x), for MIO_WSH's stage
//   MIO_MINB      dw_nhwc: blocks of 256 threads each SM must hold at once; the compiler caps
//                 the registers to match (unset: no cap, the kernel as it always compiled)
//   MIO_PY        dw_nhwc (not gather): consecutive output rows per thread, each input row
//                 read once for all of them; dw_nchw: output rows per thread (BY apart)
//   MIO_TW, MIO_BY, MIO_PY   dw_nchw: tile of TW columns x BY*PY rows, block TW x BY threads
//   MIO_PP        dw_nchw: planes per block (consecutive written channels of one image), each
//                 staged beside the others before any is computed: a small plane alone keeps
//                 too few loads in flight per block to cover the memory's latency
//   MIO_NV        dw_nchw: elements per 8-byte chunk of a staged row (4 in 16-bit, 2 in fp32;
//                 1: element by element), used where the read tensor's rows are contiguous
//                 and every stride and the base are whole chunks (decided in the kernel)
//   MIO_TC        dw_wrw: taps per block (blockIdx.z walks the chunks)
//   MIO_WRW_TILE  1: compile dw_wrw_tile, whose tile is MIO_CB channels x MIO_TP rows x
//                 MIO_TQ columns of dy (with the x rows and columns they reach); MIO_PG > 0:
//                 row groups (a thread holds every tap of its channel for every MIO_PG-th row)
//   MIO_TMA       dw_wrw_tile, 1: the tiles staged by the tensor memory accelerator (CUDA sm_90
//                 and later) as they lie in memory, from tensor maps of x and dy taken as the
//                 first two arguments, two items in flight (double buffers, an mbarrier each);
//                 0: staged through registers as floats, the next item's loads in flight
//   MIO_WV        dw_wrw_tile with MIO_TMA: adjacent channels a thread computes (1, 2, 4): a
//                 staged read of MIO_WV channels feeds MIO_WV multiply-adds (blockDim.x is
//                 MIO_CB / MIO_WV); with row groups each thread walks its own dy rows
//
// dw_nhwc   threads over channel vectors (blockDim.x) x pixel groups (blockDim.y), grid-stride
//           over the pixel groups; forward-like or gather
// dw_nchw   one block per (image, MIO_PP written channels, depth) plane tile: the read tiles
//           with their halos staged in shared memory, the channels' filters in shared memory
// dw_wrw    backward weights: blockDim.x channel vectors x blockDim.y pixel lanes; a block
//           (split s, channel block, tap chunk) reduces its share of N*Do*Ho*Wo in registers,
//           then across its pixel lanes in shared memory (fixed order) and writes one float per
//           (channel, tap): into dw directly (one split) or into the workspace partials that
//           dw_wrw_reduce sums in split order. Deterministic, no atomics.
// dw_wrw_tile  backward weights of 2-D channels-innermost plain depthwise layers through dy and x
//           tiles staged in shared memory (at its definition); same partials and reduction.
#include "depthwise_common.h"

// ---- dw_nhwc: channels innermost -------------------------------------------------------------
#ifdef MIO_MINB
#define MIO_NHWC_BOUNDS __launch_bounds__(256, MIO_MINB)
#else
#define MIO_NHWC_BOUNDS
#endif
MIO_KERNEL void MIO_NHWC_BOUNDS dw_nhwc(const mio_t* __restrict__ a,
                                        const mio_t* __restrict__ w, mio_t* __restrict__ b,
                                        MioDwParams p) {
  const int ct = (int)blockDim.x, pt = (int)blockDim.y;
  const mio_index o0 = ((mio_index)blockIdx.y * ct + threadIdx.x) * MIO_VEC;
#if MIO_WSH && !MIO_WREG
  // The block's taps as floats, [j][tap][channel]: each thread then reads its MIO_VEC
  // channels of a tap in one shared-memory vector access (float4 storage: 16-byte aligned).
  constexpr int cb = MIO_CT * MIO_VEC;
  __shared__ float4 s_wt4[(MIO_R * MIO_TAPS * cb + 3) / 4];
  float* s_wt = (float*)s_wt4;
  {
    const mio_index base = (mio_index)blockIdx.y * cb;
    for (int i = (int)(threadIdx.y * blockDim.x + threadIdx.x); i < MIO_R * MIO_TAPS * cb;
         i += (int)(blockDim.x * blockDim.y)) {
      const int cl = i % cb, jf = i / cb;
      const int j = jf / MIO_TAPS, f = jf % MIO_TAPS;
      const mio_index o = base + cl;
      s_wt[i] = o < p.b.len[1] ? mio_wtap(w, p.w, o * MIO_R + j, f / (MIO_FY * MIO_FX),
                                          (f / MIO_FX) % MIO_FY, f % MIO_FX)
                               : 0.0f;
    }
    __syncthreads();  // before any thread leaves: every one takes part in the stage
  }
#endif
  if (o0 >= p.b.len[1]) return;
  const int bd = (int)p.b.len[2], bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const int ad = (int)p.a.len[2], ah = (int)p.a.len[3], aw = (int)p.a.len[4];
#if MIO_WREG
  float wr[MIO_R][MIO_TAPS][MIO_VEC];
#pragma unroll
  for (int j = 0; j < MIO_R; ++j)
#pragma unroll
    for (int f = 0; f < MIO_TAPS; ++f)
#pragma unroll
      for (int e = 0; e < MIO_VEC; ++e)
        wr[j][f][e] = mio_wtap(w, p.w, (o0 + e) * MIO_R + j, f / (MIO_FY * MIO_FX),
                               (f / MIO_FX) % MIO_FY, f % MIO_FX);
#define MIO_WLOAD(j, f, wv)                             \
  _Pragma("unroll") for (int e_ = 0; e_ < MIO_VEC; ++e_) wv[e_] = wr[j][f][e_]
#elif MIO_WSH
#define MIO_WLOAD(j, f, wv) \
  mio_shared_vec(s_wt + ((j) * MIO_TAPS + (f)) * cb + threadIdx.x * MIO_VEC, wv)
#else
#define MIO_WLOAD(j, f, wv)                                                                   \
  _Pragma("unroll") for (int e_ = 0; e_ < MIO_VEC; ++e_) wv[e_] =                            \
      mio_wtap(w, p.w, (o0 + e_) * MIO_R + (j), (f) / (MIO_FY * MIO_FX), ((f) / MIO_FX) % MIO_FY, \
               (f) % MIO_FX)
#endif
  for (mio_index it = (mio_index)blockIdx.x * pt + threadIdx.y; it < p.items;
       it += (mio_index)gridDim.x * pt) {
    const unsigned int gh_n = ((unsigned int)bh + MIO_PY - 1) / MIO_PY;
    unsigned int r = (unsigned int)it;  // items < 2^31 (host check): 32-bit division
    const int gw = (int)(r % (unsigned int)p.groups_w);
    r /= (unsigned int)p.groups_w;
    const int oh = (int)(r % gh_n) * MIO_PY;  // first of the MIO_PY rows
    r /= gh_n;
    const int od = (int)(r % (unsigned int)bd);
    const mio_index n = r / (unsigned int)bd;
    const int ow0 = gw * MIO_PIX;
    float acc[MIO_PY][MIO_PIX][MIO_VEC];
#pragma unroll
    for (int qy = 0; qy < MIO_PY; ++qy)
#pragma unroll
      for (int q = 0; q < MIO_PIX; ++q)
#pragma unroll
        for (int e = 0; e < MIO_VEC; ++e) acc[qy][q][e] = 0.0f;
#pragma unroll
    for (int j = 0; j < MIO_R; ++j) {
      const mio_index ci = (o0 * MIO_R + j) / MIO_M;
      const mio_t* an = a + n * p.a.stride[0] + ci * p.a.stride[1];
#pragma unroll
      for (int fz = 0; fz < MIO_FZ; ++fz) {
#if MIO_GATHER
        const int tz = od + (int)p.pad_d - fz * MIO_DD;
        if (tz < 0 || tz % MIO_SD) continue;
        const int id = tz / MIO_SD;
#else
        const int id = od * MIO_SD - (int)p.pad_d + fz * MIO_DD;
#endif
        if (id < 0 || id >= ad) continue;
#if MIO_GATHER
#pragma unroll
        for (int fy = 0; fy < MIO_FY; ++fy) {
          const int ty = oh + (int)p.pad_h - fy * MIO_DH;
          if (ty < 0 || ty % MIO_SH) continue;
          const int ih = ty / MIO_SH;
          if (ih < 0 || ih >= ah) continue;
          const mio_t* row = an + id * p.a.stride[2] + ih * p.a.stride[3];
          const int f0 = (fz * MIO_FY + fy) * MIO_FX;
#pragma unroll
          for (int fx = 0; fx < MIO_FX; ++fx) {
            const int tx = ow0 + (int)p.pad_w - fx * MIO_DW;
            if (tx < 0 || tx % MIO_SW) continue;
            const int iw = tx / MIO_SW;
            if (iw >= aw) continue;
            float v[MIO_VEC], wv[MIO_VEC];
            mio_loadv(row + iw * p.a.stride[4], v);
            MIO_WLOAD(j, f0 + fx, wv);
#pragma unroll
            for (int e = 0; e < MIO_VEC; ++e) acc[0][0][e] += v[e] * wv[e];
          }
        }
#else
        const int ih0 = oh * MIO_SH - (int)p.pad_h;
        const int iw0 = ow0 * MIO_SW - (int)p.pad_w;
#pragma unroll
        for (int rr = 0; rr < MIO_ROWS; ++rr) {  // every input row once, for all MIO_PY rows
          const int ih = ih0 + rr;
          if (ih < 0 || ih >= ah) continue;
          const mio_t* row = an + id * p.a.stride[2] + ih * p.a.stride[3];
#pragma unroll
          for (int c = 0; c < MIO_WIN; ++c) {
            const int iw = iw0 + c;
            float v[MIO_VEC];
            if (iw >= 0 && iw < aw) {
              mio_loadv(row + iw * p.a.stride[4], v);
            } else {
#pragma unroll
              for (int e = 0; e < MIO_VEC; ++e) v[e] = 0.0f;
            }
#pragma unroll
            for (int qy = 0; qy < MIO_PY; ++qy) {
              const int ty = rr - qy * MIO_SH;  // compile-time after unrolling
              if (ty < 0 || ty % MIO_DH || ty / MIO_DH >= MIO_FY) continue;
              const int f0 = (fz * MIO_FY + ty / MIO_DH) * MIO_FX;
#pragma unroll
              for (int q = 0; q < MIO_PIX; ++q) {
                const int t = c - q * MIO_SW;
                if (t >= 0 && t % MIO_DW == 0 && t / MIO_DW < MIO_FX) {
                  float wv[MIO_VEC];
                  MIO_WLOAD(j, f0 + t / MIO_DW, wv);
#pragma unroll
                  for (int e = 0; e < MIO_VEC; ++e) acc[qy][q][e] += v[e] * wv[e];
                }
              }
            }
          }
        }
#endif
      }
    }
    mio_t* out = b + n * p.b.stride[0] + o0 * p.b.stride[1] + od * p.b.stride[2];
#pragma unroll
    for (int qy = 0; qy < MIO_PY; ++qy) {
      if (oh + qy >= bh) continue;
#pragma unroll
      for (int q = 0; q < MIO_PIX; ++q) {
        if (ow0 + q < bw) {
          mio_storev(out + (oh + qy) * p.b.stride[3] + (ow0 + q) * p.b.stride[4], acc[qy][q]);
        }
      }
    }
  }
#undef MIO_WLOAD
}

// ---- dw_nchw: spatial tiles staged in shared memory -----------------------------------------
#define MIO_TH (MIO_BY * MIO_PY)
#if MIO_GATHER
#define MIO_EH ((MIO_TH - 2 + (MIO_FY - 1) * MIO_DH + MIO_SH) / MIO_SH + 1)
#define MIO_EW ((MIO_TW - 2 + (MIO_FX - 1) * MIO_DW + MIO_SW) / MIO_SW + 1)
#else
#define MIO_EH ((MIO_TH - 1) * MIO_SH + (MIO_FY - 1) * MIO_DH + 1)
#define MIO_EW ((MIO_TW - 1) * MIO_SW + (MIO_FX - 1) * MIO_DW + 1)
#endif

#define MIO_PLANE (MIO_EH * MIO_EW)

#if MIO_NV > 1
// Stage the block's read tiles (rows rh0.., columns rw0.. of each plane) in aligned chunks of
// MIO_NV elements: a row of MIO_EW staged columns spans at most MIO_NCH chunks at any
// alignment. Chunks that cross the plane's border load element by element (zeros outside).
#define MIO_NCH ((MIO_EW + 2 * MIO_NV - 2) / MIO_NV)
MIO_DEVICE void mio_nchw_stage_chunks(const mio_t* plane_in, const MioDwParams& p, int planes,
                                      mio_index o0, int j, mio_index ci, int rh0, int rw0,
                                      int tid, int threads, float* s_in) {
  const int ah = (int)p.a.len[3], aw = (int)p.a.len[4];
  const int cw0 = (int)mio_floordiv(rw0, MIO_NV) * MIO_NV;  // the first chunk's column
#if MIO_PP > 1
#pragma unroll 2
#endif
  for (int i = tid; i < planes * MIO_EH * MIO_NCH; i += threads) {
    const int e = MIO_PP > 1 ? i % (MIO_EH * MIO_NCH) : i;
    const int pl = MIO_PP > 1 ? i / (MIO_EH * MIO_NCH) : 0;
    const int r = e / MIO_NCH, col = cw0 + (e % MIO_NCH) * MIO_NV;
    const int ih = rh0 + r;
    // this plane's read channel, counted from the first plane's
    const mio_index cd = MIO_PP > 1 ? ((o0 + pl) * MIO_R + j) / MIO_M - ci : 0;
    float v[MIO_NV];
    if (ih >= 0 && ih < ah) {
      mio_load_chunk(plane_in + cd * p.a.stride[1] + ih * p.a.stride[3], col, aw, v);
    } else {
#pragma unroll
      for (int t = 0; t < MIO_NV; ++t) v[t] = 0.0f;
    }
    float* dst = s_in + pl * MIO_PLANE + r * MIO_EW;
#pragma unroll
    for (int t = 0; t < MIO_NV; ++t) {
      const int c = col + t - rw0;
      if (c >= 0 && c < MIO_EW) dst[c] = v[t];
    }
  }
}
#endif

MIO_KERNEL void dw_nchw(const mio_t* __restrict__ a, const mio_t* __restrict__ w,
                        mio_t* __restrict__ b, MioDwParams p) {
#define MIO_WPLANE (MIO_R * MIO_TAPS)
  __shared__ float s_in[MIO_PP * MIO_PLANE];
  __shared__ float s_w[MIO_PP * MIO_WPLANE];
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  const int tid = ty * MIO_TW + tx;
  const int threads = MIO_TW * MIO_BY;
  const int bd = (int)p.b.len[2], bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const int ad = (int)p.a.len[2], ah = (int)p.a.len[3], aw = (int)p.a.len[4];
  const mio_index groups = (p.b.len[1] + MIO_PP - 1) / MIO_PP;
  mio_index plane = blockIdx.x;
  const int od = (int)(plane % bd);
  plane /= bd;
  const mio_index o0 = (plane % groups) * MIO_PP;  // the block's first written channel
  const mio_index n = plane / groups;
  // planes of this block (the last group may hold fewer); uniform over the block
#if MIO_PP > 1
  const int planes = (int)(p.b.len[1] - o0 < MIO_PP ? p.b.len[1] - o0 : MIO_PP);
#else
  const int planes = 1;
#endif
  const int tile = (int)blockIdx.y;
  const int h0 = (tile / (int)p.tiles_w) * MIO_TH, w0 = (tile % (int)p.tiles_w) * MIO_TW;
  for (int i = tid; i < planes * MIO_WPLANE; i += threads) {
    const int k = MIO_PP > 1 ? i % MIO_WPLANE : i;
    const int j = k / MIO_TAPS, f = k % MIO_TAPS;
    const int pl = MIO_PP > 1 ? i / MIO_WPLANE : 0;
    s_w[i] = mio_wtap(w, p.w, (o0 + pl) * MIO_R + j, f / (MIO_FY * MIO_FX),
                      (f / MIO_FX) % MIO_FY, f % MIO_FX);
  }
#if MIO_GATHER
  // first row / column of the read tensor any tap of this tile reaches (may be negative)
  const int rh0 = (int)mio_floordiv(h0 + p.pad_h - (MIO_FY - 1) * MIO_DH, MIO_SH);
  const int rw0 = (int)mio_floordiv(w0 + p.pad_w - (MIO_FX - 1) * MIO_DW, MIO_SW);
#else
  const int rh0 = h0 * MIO_SH - (int)p.pad_h;
  const int rw0 = w0 * MIO_SW - (int)p.pad_w;
#endif
#if MIO_NV > 1
  const bool chunked = mio_nchw_chunked(a, p.a);
#endif
  float acc[MIO_PP][MIO_PY];
#pragma unroll
  for (int pp = 0; pp < MIO_PP; ++pp) {
#pragma unroll
    for (int q = 0; q < MIO_PY; ++q) acc[pp][q] = 0.0f;
  }
  for (int j = 0; j < MIO_R; ++j) {
    const mio_index ci = (o0 * MIO_R + j) / MIO_M;  // the first plane's read channel
    const mio_t* an = a + n * p.a.stride[0] + ci * p.a.stride[1];
    for (int fz = 0; fz < MIO_FZ; ++fz) {
#if MIO_GATHER
      const int tz = od + (int)p.pad_d - fz * MIO_DD;
      if (tz < 0 || tz % MIO_SD) continue;  // uniform over the block
      const int id = tz / MIO_SD;
#else
      const int id = od * MIO_SD - (int)p.pad_d + fz * MIO_DD;
#endif
      if (id < 0 || id >= ad) continue;
      const mio_t* plane_in = an + id * p.a.stride[2];
      __syncthreads();  // the previous step is done with s_in
      // every plane's tile loaded before any is used: the loads of all planes in flight
#if MIO_NV > 1
      if (chunked) {
        mio_nchw_stage_chunks(plane_in, p, planes, o0, j, ci, rh0, rw0, tid, threads, s_in);
      } else
#endif
#if MIO_PP > 1
#pragma unroll 4
#endif
      for (int i = tid; i < planes * MIO_PLANE; i += threads) {
        const int e = MIO_PP > 1 ? i % MIO_PLANE : i;
        const int r = e / MIO_EW, c = e % MIO_EW;
        const int ih = rh0 + r, iw = rw0 + c;
#if MIO_PP > 1
        // this plane's read channel, counted from the first plane's
        const mio_index cd = ((o0 + i / MIO_PLANE) * MIO_R + j) / MIO_M - ci;
        const mio_t* src = plane_in + cd * p.a.stride[1];
#else
        const mio_t* src = plane_in;
#endif
        float v = 0.0f;
        if (ih >= 0 && ih < ah && iw >= 0 && iw < aw) {
          v = mio_load(src + ih * p.a.stride[3] + iw * p.a.stride[4]);
        }
        s_in[i] = v;
      }
      __syncthreads();
#pragma unroll
      for (int pp = 0; pp < MIO_PP; ++pp) {
        if (pp >= planes) break;  // uniform over the block
        const float* s_plane = s_in + pp * MIO_PLANE;
        const float* sw = s_w + pp * MIO_WPLANE + (j * MIO_FZ + fz) * MIO_FY * MIO_FX;
#pragma unroll
        for (int q = 0; q < MIO_PY; ++q) {
          const int row = ty + q * MIO_BY;
#if MIO_GATHER
          const int th = h0 + row + (int)p.pad_h - rh0 * MIO_SH;  // >= (FY-1)*DH
          const int tw = w0 + tx + (int)p.pad_w - rw0 * MIO_SW;
#pragma unroll
          for (int fy = 0; fy < MIO_FY; ++fy) {
            const int t = th - fy * MIO_DH;
            if (t % MIO_SH) continue;
            const float* srow = s_plane + (t / MIO_SH) * MIO_EW;
#pragma unroll
            for (int fx = 0; fx < MIO_FX; ++fx) {
              const int u = tw - fx * MIO_DW;
              if (u % MIO_SW) continue;
              acc[pp][q] += srow[u / MIO_SW] * sw[fy * MIO_FX + fx];
            }
          }
#else
#pragma unroll
          for (int fy = 0; fy < MIO_FY; ++fy) {
            const float* srow = s_plane + (row * MIO_SH + fy * MIO_DH) * MIO_EW + tx * MIO_SW;
#pragma unroll
            for (int fx = 0; fx < MIO_FX; ++fx) {
              acc[pp][q] += srow[fx * MIO_DW] * sw[fy * MIO_FX + fx];
            }
          }
#endif
        }
      }
    }
  }
#pragma unroll
  for (int pp = 0; pp < MIO_PP; ++pp) {
    if (pp >= planes) break;
    mio_t* out = b + n * p.b.stride[0] + (o0 + pp) * p.b.stride[1] + od * p.b.stride[2];
#pragma unroll
    for (int q = 0; q < MIO_PY; ++q) {
      const int hh = h0 + ty + q * MIO_BY, ww = w0 + tx;
      if (hh < bh && ww < bw) {
        mio_store(out + hh * p.b.stride[3] + ww * p.b.stride[4], acc[pp][q]);
      }
    }
  }
#undef MIO_PLANE
#undef MIO_WPLANE
}

// ---- backward weights -------------------------------------------------------------------------
#define MIO_SLOTS (MIO_TC * MIO_VEC)
#define MIO_CHUNK (MIO_SLOTS < 16 ? MIO_SLOTS : 16)

// dw[o, f] = sum over (n, dy pixel) of dy[n, o, pix] * x[n, o / M, pix * s - p + f * d]
// a = x, b = dy; part = NULL writes dw directly (one split).
MIO_KERNEL void dw_wrw(const mio_t* __restrict__ a, mio_t* __restrict__ w,
                       const mio_t* __restrict__ b, float* __restrict__ part, MioDwParams p) {
  __shared__ float s_red[MIO_CHUNK * 256];
  const int ct = (int)blockDim.x, pt = (int)blockDim.y;
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y;
  const int tid = ty * ct + tx, threads = ct * pt;
  const mio_index kout = p.b.len[1];
  const mio_index o0 = ((mio_index)blockIdx.y * ct + tx) * MIO_VEC;
  const int f0 = (int)blockIdx.z * MIO_TC;
  const int bd = (int)p.b.len[2], bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const int ad = (int)p.a.len[2], ah = (int)p.a.len[3], aw = (int)p.a.len[4];
  float acc[MIO_TC][MIO_VEC];
#pragma unroll
  for (int t = 0; t < MIO_TC; ++t)
#pragma unroll
    for (int e = 0; e < MIO_VEC; ++e) acc[t][e] = 0.0f;
  if (o0 < kout) {
    const mio_index ci = o0 / MIO_M;
#if MIO_PY > 1 || MIO_PIX > 1
    // Strips of MIO_PY rows x MIO_PIX columns of dy per item, every x row and column they
    // reach read once (the host sets MIO_TC = MIO_TAPS: tap indices are compile-time).
    const unsigned int gh_n = ((unsigned int)bh + MIO_PY - 1) / MIO_PY;
    for (mio_index it = (mio_index)blockIdx.x * pt + ty; it < p.items;
         it += (mio_index)p.split * pt) {
      unsigned int r = (unsigned int)it;  // items < 2^31 (host check): 32-bit division
      const int gw = (int)(r % (unsigned int)p.groups_w);
      r /= (unsigned int)p.groups_w;
      const int oh = (int)(r % gh_n) * MIO_PY;
      r /= gh_n;
      const int od = (int)(r % (unsigned int)bd);
      const mio_index n = r / (unsigned int)bd;
      const int ow0 = gw * MIO_PIX;
      const mio_t* bp = b + n * p.b.stride[0] + o0 * p.b.stride[1] + od * p.b.stride[2];
      float dy[MIO_PY][MIO_PIX][MIO_VEC];
#pragma unroll
      for (int qy = 0; qy < MIO_PY; ++qy) {
#pragma unroll
        for (int q = 0; q < MIO_PIX; ++q) {
          if (oh + qy < bh && ow0 + q < bw) {
            mio_loadv(bp + (oh + qy) * p.b.stride[3] + (ow0 + q) * p.b.stride[4], dy[qy][q]);
          } else {
#pragma unroll
            for (int e = 0; e < MIO_VEC; ++e) dy[qy][q][e] = 0.0f;
          }
        }
      }
      const mio_t* an = a + n * p.a.stride[0] + ci * p.a.stride[1];
      const int ih0 = oh * MIO_SH - (int)p.pad_h, iw0 = ow0 * MIO_SW - (int)p.pad_w;
#pragma unroll
      for (int fz = 0; fz < MIO_FZ; ++fz) {
        const int id = od * MIO_SD - (int)p.pad_d + fz * MIO_DD;
        if (id < 0 || id >= ad) continue;
#pragma unroll
        for (int rr = 0; rr < MIO_ROWS; ++rr) {
          const int ih = ih0 + rr;
          if (ih < 0 || ih >= ah) continue;
          const mio_t* row = an + id * p.a.stride[2] + ih * p.a.stride[3];
#pragma unroll
          for (int c = 0; c < MIO_WIN; ++c) {
            const int iw = iw0 + c;
            if (iw < 0 || iw >= aw) continue;
            float xv[MIO_VEC];
            mio_loadv(row + iw * p.a.stride[4], xv);
#pragma unroll
            for (int qy = 0; qy < MIO_PY; ++qy) {
              const int tyy = rr - qy * MIO_SH;  // compile-time after unrolling
              if (tyy < 0 || tyy % MIO_DH || tyy / MIO_DH >= MIO_FY) continue;
#pragma unroll
              for (int q = 0; q < MIO_PIX; ++q) {
                const int t = c - q * MIO_SW;
                if (t < 0 || t % MIO_DW || t / MIO_DW >= MIO_FX) continue;
                const int f = (fz * MIO_FY + tyy / MIO_DH) * MIO_FX + t / MIO_DW;
#pragma unroll
                for (int e = 0; e < MIO_VEC; ++e) acc[f][e] += dy[qy][q][e] * xv[e];
              }
            }
          }
        }
      }
    }
#else
#pragma unroll 2
    for (mio_index it = (mio_index)blockIdx.x * pt + ty; it < p.items;
         it += (mio_index)p.split * pt) {
      unsigned int r = (unsigned int)it;  // items < 2^31 (host check): 32-bit division
      const int ow = (int)(r % (unsigned int)bw);
      r /= (unsigned int)bw;
      const int oh = (int)(r % (unsigned int)bh);
      r /= (unsigned int)bh;
      const int od = (int)(r % (unsigned int)bd);
      const mio_index n = r / (unsigned int)bd;
      float dy[MIO_VEC];
      mio_loadv(b + n * p.b.stride[0] + o0 * p.b.stride[1] + od * p.b.stride[2] +
                    oh * p.b.stride[3] + ow * p.b.stride[4],
                dy);
      const mio_t* an = a + n * p.a.stride[0] + ci * p.a.stride[1];
      const int d0 = od * MIO_SD - (int)p.pad_d, hb = oh * MIO_SH - (int)p.pad_h;
      const int wb = ow * MIO_SW - (int)p.pad_w;
#pragma unroll
      for (int t = 0; t < MIO_TC; ++t) {
        const int f = f0 + t;
        if (f >= MIO_TAPS) break;
        const int id = d0 + (f / (MIO_FY * MIO_FX)) * MIO_DD;
        const int ih = hb + ((f / MIO_FX) % MIO_FY) * MIO_DH;
        const int iw = wb + (f % MIO_FX) * MIO_DW;
        if (id < 0 || id >= ad || ih < 0 || ih >= ah || iw < 0 || iw >= aw) continue;
        float xv[MIO_VEC];
        mio_loadv(an + id * p.a.stride[2] + ih * p.a.stride[3] + iw * p.a.stride[4], xv);
#pragma unroll
        for (int e = 0; e < MIO_VEC; ++e) acc[t][e] += dy[e] * xv[e];
      }
    }
#endif
  }
  // Sum over the pixel lanes, MIO_CHUNK slots at a time, in lane order (deterministic).
  const mio_index wcount = kout * MIO_TAPS;
#pragma unroll
  for (int c0 = 0; c0 < MIO_SLOTS; c0 += MIO_CHUNK) {
#pragma unroll
    for (int s = 0; s < MIO_CHUNK; ++s) {
      if (c0 + s < MIO_SLOTS) s_red[s * threads + tid] = acc[(c0 + s) / MIO_VEC][(c0 + s) % MIO_VEC];
    }
    __syncthreads();
    for (int i = tid; i < MIO_CHUNK * ct; i += threads) {
      const int s = i / ct, x = i % ct;
      const int slot = c0 + s;
      if (slot >= MIO_SLOTS) continue;
      float sum = 0.0f;
      for (int y = 0; y < pt; ++y) sum += s_red[s * threads + y * ct + x];
      const mio_index o = ((mio_index)blockIdx.y * ct + x) * MIO_VEC + slot % MIO_VEC;
      const int f = f0 + slot / MIO_VEC;
      if (o >= kout || f >= MIO_TAPS) continue;
      if (part) {
        part[(mio_index)blockIdx.x * wcount + o * MIO_TAPS + f] = sum;
      } else {
        mio_store(w + o * p.w.stride[0] + (f / (MIO_FY * MIO_FX)) * p.w.stride[2] +
                      ((f / MIO_FX) % MIO_FY) * p.w.stride[3] + (f % MIO_FX) * p.w.stride[4],
                  sum);
      }
    }
    __syncthreads();
  }
}

// Sums the p.split partials of every dw element. Block: 32 elements (threadIdx.x, one 128-byte
// row of partials per load) x blockDim.y split lanes; lane l sums splits l, l + blockDim.y, ...
// in that order and the lanes' sums meet in lane order, so the result is deterministic for a
// given split and block. (One thread walking every split serially waited on a chain of cache
// round trips: 22-32 us on layers whose main kernel ran for 45.) Stores the element type.
MIO_KERNEL void dw_wrw_reduce(mio_t* __restrict__ w, const float* __restrict__ part,
                              MioDwParams p) {
  __shared__ float s_sum[32][33];
  const mio_index wcount = p.b.len[1] * MIO_TAPS;
  const int tx = (int)threadIdx.x, ty = (int)threadIdx.y, lanes = (int)blockDim.y;
  for (mio_index base = (mio_index)blockIdx.x * 32; base < wcount;
       base += (mio_index)gridDim.x * 32) {  // uniform across the block
    const mio_index i = base + tx;
    float sum = 0.0f;
    if (i < wcount) {
#pragma unroll 4
      for (mio_index s = ty; s < p.split; s += lanes) sum += part[s * wcount + i];
    }
    s_sum[ty][tx] = sum;
    __syncthreads();
    if (ty == 0 && i < wcount) {
      float total = 0.0f;
      for (int l = 0; l < lanes; ++l) total += s_sum[l][tx];
      const mio_index o = i / MIO_TAPS;
      const int f = (int)(i % MIO_TAPS);
      mio_store(w + o * p.w.stride[0] + (f / (MIO_FY * MIO_FX)) * p.w.stride[2] +
                    ((f / MIO_FX) % MIO_FY) * p.w.stride[3] + (f % MIO_FX) * p.w.stride[4],
                total);
    }
    __syncthreads();
  }
}

// ---- backward weights through staged tiles (2-D, channels innermost, M == 1) ---------------
// dw_wrw_tile: block (MIO_CB channels x MIO_FY filter rows); thread (c, fy) keeps the MIO_FX
// taps of filter row fy of channel c0 + c in registers. With MIO_PG > 0 the block is
// (MIO_CB channels x MIO_PG row groups) instead: a thread keeps every tap of its channel and
// takes every MIO_PG-th dy row of the tile (a dy value then feeds all the taps, and each x
// value the taps of every filter row it meets); the groups' sums meet in shared memory. Per item (image, tile of MIO_TP x
// MIO_TQ dy pixels) the block stages the dy tile and the x tile it reaches (halo included,
// zeros outside the image) in shared memory as floats, then each thread walks its rows: one dy
// value feeds MIO_FX multiply-adds, and the unrolled column loop reads each staged x value
// once per thread (the compiler reuses it across taps). Same partials and reduction as dw_wrw.
#if MIO_WRW_TILE  // compiled only where asked: its staged tiles may not fit other geometries
#ifndef MIO_CB
#define MIO_CB 32
#endif
#ifndef MIO_TP
#define MIO_TP 2
#endif
#ifndef MIO_TQ
#define MIO_TQ 32
#endif
#ifndef MIO_PG
#define MIO_PG 0
#endif
#ifndef MIO_TMA
#define MIO_TMA 0
#endif
#if MIO_TMA
#include "miocore_tma.h"
#endif
#ifndef MIO_WV
#define MIO_WV 1
#endif
#if MIO_CB % MIO_WV || (MIO_WV > 1 && !MIO_TMA)
#error "dw_wrw_tile: MIO_WV divides MIO_CB, and is 1 without MIO_TMA"
#endif
#define MIO_CLANES (MIO_CB / MIO_WV)  // channel lanes of a block (blockDim.x)
#if MIO_PG  // row groups: a thread holds every tap and every MIO_PG-th dy row of the tile
#define MIO_RT MIO_FY
#define MIO_LANES MIO_PG
#else  // a thread per filter row, every dy row of the tile
#define MIO_RT 1
#define MIO_LANES MIO_FY
#endif
#define MIO_XTP ((MIO_TP - 1) * MIO_SH + (MIO_FY - 1) * MIO_DH + 1)
#define MIO_XTQ ((MIO_TQ - 1) * MIO_SW + (MIO_FX - 1) * MIO_DW + 1)

// MIO_VEC elements as loaded, not yet converted: a tile's loads are all issued before the
// block computes on the previous tile, and converted only after that (a warp issues in order,
// so a conversion right after its load would wait out the load's latency there).
struct MioRawVec {
#if MIO_VBYTES % 4 == 0
  unsigned int u[MIO_VBYTES / 4];
#else
  mio_t e[MIO_VEC];
#endif
};

MIO_DEVICE void mio_load_raw(const mio_t* p, MioRawVec& r) {
#if MIO_VBYTES % 16 == 0
#pragma unroll
  for (int i = 0; i < MIO_VBYTES / 16; ++i) {
    const uint4 q = ((const uint4*)p)[i];
    r.u[4 * i] = q.x;
    r.u[4 * i + 1] = q.y;
    r.u[4 * i + 2] = q.z;
    r.u[4 * i + 3] = q.w;
  }
#elif MIO_VBYTES == 8
  const uint2 q = *(const uint2*)p;
  r.u[0] = q.x;
  r.u[1] = q.y;
#elif MIO_VBYTES == 4
  r.u[0] = *(const unsigned int*)p;
#else
#pragma unroll
  for (int k = 0; k < MIO_VEC; ++k) r.e[k] = p[k];
#endif
}

MIO_DEVICE void mio_raw_zero(MioRawVec& r) {
#if MIO_VBYTES % 4 == 0
#pragma unroll
  for (int i = 0; i < MIO_VBYTES / 4; ++i) r.u[i] = 0u;  // all-zero bits: +0.0 in every dtype
#else
#pragma unroll
  for (int k = 0; k < MIO_VEC; ++k) r.e[k] = (mio_t)0;
#endif
}

MIO_DEVICE void mio_raw_floats(const MioRawVec& r, float* v) {
#if MIO_VBYTES % 4 == 0
  mio_unpack(r.u, MIO_VBYTES / 4, v);
#else
#pragma unroll
  for (int k = 0; k < MIO_VEC; ++k) v[k] = mio_load(&r.e[k]);
#endif
}

// A tile of ROWS x COLS pixels of MIO_CB channels of one image in flight: thread tid holds
// the channel vectors tid, tid + THREADS, ... of the tile (pixel-major, channels innermost).
template <int ROWS, int COLS, int THREADS>
struct DwTileLoad {
  static constexpr int cvecs = MIO_CB / MIO_VEC;
  static constexpr int count = ROWS * COLS * cvecs;
  static constexpr int per_thread = (count + THREADS - 1) / THREADS;
  MioRawVec r[per_thread];

  // Issues the loads of the tile from row h0 and column w0 of ``src`` (the image's first
  // channel of the block); zeros outside the image's rows and columns and past the last
  // channel.
  MIO_DEVICE void fetch(const mio_t* src, const MioTensor5& t, int h0, int w0, int rows,
                        int cols, mio_index chans_left, int tid) {
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = tid + i * THREADS;
      const int cv = e % cvecs, pix = e / cvecs;
      const int h = h0 + pix / COLS, x = w0 + pix % COLS;
      if (e < count && h >= 0 && h < rows && x >= 0 && x < cols && cv * MIO_VEC < chans_left) {
        mio_load_raw(src + (mio_index)cv * MIO_VEC * t.stride[1] + h * t.stride[3] +
                         x * t.stride[4],
                     r[i]);
      } else {
        mio_raw_zero(r[i]);
      }
    }
  }

  // Writes the tile into s[pixel * MIO_CB + channel] as floats.
  MIO_DEVICE void put(float* s, int tid) const {
#pragma unroll
    for (int i = 0; i < per_thread; ++i) {
      const int e = tid + i * THREADS;
      if (e >= count) break;
      float v[MIO_VEC];
      mio_raw_floats(r[i], v);
      const int cv = e % cvecs, pix = e / cvecs;
#pragma unroll
      for (int k = 0; k < MIO_VEC; ++k) s[pix * MIO_CB + cv * MIO_VEC + k] = v[k];
    }
  }
};

// A staged value as a float: the register-staged tiles hold floats, the TMA-staged ones the
// elements as they lie in memory.
MIO_DEVICE float wrw_staged(const float* p) { return *p; }
#if MIO_TMA && !defined(MIO_DTYPE_FP32)
MIO_DEVICE float wrw_staged(const mio_t* p) { return mio_load(p); }
#endif

#if MIO_WV > 1
#define MIO_WBYTES (MIO_WV * MIO_ESIZE)
// MIO_WV staged channels as floats: one 4-, 8- or 16-byte shared load.
MIO_DEVICE void wrw_staged_v(const mio_t* p, float* v) { mio_load_words<MIO_WBYTES>(p, v); }
#endif

// One item's multiply-adds from its staged x tile (sx) and dy tile (sdy): thread (c, lane)
// walks its dy rows, one dy value feeding MIO_FX taps of each of its filter rows (MIO_WV
// adjacent channels from c).
template <class T>
MIO_DEVICE void dw_wrw_tile_item(const T* sx, const T* sdy, float (&acc)[MIO_RT][MIO_FX][MIO_WV],
                                 int c, int lane) {
#if MIO_WV > 1
#if MIO_PG  // several row groups a warp: each thread walks its own rows
  for (int py = lane; py < MIO_TP; py += MIO_PG) {
#else
#pragma unroll
  for (int py = 0; py < MIO_TP; ++py) {
#endif
    const T* dr = sdy + py * MIO_TQ * MIO_CB + c;
#pragma unroll
    for (int q = 0; q < MIO_TQ; ++q) {
      float d[MIO_WV];
      wrw_staged_v(dr + q * MIO_CB, d);
#pragma unroll
      for (int rt = 0; rt < MIO_RT; ++rt) {
        const int fr = MIO_PG ? rt : lane;
        const T* xr = sx + (py * MIO_SH + fr * MIO_DH) * MIO_XTQ * MIO_CB + c;
#pragma unroll
        for (int s = 0; s < MIO_FX; ++s) {
          float xv[MIO_WV];
          wrw_staged_v(xr + (q * MIO_SW + s * MIO_DW) * MIO_CB, xv);
#pragma unroll
          for (int v = 0; v < MIO_WV; ++v) acc[rt][s][v] += d[v] * xv[v];
        }
      }
    }
  }
#else
#pragma unroll
  for (int py = 0; py < MIO_TP; ++py) {
#if MIO_PG
    if (py % MIO_PG != lane) continue;  // uniform in a warp: blockDim.x >= 32
#endif
    const T* dr = sdy + py * MIO_TQ * MIO_CB + c;
#pragma unroll
    for (int q = 0; q < MIO_TQ; ++q) {
      const float d = wrw_staged(dr + q * MIO_CB);
#pragma unroll
      for (int rt = 0; rt < MIO_RT; ++rt) {
        const int fr = MIO_PG ? rt : lane;  // the filter row of these taps
        const T* xr = sx + (py * MIO_SH + fr * MIO_DH) * MIO_XTQ * MIO_CB + c;
#pragma unroll
        for (int s = 0; s < MIO_FX; ++s)
          acc[rt][s][0] += d * wrw_staged(xr + (q * MIO_SW + s * MIO_DW) * MIO_CB);
      }
    }
  }
#endif
}

MIO_KERNEL void dw_wrw_tile(
#if MIO_TMA
    const __grid_constant__ MioTensorMap x_map, const __grid_constant__ MioTensorMap dy_map,
#endif
    const mio_t* __restrict__ a, mio_t* __restrict__ w, const mio_t* __restrict__ b,
    float* __restrict__ part, MioDwParams p) {
#if MIO_TMA
  // two items' x and dy tiles as they lie in memory, each tile on a 128-byte boundary; after
  // the items, the row groups' sums (floats) in the same bytes
  constexpr int x_bytes = (MIO_XTP * MIO_XTQ * MIO_CB * (int)sizeof(mio_t) + 127) / 128 * 128;
  constexpr int dy_bytes = (MIO_TP * MIO_TQ * MIO_CB * (int)sizeof(mio_t) + 127) / 128 * 128;
  __shared__ __align__(128) unsigned char s_raw[2][x_bytes + dy_bytes];
  __shared__ unsigned long long s_full[2];  // a buffer's two copies have landed
  float* const s_x = (float*)&s_raw[0][0];
#else
  __shared__ float s_x[MIO_XTP * MIO_XTQ * MIO_CB];
  __shared__ float s_dy[MIO_TP * MIO_TQ * MIO_CB];
#endif
  constexpr int threads = MIO_CLANES * MIO_LANES;
  const int c = (int)threadIdx.x * MIO_WV, lane = (int)threadIdx.y;  // c: the first channel
  const int tid = lane * MIO_CLANES + (int)threadIdx.x;
  const mio_index chans = p.b.len[1];
  const mio_index c0 = (mio_index)blockIdx.y * MIO_CB;
  const int bh = (int)p.b.len[3], bw = (int)p.b.len[4];
  const int ah = (int)p.a.len[3], aw = (int)p.a.len[4];
  const unsigned int tiles_w = (unsigned int)((bw + MIO_TQ - 1) / MIO_TQ);
  const unsigned int tiles_h = (unsigned int)((bh + MIO_TP - 1) / MIO_TP);
  float acc[MIO_RT][MIO_FX][MIO_WV];
#pragma unroll
  for (int r = 0; r < MIO_RT; ++r)
#pragma unroll
    for (int s = 0; s < MIO_FX; ++s)
#pragma unroll
      for (int v = 0; v < MIO_WV; ++v) acc[r][s][v] = 0.0f;
#if MIO_TMA
  (void)threads;
  // The next item's tiles copied into the other buffer while the block computes on this one.
  const auto issue = [&](mio_index it, int buf) {
    unsigned int r = (unsigned int)it;  // items < 2^31 (host check)
    const int ow0 = (int)(r % tiles_w) * MIO_TQ;
    r /= tiles_w;
    const int oh0 = (int)(r % tiles_h) * MIO_TP;
    const int n = (int)(r / tiles_h);
    const int ih0 = oh0 * MIO_SH - (int)p.pad_h, iw0 = ow0 * MIO_SW - (int)p.pad_w;
    fence_proxy_async_shared();  // the block's reads of this buffer (a barrier back) first
    bar_expect(&s_full[buf], (MIO_XTP * MIO_XTQ + MIO_TP * MIO_TQ) * MIO_CB * sizeof(mio_t));
    tma_load_4d(s_raw[buf], &x_map, &s_full[buf], (int)c0, iw0, ih0, n);
    tma_load_4d(s_raw[buf] + x_bytes, &dy_map, &s_full[buf], (int)c0, ow0, oh0, n);
  };
  if (tid == 0) {
    bar_init(&s_full[0], 1);
    bar_init(&s_full[1], 1);
    bar_init_fence();
  }
  __syncthreads();
  if (tid == 0 && (mio_index)blockIdx.x < p.items) issue(blockIdx.x, 0);
  int k = 0;  // this block's items so far: buffer k % 2, its (k / 2)-th copy
  for (mio_index it = blockIdx.x; it < p.items; it += p.split, ++k) {
    const int buf = k & 1;
    if (tid == 0 && it + p.split < p.items) issue(it + p.split, buf ^ 1);
    bar_wait(&s_full[buf], (unsigned)(k >> 1) & 1u);
    dw_wrw_tile_item((const mio_t*)s_raw[buf], (const mio_t*)(s_raw[buf] + x_bytes), acc, c,
                     lane);
    __syncthreads();  // every thread done with this buffer before it is staged again
  }
#else
  // Software pipeline: the next item's tiles are loaded into registers while the block
  // computes on the current one from shared memory.
  DwTileLoad<MIO_XTP, MIO_XTQ, threads> next_x;
  DwTileLoad<MIO_TP, MIO_TQ, threads> next_dy;
  const auto fetch = [&](mio_index it) {
    unsigned int r = (unsigned int)it;  // items < 2^31 (host check)
    const int ow0 = (int)(r % tiles_w) * MIO_TQ;
    r /= tiles_w;
    const int oh0 = (int)(r % tiles_h) * MIO_TP;
    const mio_index n = r / tiles_h;
    const int ih0 = oh0 * MIO_SH - (int)p.pad_h, iw0 = ow0 * MIO_SW - (int)p.pad_w;
    next_x.fetch(a + n * p.a.stride[0] + c0 * p.a.stride[1], p.a, ih0, iw0, ah, aw, chans - c0,
                 tid);
    next_dy.fetch(b + n * p.b.stride[0] + c0 * p.b.stride[1], p.b, oh0, ow0, bh, bw,
                  chans - c0, tid);
  };
  if ((mio_index)blockIdx.x < p.items) fetch(blockIdx.x);
  for (mio_index it = blockIdx.x; it < p.items; it += p.split) {
    __syncthreads();  // the previous item's reads are done
    next_x.put(s_x, tid);
    next_dy.put(s_dy, tid);
    __syncthreads();
    if (it + p.split < p.items) fetch(it + p.split);
    dw_wrw_tile_item(s_x, s_dy, acc, c, lane);
  }
#endif
  const mio_index wcount = chans * MIO_TAPS;
#if MIO_PG
  // Sum the row groups' taps in lane order through shared memory (the x tile is free now;
  // the host checks MIO_PG * MIO_TAPS <= MIO_XTP * MIO_XTQ).
  __syncthreads();
#pragma unroll
  for (int rt = 0; rt < MIO_RT; ++rt)
#pragma unroll
    for (int s = 0; s < MIO_FX; ++s)
#pragma unroll
      for (int v = 0; v < MIO_WV; ++v)
        s_x[(lane * MIO_TAPS + rt * MIO_FX + s) * MIO_CB + c + v] = acc[rt][s][v];
  __syncthreads();
#pragma unroll
  for (int v = 0; v < MIO_WV; ++v) {
    const mio_index o = c0 + c + v;
    if (o >= chans) return;
    for (int f = lane; f < MIO_TAPS; f += MIO_PG) {
      float sum = 0.0f;
      for (int l = 0; l < MIO_PG; ++l) sum += s_x[(l * MIO_TAPS + f) * MIO_CB + c + v];
      if (part) {
        part[(mio_index)blockIdx.x * wcount + o * MIO_TAPS + f] = sum;
      } else {
        mio_store(w + o * p.w.stride[0] + (f / MIO_FX) * p.w.stride[3] +
                      (f % MIO_FX) * p.w.stride[4],
                  sum);
      }
    }
  }
#else
#pragma unroll
  for (int v = 0; v < MIO_WV; ++v) {
    const mio_index o = c0 + c + v;
    if (o >= chans) return;
#pragma unroll
    for (int s = 0; s < MIO_FX; ++s) {
      const int f = lane * MIO_FX + s;
      if (part) {
        part[(mio_index)blockIdx.x * wcount + o * MIO_TAPS + f] = acc[0][s][v];
      } else {
        mio_store(w + o * p.w.stride[0] + lane * p.w.stride[3] + s * p.w.stride[4],
                  acc[0][s][v]);
      }
    }
  }
#endif
}
#endif  // MIO_WRW_TILE
