// igemm.gpu_wgmma_wrw: backward weights as an implicit GEMM on Hopper's warpgroup tensor cores
// (sm_90a: wgmma fed by the tensor memory accelerator), channels-last fp16/bf16, fp32 sums.
//
//   dW[k, fy, fx, c] = sum_(n, oh, ow) dY[n, oh, ow, k] * X[n, oh*sh - ph + fy*dh, ow*sw - pw + fx*dw, c]
//
// A work unit is a tile of MIO_BM output channels (k) by MIO_BN input channels (c) of one
// filter tap, and one part of its sum over the output pixels (split-K). The sum runs over
// boxes of exactly 64 output pixels, tn images x th rows x tw columns: for a box, the slice
// of dY is one TMA box (64 pixels x 64 k, per 64 channels of the tile) and the slice of X is
// one TMA box at the box's origin moved by the tap, the convolution's stride done by the
// tensor map's element strides. The hardware writes zeros where a box leaves its tensor (the
// padding, pixels past the image or the batch), so a pixel outside the output adds nothing and
// the loop has no masks. Both slices land pixel-major (k or c contiguous in 128-byte swizzled
// rows), so wgmma reads both operands MN-major (its transpose-A and transpose-B forms).
//
// One producer warpgroup (one thread issues every load into a MIO_STAGES-deep ring, each
// stage guarded by a "full" and an "empty" mbarrier) and two consumer warpgroups. With
// MIO_BM 128 each consumer multiplies 64 of the tile's k by all its c; with MIO_BM 64 and
// MIO_BN 128 or 256 both take the same 64 k and half the c each; with a 64 x 64 tile, or a
// 64 x 192 one over three taps (MIO_HALVES), each takes the whole tile and every other stage
// of the ring (a slot always goes to the same consumer: the depth is even), and each stores
// its own sums. Blocks are persistent: one per SM walks the units. A unit's sums go straight
// to the filter (one part, a filter with c contiguous) or, as fp32, to the part's slab of the
// workspace (MIO_HALVES: one slab per consumer), which igemm_wgmma_wrw_reduce adds up in
// order (deterministic) and writes through the filter's strides.
//
// 3-D problems (MIO_3D): the pixel box gains a depth (tn images x td planes x th rows x tw
// columns, 64 pixels in all), both tensor maps a dimension, and the taps run over (fz, fy, fx).
//
// Tiles over several taps (MIO_SPAN 2, 3 or 4, layers of at most 64 input channels): the tile's
// MIO_BN = 64 x MIO_SPAN columns are MIO_SPAN consecutive taps of all the channels, one 64-channel
// box of X per tap at the box's origin moved by that tap, so each dY slice feeds the taps of a
// whole tile instead of one (a 64-channel layer otherwise gets only 64 x 64 tiles of one tap,
// whose small wgmma instructions load more operands per product). A last group short of taps
// loads its first tap again and stores nothing of it.
//
// Fix-up (MIO_FIXUP): the reduce kernel's work done by the parts themselves. Each unit publishes
// its slab and counts itself in on its tile's counter (workspace after the slabs, zeroed before
// the launch); the last part of a tile to arrive adds the tile's slabs in part order (the same
// sums, in the same order, as the reduce) and stores them through the filter's strides, while
// other tiles still compute. No reduce launch, no pass over every slab after the last unit.
//
// Stream-K (MIO_STREAMK): instead of units of equal parts, each block takes an equal share of
// all the tiles' pixel boxes, tile after tile (igemm_wgmma_wrw_streamk.h), and sums each
// tile's piece into the slab of its contributor number; the reduce adds each tile's
// contributors. ``split`` then holds the grid's block count and ``direct`` is 0.
//
// Compile-time: MIO_BM (64, 128), MIO_BN (64, 128, 256; 192 over 3 taps), MIO_STAGES, MIO_3D,
// MIO_SPAN, MIO_STREAMK, MIO_FIXUP, MIO_DTYPE_FP16 or MIO_DTYPE_BF16. Every size and the pixel
// box are run-time arguments: one binary per tile and depth serves every problem.
#include "igemm_wgmma_ops.h"
#include "igemm_wgmma_sync.h"
#include "igemm_wgmma_wrw_streamk.h"

