// igemm.gpu_wgmma: forward convolution as an implicit GEMM on Hopper's warpgroup tensor cores
// (sm_90a: wgmma fed by the tensor memory accelerator), channels-last fp16/bf16, fp32
// accumulators; stride-1 backward data runs through it too (igemm_wgmma_wflip, at the end).
//
//   O[m, k] = sum_(fy, fx, c) X[n, oh*sh - ph + fy*dh, ow*sw - pw + fx*dw, c] * W[k, fy, fx, c]
//
// A work unit is a tile of MIO_BM output pixels by MIO_BN output channels. Its pixels are a box
// of tn images x th rows x tw columns (at most MIO_BM; the rest of the rows are
// computed and never stored), so that for one tap (fy, fx) and one block of 64 channels the A
// operand is a single rectangular box of the input: one TMA load, with the box's origin
// shifted by the tap and the strides done by the tensor map's element strides. The hardware
// writes zeros where the box leaves the tensor (padding, channel tails, the last images), so
// the main loop has no masks. The B operand, the filter's (k, tap, 64 channels) slice, is a
// second TMA load. Both land in shared memory in the 128-byte swizzled K-major layout that
// wgmma reads directly.
//
// Three warpgroups: one producer (one thread issues every TMA load into a MIO_STAGES-deep ring
// of shared buffers, each guarded by a "full" and an "empty" mbarrier) and two consumers. In
// the cooperative schedule both consumers work on each tile, each multiplying half its rows
// by all its columns (m64nBNk16, four per 64-channel slice and 64 rows) with one group of
// wgmma in flight while the next slice's wait runs, and both store it together. In the
// ping-pong schedule (MIO_PINGPONG) each consumer owns whole tiles and the two take turns:
// one multiplies while the other stores, so the tensor cores do not wait for the epilogue. The producer gives its
// registers to the consumers (setmaxnreg): a 128 x 256 tile holds 128 fp32 accumulators per
// consumer thread. The epilogue converts pairs of accumulators and stores them as 32-bit
// words straight from registers (rows outside the image or the tile's box are skipped).
//
// 3-D problems (MIO_3D): the pixel box gains a depth (tn images x td planes x th rows x tw
// columns), the activation's tensor map a dimension, and the taps run over (fz, fy, fx).
//
// Compile-time: MIO_BM, MIO_BN (64, 128, 256), MIO_STAGES, MIO_CLUSTER, MIO_PINGPONG, MIO_3D,
// MIO_DTYPE_FP16, MIO_DTYPE_BF16 or MIO_DTYPE_TF32 (fp32 tensors through TF32). Every
// size, and the pixel box, is a run-time argument: one binary per tile width, depth and element
// type serves every problem.
#include "igemm_wgmma_ops.h"
#include "igemm_wgmma_sync.h"

#ifndef MIO_BN
#define MIO_BN 256
#endif
#ifndef MIO_STAGES
#define MIO_STAGES 4
#endif

#ifndef MIO_BM
#define MIO_BM 128
#endif
#ifndef MIO_CLUSTER
#define MIO_CLUSTER 1  // blocks of a cluster: 2 share each filter slice by TMA multicast
#endif
#ifndef MIO_PINGPONG
#define MIO_PINGPONG 0  // 1: each consumer warpgroup owns whole tiles, the two alternate
#endif
#ifndef MIO_3D
#define MIO_3D 0  // 1: 3-D problems (a depth in the pixel box, the taps and the strides)
#endif
#if MIO_PINGPONG
#define MIO_CONSUMER_ROWS MIO_BM  // a consumer's rows of its tile
#define MIO_SHARERS 1             // consumer warpgroups reading each slice
#else
#define MIO_CONSUMER_ROWS (MIO_BM / 2)
#define MIO_SHARERS 2
#endif
#define MIO_MT (MIO_CONSUMER_ROWS / 64)  // m64 sub-tiles per consumer warpgroup
#define MIO_ROW 128                         // bytes of a slice's row: one swizzle row
#define MIO_BK (MIO_ROW / MIO_ELEM_BYTES)   // channels per slice: 64 (fp16/bf16) or 32 (TF32)
#define MIO_A_BYTES (MIO_BM * MIO_ROW)
#define MIO_B_BYTES (MIO_BN * MIO_ROW)
#define MIO_STAGE_BYTES (MIO_A_BYTES + MIO_B_BYTES)
#define MIO_ACC (MIO_BN / 2)

#if MIO_BM != 128 && MIO_BM != 256 && !(MIO_PINGPONG && MIO_BM == 64)
#error "MIO_BM is 128 or 256 (ping-pong: 64 or 128)"
#endif
#if MIO_MT * MIO_ACC > 128
#error "more than 128 accumulators per thread"
#endif

#if defined(MIO_DTYPE_TF32)
#define MIO_WGMMA_(n) mio_wgmma_n##n##_tf32  // k8: four per 128-byte row, as k16 for 16 bits
#define MIO_WGMMA_TB_(n) mio_wgmma_n##n##_tf32_has_no_transpose
#elif defined(MIO_DTYPE_BF16)
#define MIO_WGMMA_(n) mio_wgmma_n##n##_bf16
#define MIO_WGMMA_TB_(n) mio_wgmma_n##n##_bf16_tb
#else
#define MIO_WGMMA_(n) mio_wgmma_n##n##_f16
#define MIO_WGMMA_TB_(n) mio_wgmma_n##n##_f16_tb
#endif
#define MIO_WGMMA(n) MIO_WGMMA_(n)
#define MIO_WGMMA_TB(n) MIO_WGMMA_TB_(n)

#ifndef MIO_B_MN
#define MIO_B_MN 0  // 1: the filter slice lands output-channels-contiguous (see below)
#endif
#if MIO_B_MN && MIO_CLUSTER > 1
#error "the channels-contiguous filter slice is loaded by single blocks"
#endif
#if MIO_B_MN && MIO_ELEM_BYTES != 2
#error "wgmma reads TF32 operands K-major only"
#endif
// Backward data without a flipped copy of the filter: the slice of w[k][tap][c] for 64 values
// of k (the reduction) and MIO_BN of c (the outputs) is loaded as MIO_BN / 64 boxes of 64 c x
// 64 k, each 64 rows of 128 bytes (swizzled), and wgmma reads it MN-major (transpose-B): its
// 8-row groups of k lie 1024 bytes apart, its 64-channel chunks of c one box (8 KiB) apart.
#define MIO_MN_CHUNK (64 * MIO_ROW)
#ifndef MIO_MN_LBO
#define MIO_MN_LBO MIO_MN_CHUNK
#endif
#ifndef MIO_MN_SBO
#define MIO_MN_SBO 1024
#endif

// Everything but the tile configuration, per problem (passed by value).
struct MioWgmmaGeom {
  int n, p, q, k;      // images, output rows, columns and channels
  int r, s, cblocks;   // filter rows, columns, 64-channel slices of C
  int sh, sw, ph, pw, dh, dw;
  int tw, th, tn;                  // the pixel box: columns x rows x images, at most 128
  int tiles_q, tiles_p;            // pixel boxes along a row and down an image
  int split, steps;                // reduction parts (split-K) and slices of the whole sum
  long long y_sn, y_sh, y_sw;      // output strides (elements); channels contiguous
  long long slab;                  // split > 1: fp32 partial sums per part, n*[o*]p*q*k
#if MIO_3D
  int o, t, sd, pd, dd;            // output depth, filter depth, depth stride, pad, dilation
  int td, tiles_d, unused;         // the pixel box's planes, boxes along the depth
  long long y_sd;                  // output depth stride (elements)
#endif
};

#if MIO_3D
#define MIO_TAPS(g) ((g).t * (g).r * (g).s)
#define MIO_BOX_ROWS(g) ((g).tw * (g).th * (g).td * (g).tn)
#else
#define MIO_TAPS(g) ((g).r * (g).s)
#define MIO_BOX_ROWS(g) ((g).tw * (g).th * (g).tn)
#endif

// Where a block's work unit ``u`` lies. Output channels vary fastest (the blocks that share a
// pixel box run together and read it from L2 once), then columns, rows and images of pixel
// boxes. A cluster's blocks take consecutive pixel boxes of the same channels (they share the
// filter slices); a box past the last (odd count) lies past the images: loaded as zeros, never
// stored.
struct MioTile {
  int k0, q0, p0, n0;
#if MIO_3D
  int o0;
#endif
};