#ifndef MIO_BM
#define MIO_BM 128
#endif
#ifndef MIO_BN
#define MIO_BN 128
#endif
#ifndef MIO_STAGES
#define MIO_STAGES 6
#endif
#ifndef MIO_3D
#define MIO_3D 0  // 1: 3-D problems (a depth in the pixel box, the taps and the strides)
#endif
#ifndef MIO_SPAN
#define MIO_SPAN 1  // taps a tile's columns span (2, 3, 4: one 64-channel box per tap)
#endif
#ifndef MIO_STREAMK
#define MIO_STREAMK 0  // 1: equal shares of every tile's boxes per block (stream-K)
#endif
#ifndef MIO_FIXUP
#define MIO_FIXUP 0  // 1: the last part of a tile adds the parts' slabs (no reduce kernel)
#endif
#if MIO_FIXUP && MIO_STREAMK
#error "stream-K's contributors are added by the reduce kernel"
#endif
#if MIO_SPAN > 1 && MIO_BN != 64 * MIO_SPAN
#error "a tile over MIO_SPAN taps is 64 x MIO_SPAN columns wide"
#endif
#if defined(MIO_DTYPE_TF32)
#error "wgmma reads TF32 operands K-major only: backward weights needs both MN-major"
#endif
#if MIO_BM != 128 && MIO_BM != 64
#error "MIO_BM is 64 or 128"
#endif
// the consumers take alternate stages: a 64-wide tile (no column halves), or three taps
// (halves of 96 columns would split a tap's channels)
#define MIO_HALVES (MIO_BM == 64 && (MIO_BN == 64 || MIO_BN == 192))
#if MIO_HALVES && MIO_STAGES % 2
#error "alternate stages need an even depth: each slot keeps its consumer"
#endif

#define MIO_ROW 128                 // bytes of a slice's row: 64 channels of one pixel
#define MIO_PIXELS 64               // pixels of a slice: the reduction step
#define MIO_CHUNK (MIO_PIXELS * MIO_ROW)  // one TMA box: 64 pixels x 64 channels, 8 KiB
#define MIO_A_BYTES (MIO_BM / 64 * MIO_CHUNK)
#define MIO_B_BYTES (MIO_BN / 64 * MIO_CHUNK)
#define MIO_STAGE_BYTES (MIO_A_BYTES + MIO_B_BYTES)
// a consumer's columns (c): a literal, pasted into the wgmma wrapper's name
#if MIO_BM == 128 || MIO_HALVES
#define MIO_CN MIO_BN
#elif MIO_BN == 256
#define MIO_CN 128
#else
#define MIO_CN 64
#endif
#define MIO_ACC (MIO_CN / 2)

#if defined(MIO_DTYPE_BF16)
#define MIO_WGMMA_TAB_(n) mio_wgmma_n##n##_bf16_tab
#else
#define MIO_WGMMA_TAB_(n) mio_wgmma_n##n##_f16_tab
#endif
#define MIO_WGMMA_TAB(n) MIO_WGMMA_TAB_(n)

// Everything but the tile configuration, per problem (passed by value).
struct MioWrwGeom {
  int n, p, q, k, c;          // images, output rows, columns, output and input channels
  int r, s;                   // filter rows and columns
  int sh, sw, ph, pw, dh, dw;
  int tw, th, tn;             // the pixel box: tw * th * tn == 64
  int tiles_q, tiles_p, boxes;  // boxes along a row, down an image, in all
  int split;                  // parts of the pixel sum (MIO_STREAMK: the grid's blocks)
  int direct;                 // 1: sums stored straight into the filter (split 1, c contiguous)
  int slabs;                  // fp32 slabs the reduce adds: split, twice that for 64 x 64
  long long w_sk, w_sr, w_ss, w_sc;  // the filter's strides (elements)
  long long slab;             // fp32 sums per part: k * [t *] r * s * c
#if MIO_3D
  int o, t, sd, pd, dd;       // output depth, filter depth, depth stride, pad, dilation
  int td, tiles_d, unused;    // the pixel box's planes, boxes along the depth
  long long w_st;             // the filter's depth stride (elements)
#endif
};