__device__ __forceinline__ MioTile tile_at(const MioWgmmaGeom& g, int u, int tiles_n,
                                           int rank) {
  MioTile at;
  at.k0 = (u % tiles_n) * MIO_BN;
  int m = (u / tiles_n) * MIO_CLUSTER + rank;
  at.q0 = (m % g.tiles_q) * g.tw;
  m /= g.tiles_q;
  at.p0 = (m % g.tiles_p) * g.th;
#if MIO_3D
  m /= g.tiles_p;
  at.o0 = (m % g.tiles_d) * g.td;
  at.n0 = (m / g.tiles_d) * g.tn;
#else
  at.n0 = (m / g.tiles_p) * g.tn;
#endif
  return at;
}

__device__ __forceinline__ void keep(float* d) {
#pragma unroll
  for (int i = 0; i < MIO_ACC; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The MN-major filter slice of backward data: 64-channel chunks of c one box apart, 8-row
// groups of k 1024 bytes apart.
__device__ __forceinline__ unsigned long long smem_desc_mn(const void* p) {
  return smem_desc_mn_at(p, MIO_MN_LBO, MIO_MN_SBO);
}

// A consumed slice goes back to the producers of every block that wrote into it.
__device__ __forceinline__ void release(unsigned long long* empty_slot, unsigned rank) {
  bar_arrive(empty_slot);
#if MIO_CLUSTER > 1
#pragma unroll
  for (unsigned r = 1; r < MIO_CLUSTER; ++r) bar_arrive_at(empty_slot, (rank + r) % MIO_CLUSTER);
#endif
}

// The consumer warpgroups: multiply every slice of each tile, then store the tile.
__device__ __forceinline__ void consume(const MioWgmmaGeom& g, mio_elem* __restrict__ y,
                                        float* __restrict__ part, unsigned char* ring, unsigned long long* full,
                                        unsigned long long* empty, unsigned long long* order,
                                        int cw, int tid, int first,
                                        int stride, int units, int tiles_n, unsigned rank,
                                        int box_rows) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  // this warpgroup's rows of a tile: MIO_CONSUMER_ROWS * cw onwards (ping-pong: all of its
  // own tiles), MIO_MT sub-tiles of 64
  const int lane = tid % 32, warp = (tid % 128) / 32;
  const int row0 = MIO_PINGPONG ? 0 : cw * MIO_CONSUMER_ROWS;
  float d[MIO_MT][MIO_ACC];
  int it = 0;  // the ring's position: slices of every unit before this one in the block
  int turn = 0;
  for (int u = first; u < units; u += stride, ++turn) {
    const int j = u % g.split, lo = j * g.steps / g.split, hi = (j + 1) * g.steps / g.split;
#if MIO_PINGPONG
    if (turn % 2 != cw) {  // the other consumer's tile: skip its slices
      it += hi - lo;
      continue;
    }
    // A tile's multiplies start once the tile before it has seen all its slices arrive: the
    // ring's positions are then filled in order, so a parity wait below cannot be answered by
    // a phase two rounds old. Consumer 0's n-th tile follows consumer 1's (n-1)-th; consumer
    // 1's n-th follows consumer 0's n-th.
    if (turn > 0) bar_wait(&order[cw], (cw ? turn / 2 : turn / 2 - 1) & 1);
#endif
#pragma unroll
    for (int m = 0; m < MIO_MT; ++m) {
#pragma unroll
      for (int i = 0; i < MIO_ACC; ++i) d[m][i] = 0.f;
    }
    for (int step = lo; step < hi; ++step, ++it) {
      const int slot = it % MIO_STAGES;
      bar_wait(&full[slot], (it / MIO_STAGES) & 1);
#if MIO_PINGPONG
      // the other's turn, once every thread of this one has passed its own order wait: one
      // thread's arrival (the first version) let the other consumer complete two phases
      // while a lagging warp of this one was still to wait, whose parity wait then asked
      // for a phase that never came (an intermittent hang, H200)
      if (step == hi - 1) bar_arrive(&order[cw ^ 1]);
#endif
      const unsigned char* a = ring + slot * MIO_STAGE_BYTES + row0 * MIO_ROW;
      const unsigned char* b = ring + slot * MIO_STAGE_BYTES + MIO_A_BYTES;
#pragma unroll
      for (int m = 0; m < MIO_MT; ++m) keep(d[m]);
      asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
      for (int kk = 0; kk < MIO_ROW / 32; ++kk) {  // 32 bytes of k per instruction
#pragma unroll
        for (int m = 0; m < MIO_MT; ++m) {
#if MIO_B_MN
          MIO_WGMMA_TB(MIO_BN)(d[m], smem_desc(a + m * (64 * MIO_ROW) + kk * 32),
                               smem_desc_mn(b + kk * (16 * 128)));
#else
          MIO_WGMMA(MIO_BN)(d[m], smem_desc(a + m * (64 * MIO_ROW) + kk * 32),
                            smem_desc(b + kk * 32));
#endif
        }
      }
      asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
      for (int m = 0; m < MIO_MT; ++m) keep(d[m]);
      asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#pragma unroll
      for (int m = 0; m < MIO_MT; ++m) keep(d[m]);
      // the previous slice's multiplies are done: its buffers go back to the producer
      if (step > lo && tid % 128 == 0) release(&empty[(it - 1) % MIO_STAGES], rank);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
    for (int m = 0; m < MIO_MT; ++m) keep(d[m]);
    // the tile's last slice: the producer is already filling the ring for the next tile
    if (tid % 128 == 0) release(&empty[(it - 1) % MIO_STAGES], rank);

    // Epilogue: this thread's rows are lane/4 and lane/4 + 8 of its warp's 16 per sub-tile.
    const MioTile at = tile_at(g, u / g.split, tiles_n, rank);
    const int col0 = at.k0 + 2 * (lane % 4);
#pragma unroll
    for (int m = 0; m < MIO_MT; ++m) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = row0 + m * 64 + warp * 16 + lane / 4 + 8 * half;
        if (row >= box_rows) continue;
        const int qq = at.q0 + row % g.tw;
        const int pp = at.p0 + (row / g.tw) % g.th;
#if MIO_3D
        const int oo = at.o0 + (row / (g.tw * g.th)) % g.td;
        const int nn = at.n0 + row / (g.tw * g.th * g.td);
        if (qq >= g.q || pp >= g.p || oo >= g.o || nn >= g.n) continue;
// the row's pixel among the output's (split-K's slabs) and its offset in y
#define MIO_PIX (((long long)(nn * g.o + oo) * g.p + pp) * g.q + qq)
#define MIO_Y_AT nn * g.y_sn + oo * g.y_sd + pp * g.y_sh + qq * g.y_sw
#else
        const int nn = at.n0 + row / (g.tw * g.th);
        if (qq >= g.q || pp >= g.p || nn >= g.n) continue;
#define MIO_PIX ((long long)(nn * g.p + pp) * g.q + qq)
#define MIO_Y_AT nn * g.y_sn + pp * g.y_sh + qq * g.y_sw
#endif
        if (g.split > 1) {  // this part's sums, fp32, for igemm_wgmma_reduce
          float* out = part + j * g.slab + MIO_PIX * g.k;
#pragma unroll
          for (int c = 0; c < MIO_BN / 8; ++c) {
            const int col = col0 + 8 * c;
            if (col < g.k) {
              *reinterpret_cast<float2*>(out + col) =
                  make_float2(d[m][4 * c + 2 * half], d[m][4 * c + 2 * half + 1]);
            }
          }
          continue;
        }
        mio_elem* out = y + MIO_Y_AT;
#pragma unroll
        for (int c = 0; c < MIO_BN / 8; ++c) {
          const int col = col0 + 8 * c;
          if (col < g.k) {
            store_pair(out + col, d[m][4 * c + 2 * half], d[m][4 * c + 2 * half + 1]);
          }
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(384, 1) __cluster_dims__(MIO_CLUSTER, 1, 1)
    igemm_wgmma_fwd(const __grid_constant__ MioTensorMap x_map,
                    const __grid_constant__ MioTensorMap w_map, mio_elem* __restrict__ y,
                    float* __restrict__ part, const MioWgmmaGeom g) {
  extern __shared__ __align__(1024) unsigned char dyn[];
  __shared__ unsigned long long full[MIO_STAGES], empty[MIO_STAGES], order[2];
  // the swizzle pattern repeats every 1024 bytes: the ring starts on such a boundary
  unsigned char* ring = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(dyn) + 1023) & ~1023ull);

  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int box_rows = MIO_BOX_ROWS(g);
  const int tiles_n = (g.k + MIO_BN - 1) / MIO_BN;
#if MIO_3D
  const int tiles_m = g.tiles_q * g.tiles_p * g.tiles_d * ((g.n + g.tn - 1) / g.tn);
#else
  const int tiles_m = g.tiles_q * g.tiles_p * ((g.n + g.tn - 1) / g.tn);
#endif
  // a unit: one tile per cluster block, one part of its reduction (split-K innermost)
  const int units = tiles_n * ((tiles_m + MIO_CLUSTER - 1) / MIO_CLUSTER) * g.split;
  const int first = blockIdx.x / MIO_CLUSTER, stride = gridDim.x / MIO_CLUSTER;
  const unsigned rank = MIO_CLUSTER > 1 ? cluster_rank() : 0;

  if (tid == 0) {
    for (int i = 0; i < MIO_STAGES; ++i) {
      bar_init(&full[i], 1);
      bar_init(&empty[i], MIO_SHARERS * MIO_CLUSTER);  // each reader of the cluster
    }
    bar_init(&order[0], 128);  // ping-pong: a consumer's turn to multiply (all its threads)
    bar_init(&order[1], 128);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
#if MIO_CLUSTER > 1
  cluster_sync();  // every block's barriers exist before any multicast or remote arrival
#else
  __syncthreads();
#endif

  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (tid == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&x_map))
                   : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<unsigned long long>(&w_map))
                   : "memory");
      int it = 0;  // slices loaded over all this block's tiles: the ring's position
      for (int u = first; u < units; u += stride) {
        const MioTile at = tile_at(g, u / g.split, tiles_n, rank);
        const int hbase = at.p0 * g.sh - g.ph, wbase = at.q0 * g.sw - g.pw;
        const int j = u % g.split, lo = j * g.steps / g.split, hi = (j + 1) * g.steps / g.split;
        // the slice's tap (fy, fx [, fz: MIO_3D]) and 64-channel block, channels fastest
        int cb = lo % g.cblocks, fx = (lo / g.cblocks) % g.s, fy = lo / g.cblocks / g.s;
#if MIO_3D
        const int dbase = at.o0 * g.sd - g.pd;
        int fz = fy / g.r;
        fy %= g.r;
#endif
        for (int step = lo; step < hi; ++step, ++it) {
          const int slot = it % MIO_STAGES;
          if (it >= MIO_STAGES) bar_wait(&empty[slot], ((it / MIO_STAGES) - 1) & 1);
          unsigned char* a = ring + slot * MIO_STAGE_BYTES;
          bar_expect(&full[slot], box_rows * MIO_ROW + MIO_B_BYTES);
#if MIO_3D
#define MIO_TAP ((fz * g.r + fy) * g.s + fx)
          tma_load_5d(a, &x_map, &full[slot], cb * MIO_BK, wbase + fx * g.dw,
                      hbase + fy * g.dh, dbase + fz * g.dd, at.n0);
#else
#define MIO_TAP (fy * g.s + fx)
          tma_load_4d(a, &x_map, &full[slot], cb * MIO_BK, wbase + fx * g.dw,
                      hbase + fy * g.dh, at.n0);
#endif
#if MIO_CLUSTER > 1
          // this block's part of the filter slice, into every block of the cluster
          tma_load_3d_multicast(a + MIO_A_BYTES + rank * (MIO_B_BYTES / MIO_CLUSTER), &w_map,
                                &full[slot], cb * MIO_BK, MIO_TAP,
                                at.k0 + rank * (MIO_BN / MIO_CLUSTER),
                                (unsigned short)((1u << MIO_CLUSTER) - 1));
#elif MIO_B_MN
          // w[k][tap][c] as (c, tap, k): the tap flipped, MIO_BN / 64 boxes of 64 c x 64 k
          for (int chunk = 0; chunk < MIO_BN / 64; ++chunk) {
            tma_load_3d(a + MIO_A_BYTES + chunk * MIO_MN_CHUNK, &w_map, &full[slot],
                        at.k0 + chunk * 64, MIO_TAPS(g) - 1 - MIO_TAP, cb * MIO_BK);
          }
#else
          tma_load_3d(a + MIO_A_BYTES, &w_map, &full[slot], cb * MIO_BK, MIO_TAP, at.k0);
#endif
          if (++cb == g.cblocks) {
            cb = 0;
            if (++fx == g.s) {
              fx = 0;
              ++fy;
#if MIO_3D
              if (fy == g.r) {
                fy = 0;
                ++fz;
              }
#endif
            }
          }
        }
      }
    }
  } else {
    consume(g, y, part, ring, full, empty, order, wg - 1, tid, first, stride, units, tiles_n, rank,
            box_rows);
  }