#if MIO_3D
#define MIO_TAPS(g) ((g).t * (g).r * (g).s)
#else
#define MIO_TAPS(g) ((g).r * (g).s)
#endif

__device__ __forceinline__ void keep(float* d) {
#pragma unroll
  for (int i = 0; i < MIO_ACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// Where unit ``u`` lies: k tiles vary fastest (the blocks that read the same X slices run
// together), then c tiles, taps and parts.
struct MioWrwUnit {
  int k0, c0, fy, fx, lo, hi, part;
  int tap0;  // the first tap of the tile (its only one unless MIO_SPAN > 1)
#if MIO_3D
  int fz;
#endif
};

// Tap groups of a tile's columns: every tap alone, or MIO_SPAN consecutive taps together.
#define MIO_TAP_GROUPS(g) ((MIO_TAPS(g) + MIO_SPAN - 1) / MIO_SPAN)

// The input offsets (depth, rows, columns) of filter tap ``tap``.
struct MioTapOffset {
  int d, h, w;
};

__device__ __forceinline__ MioTapOffset tap_offset(const MioWrwGeom& g, int tap) {
  MioTapOffset o;
  o.w = (tap % g.s) * g.dw - g.pw;
  o.h = ((tap / g.s) % g.r) * g.dh - g.ph;
#if MIO_3D
  o.d = (tap / g.s / g.r) * g.dd - g.pd;
#else
  o.d = 0;
#endif
  return o;
}

__device__ __forceinline__ MioWrwUnit unit_at(const MioWrwGeom& g, int u, int tiles_k,
                                              int tiles_c) {
  MioWrwUnit at;
  at.k0 = (u % tiles_k) * MIO_BM;
  u /= tiles_k;
  at.c0 = (u % tiles_c) * MIO_BN;  // 0 over several taps (tiles_c == 1)
  u /= tiles_c;
  const int tap = (u % MIO_TAP_GROUPS(g)) * MIO_SPAN;
  at.part = u / MIO_TAP_GROUPS(g);
  at.tap0 = tap;
#if MIO_3D
  at.fz = tap / g.s / g.r;
#endif
  at.fy = (tap / g.s) % g.r;
  at.fx = tap % g.s;
  at.lo = (int)((long long)at.part * g.boxes / g.split);
  at.hi = (int)((long long)(at.part + 1) * g.boxes / g.split);
  return at;
}

// Tiles of a launch: k tiles x c tiles x tap groups.
__device__ __forceinline__ long long tile_count(const MioWrwGeom& g, int tiles_k, int tiles_c) {
  return (long long)tiles_k * tiles_c * MIO_TAP_GROUPS(g);
}

#if MIO_STREAMK
// This block's ``index``-th segment of its share: the tile's place, its boxes [lo, hi) and its
// contributor number (``part``); false past the last.
__device__ __forceinline__ bool segment_at(const MioWrwGeom& g, int tiles_k, int tiles_c,
                                           int index, MioWrwUnit& at) {
  MioSkSegment s;
  if (!mio_sk_segment(tile_count(g, tiles_k, tiles_c), g.boxes, gridDim.x, blockIdx.x, index,
                      &s)) {
    return false;
  }
  at = unit_at(g, (int)s.tile, tiles_k, tiles_c);  // the tile's place (part 0 of it)
  at.lo = s.lo;
  at.hi = s.hi;
  at.part = s.ordinal;
  return true;
}
// The loop over this block's work ``at``: the segments of its share
#define MIO_FOR_EACH_WORK(at) \
  MioWrwUnit at;              \
  for (int work_ = 0; segment_at(g, tiles_k, tiles_c, work_, at); ++work_)
#else
// The loop over this block's work ``at``: units blockIdx.x, + gridDim.x, ... (a tile and one
// part of its sum)
#define MIO_FOR_EACH_WORK(at)                                         \
  for (int u_ = blockIdx.x; u_ < units; u_ += gridDim.x)              \
    if (const MioWrwUnit at = unit_at(g, u_, tiles_k, tiles_c); true)
#endif

// The filter's (k, tap, c) and (k, tap, c + 1), converted: one paired store where c is
// contiguous and the strides even (``paired``), else two through the channel stride.
__device__ __forceinline__ void store_filter(mio_elem* __restrict__ w, const MioWrwGeom& g,
                                             long long k, int tap, int c, bool paired, float lo,
                                             float hi) {
#if MIO_3D
  mio_elem* at = w + k * g.w_sk + (tap / g.s / g.r) * g.w_st + (tap / g.s % g.r) * g.w_sr +
                 (tap % g.s) * g.w_ss;
#else
  mio_elem* at = w + k * g.w_sk + (tap / g.s) * g.w_sr + (tap % g.s) * g.w_ss;
#endif
  if (paired) {
    store_pair(at + c, lo, hi);
  } else {
    alignas(4) mio_elem pair[2];
    store_pair(pair, lo, hi);  // converted as the paired stores round
    at[c * g.w_sc] = pair[0];
    at[(c + 1) * g.w_sc] = pair[1];
  }
}

// Whether the filter takes paired stores: c contiguous, every other stride even.
__device__ __forceinline__ bool filter_paired(const MioWrwGeom& g) {
#if MIO_3D
  return g.w_sc == 1 && ((g.w_sk | g.w_st | g.w_sr | g.w_ss) & 1) == 0;
#else
  return g.w_sc == 1 && ((g.w_sk | g.w_sr | g.w_ss) & 1) == 0;
#endif
}

extern "C" __global__ void __launch_bounds__(384, 1)
    igemm_wgmma_wrw(const __grid_constant__ MioTensorMap x_map,
                    const __grid_constant__ MioTensorMap dy_map, mio_elem* __restrict__ w,
                    float* __restrict__ part, const MioWrwGeom g) {
  extern __shared__ __align__(1024) unsigned char dyn[];
  __shared__ unsigned long long full[MIO_STAGES], empty[MIO_STAGES];
  // the swizzle pattern repeats every 1024 bytes: the ring starts on such a boundary
  unsigned char* ring = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(dyn) + 1023) & ~1023ull);

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int tiles_k = (g.k + MIO_BM - 1) / MIO_BM;
  const int tiles_c = MIO_SPAN > 1 ? 1 : (g.c + MIO_BN - 1) / MIO_BN;
#if !MIO_STREAMK
  const int units = (int)tile_count(g, tiles_k, tiles_c) * g.split;
#endif

  if (tid == 0) {
    for (int i = 0; i < MIO_STAGES; ++i) {
      bar_init(&full[i], 1);
      bar_init(&empty[i], MIO_HALVES ? 1 : 2);  // the consumers that read the stage
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&x_map))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&dy_map))
                   : "memory");
      int it = 0;  // slices loaded over all this block's units: the ring's position
      MIO_FOR_EACH_WORK(at) {
        const int hoff = at.fy * g.dh - g.ph, woff = at.fx * g.dw - g.pw;
#if MIO_3D
        const int doff = at.fz * g.dd - g.pd;
        int bq = at.lo % g.tiles_q, bp = (at.lo / g.tiles_q) % g.tiles_p;
        int bd = (at.lo / g.tiles_q / g.tiles_p) % g.tiles_d;
        int bn = at.lo / g.tiles_q / g.tiles_p / g.tiles_d;
#else
        int bq = at.lo % g.tiles_q, bp = (at.lo / g.tiles_q) % g.tiles_p;
        int bn = at.lo / g.tiles_q / g.tiles_p;
#endif
        for (int box = at.lo; box < at.hi; ++box, ++it) {
          const int slot = it % MIO_STAGES;
          if (it >= MIO_STAGES) bar_wait(&empty[slot], ((it / MIO_STAGES) - 1) & 1);
          unsigned char* a = ring + slot * MIO_STAGE_BYTES;
          bar_expect(&full[slot], MIO_STAGE_BYTES);
          const int q0 = bq * g.tw, p0 = bp * g.th, n0 = bn * g.tn;
#if MIO_3D
          const int o0 = bd * g.td;
#pragma unroll
          for (int chunk = 0; chunk < MIO_BM / 64; ++chunk) {
            tma_load_5d(a + chunk * MIO_CHUNK, &dy_map, &full[slot], at.k0 + chunk * 64, q0, p0,
                        o0, n0);
          }
#pragma unroll
          for (int chunk = 0; chunk < MIO_BN / 64; ++chunk) {
            if (MIO_SPAN > 1) {  // tap tap0 + chunk (the first again past the last tap)
              const int t = at.tap0 + chunk < MIO_TAPS(g) ? at.tap0 + chunk : at.tap0;
              const MioTapOffset o = tap_offset(g, t);
              tma_load_5d(a + MIO_A_BYTES + chunk * MIO_CHUNK, &x_map, &full[slot], 0,
                          q0 * g.sw + o.w, p0 * g.sh + o.h, o0 * g.sd + o.d, n0);
            } else {
              tma_load_5d(a + MIO_A_BYTES + chunk * MIO_CHUNK, &x_map, &full[slot],
                          at.c0 + chunk * 64, q0 * g.sw + woff, p0 * g.sh + hoff,
                          o0 * g.sd + doff, n0);
            }
          }
          if (++bq == g.tiles_q) {
            bq = 0;
            if (++bp == g.tiles_p) {
              bp = 0;
              if (++bd == g.tiles_d) {
                bd = 0;
                ++bn;
              }
            }
          }
#else
#pragma unroll
          for (int chunk = 0; chunk < MIO_BM / 64; ++chunk) {
            tma_load_4d(a + chunk * MIO_CHUNK, &dy_map, &full[slot], at.k0 + chunk * 64, q0, p0,
                        n0);
          }
#pragma unroll
          for (int chunk = 0; chunk < MIO_BN / 64; ++chunk) {
            if (MIO_SPAN > 1) {  // tap tap0 + chunk (the first again past the last tap)
              const int t = at.tap0 + chunk < MIO_TAPS(g) ? at.tap0 + chunk : at.tap0;
              const MioTapOffset o = tap_offset(g, t);
              tma_load_4d(a + MIO_A_BYTES + chunk * MIO_CHUNK, &x_map, &full[slot], 0,
                          q0 * g.sw + o.w, p0 * g.sh + o.h, n0);
            } else {
              tma_load_4d(a + MIO_A_BYTES + chunk * MIO_CHUNK, &x_map, &full[slot],
                          at.c0 + chunk * 64, q0 * g.sw + woff, p0 * g.sh + hoff, n0);
            }
          }
          if (++bq == g.tiles_q) {
            bq = 0;
            if (++bp == g.tiles_p) {
              bp = 0;
              ++bn;
            }
          }
#endif
        }
      }
    }
    return;
  }

  // The consumers.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int cw = wg - 1;
  const int lane = tid % 32, warp = (tid % 128) / 32;
  // this consumer's k rows and c columns of a tile, and where its operands lie in a stage
  const int row0 = MIO_BM == 128 ? cw * 64 : 0;
  const int col_off = MIO_BM == 128 || MIO_HALVES ? 0 : cw * MIO_CN;
  const int a_off = MIO_BM == 128 ? cw * MIO_CHUNK : 0;
  const int b_off =
      MIO_A_BYTES + (MIO_BM == 128 || MIO_HALVES ? 0 : cw * (MIO_CN / 64) * MIO_CHUNK);
  float d[MIO_ACC];
  int it = 0;
  MIO_FOR_EACH_WORK(at) {
#pragma unroll
    for (int i = 0; i < MIO_ACC; ++i) d[i] = 0.f;
    int prev = -1;  // the ring position this consumer multiplied last in this unit
    for (int box = at.lo; box < at.hi; ++box, ++it) {
      if (MIO_HALVES && it % 2 != cw) continue;  // the other consumer's stage
      const int slot = it % MIO_STAGES;
      bar_wait(&full[slot], (it / MIO_STAGES) & 1);
      const unsigned char* a = ring + slot * MIO_STAGE_BYTES + a_off;
      const unsigned char* b = ring + slot * MIO_STAGE_BYTES + b_off;
      keep(d);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < MIO_PIXELS / 16; ++kk) {  // 16 pixels (rows) per instruction
        MIO_WGMMA_TAB(MIO_CN)(d, smem_desc_mn_at(a + kk * (16 * MIO_ROW), MIO_CHUNK, 1024),
                              smem_desc_mn_at(b + kk * (16 * MIO_ROW), MIO_CHUNK, 1024));
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
      keep(d);
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
      keep(d);
      // the previous slice's multiplies are done: its stage goes back to the producer
      if (prev >= 0 && tid % 128 == 0) bar_arrive(&empty[prev % MIO_STAGES]);
      prev = it;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    keep(d);
    if (prev >= 0 && tid % 128 == 0) bar_arrive(&empty[prev % MIO_STAGES]);

    // Epilogue: this thread's rows (k) are lane/4 and lane/4 + 8 of its warp's 16; its columns
    // pairs 8 apart from col0 (channels of the unit's tap, or over several taps the tile's
    // (tap, channel) pairs, 64 columns a tap).
#if MIO_3D
    const long long taps = (long long)MIO_TAPS(g);
#else
    const long long taps = (long long)g.r * g.s;
#endif
    const int col0 = at.c0 + col_off + 2 * (lane % 4);
    // over several taps a consumer's columns start at a tap's first channel (col_off is a
    // multiple of 64), so column 8 j + (its first) is channel 8 (j % 8) + that of tap j / 8
    const int span_tap0 = at.tap0 + col_off / 64;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int k = at.k0 + row0 + warp * 16 + lane / 4 + 8 * half;
      if (k >= g.k) continue;
      if (g.direct) {
#pragma unroll
        for (int j = 0; j < MIO_CN / 8; ++j) {
          const int tap = MIO_SPAN > 1 ? span_tap0 + j / 8 : at.tap0;
          const int c = MIO_SPAN > 1 ? 2 * (lane % 4) + 8 * (j % 8) : col0 + 8 * j;
          if (c >= g.c || tap >= taps) continue;
#if MIO_3D
          mio_elem* out = w + k * g.w_sk + (tap / g.s / g.r) * g.w_st +
                          ((tap / g.s) % g.r) * g.w_sr + (tap % g.s) * g.w_ss;
#else
          mio_elem* out = w + k * g.w_sk + ((tap / g.s) % g.r) * g.w_sr + (tap % g.s) * g.w_ss;
#endif
          store_pair(out + c, d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
        }
      } else {
        const int slab = MIO_HALVES ? 2 * at.part + cw : at.part;
        float* out = part + slab * g.slab + (long long)k * taps * g.c;
#pragma unroll
        for (int j = 0; j < MIO_CN / 8; ++j) {
          const int tap = MIO_SPAN > 1 ? span_tap0 + j / 8 : at.tap0;
          const int c = MIO_SPAN > 1 ? 2 * (lane % 4) + 8 * (j % 8) : col0 + 8 * j;
          if (c >= g.c || tap >= taps) continue;
          *reinterpret_cast<float2*>(out + (long long)tap * g.c + c) =
              make_float2(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
        }
      }
    }
#if MIO_FIXUP
    if (!g.direct) {
      // Publish this unit's slab (both consumers' stores out), count the part in; the last of
      // the tile's parts adds its slabs in order and stores the filter.
      __shared__ int last_part;
      __threadfence();
      asm volatile("bar.sync 1, 256;" ::: "memory");
      if (tid == 128) {
        const long long tile =
            at.k0 / MIO_BM +
            (long long)tiles_k * (at.c0 / MIO_BN + (long long)tiles_c * (at.tap0 / MIO_SPAN));
        int* arrived = reinterpret_cast<int*>(part + (long long)g.slabs * g.slab) + tile;
        last_part = atomicAdd(arrived, 1) == g.split - 1;
      }
      asm volatile("bar.sync 1, 256;" ::: "memory");
      // with MIO_HALVES both consumers hold the whole tile: the first adds for both
      if (last_part && (!MIO_HALVES || cw == 0)) {
        __threadfence();  // the other parts' slabs, seen through the L2 (ld.global.cg)
        const bool paired = filter_paired(g);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int k = at.k0 + row0 + warp * 16 + lane / 4 + 8 * half;
          if (k >= g.k) continue;
          const float* row = part + (long long)k * taps * g.c;
#pragma unroll
          for (int j = 0; j < MIO_CN / 8; ++j) {
            const int tap = MIO_SPAN > 1 ? span_tap0 + j / 8 : at.tap0;
            const int c = MIO_SPAN > 1 ? 2 * (lane % 4) + 8 * (j % 8) : col0 + 8 * j;
            if (c >= g.c || tap >= taps) continue;
            const float* at_c = row + (long long)tap * g.c + c;
            float2 sum = __ldcg(reinterpret_cast<const float2*>(at_c));
            for (int slab = 1; slab < g.slabs; ++slab) {
              const float2 v = __ldcg(reinterpret_cast<const float2*>(at_c + slab * g.slab));
              sum.x += v.x;
              sum.y += v.y;
            }
            store_filter(w, g, k, tap, c, paired, sum.x, sum.y);
          }
        }
      }
    }
#endif
  }
}