#if MIO_CLUSTER > 1
  cluster_sync();  // no block leaves while a peer may still arrive on its barriers
#endif
}

// Backward data runs as the forward convolution of dy with the flipped, transposed filter:
// w'[c][fy][fx][k] = w[k][R-1-fy][S-1-fx][c]. Per tap, a 32 x 32 tile of (k, c) goes through
// shared memory, so that both the reads (along c, channels-last filters) and the writes
// (along k) are coalesced; the filter is read through its strides, so any layout works.
// Grid: x over 32-wide tiles of c, y over 32-high tiles of k, z over the taps; 32 x 8 threads.
struct MioFlipGeom {
  int k, c, r, s;
  long long sk, sc, sr, ss;
#if MIO_3D
  int t, unused;
  long long st;
#endif
};

extern "C" __global__ void __launch_bounds__(256)
    igemm_wgmma_wflip(const mio_elem* __restrict__ w, mio_elem* __restrict__ out,
                      const MioFlipGeom f) {
  __shared__ mio_elem tile[32][33];
#if MIO_3D
  const int tap = blockIdx.z, fx = tap % f.s, fy = (tap / f.s) % f.r, fz = tap / f.s / f.r;
  const int c0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
  const long long from = (long long)(f.t - 1 - fz) * f.st + (long long)(f.r - 1 - fy) * f.sr +
                         (long long)(f.s - 1 - fx) * f.ss;
#else
  const int tap = blockIdx.z, fy = tap / f.s, fx = tap % f.s;
  const int c0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
  const long long from = (long long)(f.r - 1 - fy) * f.sr + (long long)(f.s - 1 - fx) * f.ss;
#endif
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int k = k0 + i, c = c0 + threadIdx.x;
    if (k < f.k && c < f.c) tile[i][threadIdx.x] = w[k * f.sk + c * f.sc + from];
  }
  __syncthreads();