// The parts' fp32 sums added in order (deterministic), converted and stored through the
// filter's strides (any layout). Two channels a thread, the slabs' loads unrolled so that
// eight are in flight: with many parts of a small filter the sum is bound by their latency.
// Stream-K: a tile's own contributors only (the slabs past them hold other tiles' sums or
// nothing).
extern "C" __global__ void igemm_wgmma_wrw_reduce(const float* __restrict__ part,
                                                  mio_elem* __restrict__ w, const MioWrwGeom g) {
  const long long pairs = g.slab / 2;
  const long long taps = (long long)MIO_TAPS(g);
  const bool paired = filter_paired(g);
#if MIO_STREAMK
  const int tiles_k = (g.k + MIO_BM - 1) / MIO_BM;
  const int tiles_c = MIO_SPAN > 1 ? 1 : (g.c + MIO_BN - 1) / MIO_BN;
  const long long total = tile_count(g, tiles_k, tiles_c) * g.boxes;
#endif
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < pairs;
       i += (long long)gridDim.x * blockDim.x) {
#if MIO_STREAMK  // the slabs of the tile of (k, tap, c), numbered as unit_at does: k fastest
    const long long kc = 2 * i / g.c;
    const long long tile =
        kc / taps / MIO_BM + (long long)tiles_k * ((MIO_SPAN > 1 ? 0 : (2 * i % g.c) / MIO_BN) +
                                                   (long long)tiles_c * (kc % taps / MIO_SPAN));
    const int slabs = (MIO_HALVES ? 2 : 1) * mio_sk_contributors(tile, g.boxes, total, g.split);
#else
    const int slabs = g.slabs;
#endif
    float2 sum = reinterpret_cast<const float2*>(part)[i];
#pragma unroll 8
    for (int j = 1; j < slabs; ++j) {
      const float2 v = reinterpret_cast<const float2*>(part + j * g.slab)[i];
      sum.x += v.x;
      sum.y += v.y;
    }
    const long long e = 2 * i;
    const long long m = e / g.c;
    store_filter(w, g, m / taps, (int)(m % taps), (int)(e % g.c), paired, sum.x, sum.y);
  }
}