#if MIO_3D
  const long long taps = (long long)f.t * f.r * f.s;
#else
  const long long taps = (long long)f.r * f.s;
#endif
  for (int i = threadIdx.y; i < 32; i += 8) {
    const int c = c0 + i, k = k0 + threadIdx.x;
    if (k < f.k && c < f.c) out[((long long)c * taps + tap) * f.k + k] = tile[threadIdx.x][i];
  }
}

// Split-K: the parts' fp32 sums added in order (deterministic), converted and stored.
extern "C" __global__ void igemm_wgmma_reduce(const float* __restrict__ part,
                                              mio_elem* __restrict__ y,
                                              const MioWgmmaGeom g) {
  const long long pairs = g.slab / 2;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < pairs;
       i += (long long)gridDim.x * blockDim.x) {
    float2 sum = reinterpret_cast<const float2*>(part)[i];
    for (int j = 1; j < g.split; ++j) {
      const float2 v = reinterpret_cast<const float2*>(part + j * g.slab)[i];
      sum.x += v.x;
      sum.y += v.y;
    }
    const long long e = 2 * i;
    const int col = (int)(e % g.k);
    long long m = e / g.k;
    const int qq = (int)(m % g.q);
    m /= g.q;
    const int pp = (int)(m % g.p);
#if MIO_3D
    m /= g.p;
    const int oo = (int)(m % g.o);
    const long long nn = m / g.o;
    store_pair(y + nn * g.y_sn + oo * g.y_sd + pp * g.y_sh + qq * g.y_sw + col, sum.x, sum.y);
#else
    const long long nn = m / g.p;
    store_pair(y + nn * g.y_sn + pp * g.y_sh + qq * g.y_sw + col, sum.x, sum.y);
#endif
  }
}
