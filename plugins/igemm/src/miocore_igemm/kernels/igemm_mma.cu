// igemm.gpu_mma / igemm.gpu_tf32: implicit-GEMM forward convolution on tensor cores, NHWC.
//
// GEMM view (per group g):  Y[m, k] = sum_r A[m, r] * B[k, r]
//   m = (n, oh, ow)            rows:     M = N * Ho * Wo
//   k                          columns:  the group's output channels (Kg)
//   r = (fy, fx, c)            reduction: Y * X * Cg, channel innermost, so that a run of
//                              MIO_VEC channels is contiguous in both NHWC x and KYXC-style w
// A is gathered on the fly from x (padding and out-of-range rows read as zero); B is read from w.
//
// Compile-time (the performance config and the element type):
//   MIO_BM, MIO_BN, MIO_BK   block tile (rows, columns, reduction per stage); 4 warps in 2 x 2
//   MIO_STAGES               shared-memory pipeline depth (cp.async multi-buffering), >= 2
//   MIO_VEC                  elements per global load: 16 bytes (8 fp16/bf16, 4 fp32) when the
//                            group's channels and the strides allow it, else 1 (scalar loads)
//   MIO_DTYPE_FP16 / _BF16   mma.sync m16n8k16 with fp32 accumulators
//   MIO_DTYPE_FP32           TF32: mma.sync m16n8k8 on inputs rounded to tf32 (cvt.rna)
// Split-K (grid z > 1): each split covers a range of reduction tiles and writes fp32 partials
// to the workspace; igemm_mma_reduce sums them and stores y.
// Without mma.sync (HIP, pre-sm_80: MIO_MMA_SYNC == 0) the same tiles are multiplied by a
// scalar path with the same accumulator layout, so results and the epilogue are identical.
#include "miocore_gpu.h"

#ifndef MIO_BM
#define MIO_BM 128
#endif
#ifndef MIO_BN
#define MIO_BN 64
#endif
#ifndef MIO_BK
#define MIO_BK 32
#endif
#ifndef MIO_STAGES
#define MIO_STAGES 3
#endif
#ifndef MIO_VEC
#define MIO_VEC 1
#endif

#define MIO_THREADS 128
#define MIO_PAD (16 / (int)sizeof(mio_t))  // 16 bytes: conflict-free fragment reads
#define MIO_SK (MIO_BK + MIO_PAD)
#define MIO_WTM (MIO_BM / 2)
#define MIO_WTN (MIO_BN / 2)
#define MIO_MI (MIO_WTM / 16)
#define MIO_NI (MIO_WTN / 8)
#define MIO_CPR (MIO_BK / MIO_VEC)                 // chunks per tile row
#define MIO_RPI (MIO_THREADS / MIO_CPR)            // tile rows per load iteration
#define MIO_A_ITERS ((MIO_BM + MIO_RPI - 1) / MIO_RPI)
#define MIO_B_ITERS ((MIO_BN + MIO_RPI - 1) / MIO_RPI)

struct MioIgemmParams {
  mio_index n, c, h, w;
  mio_index k, fy, fx;
  mio_index ho, wo;
  mio_index groups, cg, kg;
  mio_index ph, pw, sh, sw, dh, dw;
  mio_index xs_n, xs_h, xs_w;  // element strides of x (channel stride 1)
  mio_index ws_k, ws_y, ws_x;  // of w (channel stride 1)
  mio_index ys_n, ys_h, ys_w;  // of y (channel stride 1)
  mio_index m;                 // N * Ho * Wo
  mio_index kred;              // FY * FX * Cg
  mio_index tiles_per_split;   // reduction tiles of one split
  mio_index splits;
};

MIO_DEVICE float mio_elem_f(mio_t v) {
#if defined(MIO_DTYPE_FP16)
  return mio_half_to_float(v);
#elif defined(MIO_DTYPE_BF16)
  return mio_bf16_to_float(v);
#else
  return v;
#endif
}

// Decode GEMM row m into (image offset, first input row, first input column); ih0 is a large
// negative sentinel for rows past M so that every tap reads as padding.
MIO_DEVICE void mio_row(const MioIgemmParams& p, mio_index m, mio_index* base, int* ih0,
                        int* iw0) {
  if (m >= p.m) {
    *base = 0;
    *ih0 = -(1 << 29);
    *iw0 = 0;
    return;
  }
  const mio_index hw = p.ho * p.wo;
  const mio_index img = m / hw;
  const mio_index rem = m - img * hw;
  const mio_index oh = rem / p.wo;
  const mio_index ow = rem - oh * p.wo;
  *base = img * p.xs_n;
  *ih0 = (int)(oh * p.sh - p.ph);
  *iw0 = (int)(ow * p.sw - p.pw);
}

MIO_KERNEL void __launch_bounds__(MIO_THREADS)
    igemm_mma_fwd(const mio_t* __restrict__ x, const mio_t* __restrict__ w, mio_t* __restrict__ y,
                  float* __restrict__ part, MioIgemmParams p) {
  extern __shared__ __attribute__((aligned(16))) unsigned char mio_smem_raw[];
  mio_t* As = (mio_t*)mio_smem_raw;                          // [STAGES][BM][SK]
  mio_t* Bs = As + MIO_STAGES * MIO_BM * MIO_SK;             // [STAGES][BN][SK]

  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / 2, wn = warp % 2;
  const int gid = lane / 4, tig = lane % 4;

  const mio_index ntiles = (p.kg + MIO_BN - 1) / MIO_BN;
  const mio_index grp = blockIdx.y / ntiles;
  const mio_index n0 = (blockIdx.y % ntiles) * MIO_BN;
  const mio_index m0 = (mio_index)blockIdx.x * MIO_BM;
  const mio_index ktiles = (p.kred + MIO_BK - 1) / MIO_BK;
  const mio_index t_begin = (mio_index)blockIdx.z * p.tiles_per_split;
  mio_index t_end = t_begin + p.tiles_per_split;
  if (t_end > ktiles) t_end = ktiles;
  const int ntile = t_begin < t_end ? (int)(t_end - t_begin) : 0;

  const int col = (tid % MIO_CPR) * MIO_VEC;  // this thread's chunk column in a tile
  const int row0 = tid / MIO_CPR;
  const mio_t* xg = x + grp * p.cg;
  const mio_t* wg = w + (grp * p.kg) * p.ws_k;

  // Rows this thread loads, decoded once.
  mio_index a_base[MIO_A_ITERS];
  int a_ih[MIO_A_ITERS], a_iw[MIO_A_ITERS];
#pragma unroll
  for (int i = 0; i < MIO_A_ITERS; ++i) {
    mio_row(p, m0 + row0 + i * MIO_RPI, &a_base[i], &a_ih[i], &a_iw[i]);
  }

  float acc[MIO_MI][MIO_NI][4];
#pragma unroll
  for (int i = 0; i < MIO_MI; ++i)
#pragma unroll
    for (int j = 0; j < MIO_NI; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f;

  // Stage reduction tile t (absolute) into buffer s.
  auto load_tile = [&](int s, mio_index t) {
    const mio_index kr = t * MIO_BK + col;
    const bool kvalid = kr < p.kred;
    int c = 0, ty = 0, tx = 0;
    if (kvalid) {
      const int tap = (int)(kr / p.cg);
      c = (int)(kr - (mio_index)tap * p.cg);
      ty = tap / (int)p.fx;
      tx = tap - ty * (int)p.fx;
    }
    mio_t* as = As + s * MIO_BM * MIO_SK;
    mio_t* bs = Bs + s * MIO_BN * MIO_SK;
#pragma unroll
    for (int i = 0; i < MIO_A_ITERS; ++i) {
      const int r = row0 + i * MIO_RPI;
      if (r < MIO_BM) {
        const int ih = a_ih[i] + ty * (int)p.dh;
        const int iw = a_iw[i] + tx * (int)p.dw;
        const bool ok = kvalid && ih >= 0 && ih < (int)p.h && iw >= 0 && iw < (int)p.w;
        const mio_t* src = xg + a_base[i] + ih * p.xs_h + iw * p.xs_w + c;
#if MIO_VEC > 1
        mio_cp_async16(as + r * MIO_SK + col, ok ? (const void*)src : (const void*)x, ok ? 16 : 0);
#else
        as[r * MIO_SK + col] = ok ? *src : (mio_t)0;
#endif
      }
    }
#pragma unroll
    for (int i = 0; i < MIO_B_ITERS; ++i) {
      const int r = row0 + i * MIO_RPI;
      if (r < MIO_BN) {
        const bool ok = kvalid && n0 + r < p.kg;
        const mio_t* src = wg + (n0 + r) * p.ws_k + ty * p.ws_y + tx * p.ws_x + c;
#if MIO_VEC > 1
        mio_cp_async16(bs + r * MIO_SK + col, ok ? (const void*)src : (const void*)w, ok ? 16 : 0);
#else
        bs[r * MIO_SK + col] = ok ? *src : (mio_t)0;
#endif
      }
    }
  };

#pragma unroll
  for (int s = 0; s < MIO_STAGES - 1; ++s) {
    if (s < ntile) load_tile(s, t_begin + s);
    mio_cp_async_commit();
  }

  for (int it = 0; it < ntile; ++it) {
    mio_cp_async_wait(MIO_STAGES - 2);
    __syncthreads();
    {
      const int nxt = it + MIO_STAGES - 1;
      if (nxt < ntile) load_tile(nxt % MIO_STAGES, t_begin + nxt);
      mio_cp_async_commit();
    }
    const int s = it % MIO_STAGES;
    const mio_t* as = As + s * MIO_BM * MIO_SK + (wm * MIO_WTM) * MIO_SK;
    const mio_t* bs = Bs + s * MIO_BN * MIO_SK + (wn * MIO_WTN) * MIO_SK;
#if MIO_MMA_SYNC
#if defined(MIO_DTYPE_FP32)
#pragma unroll
    for (int kk = 0; kk < MIO_BK; kk += 8) {
      unsigned int bf[MIO_NI][2];
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
        const mio_t* bp = bs + (j * 8 + gid) * MIO_SK + kk + tig;
        bf[j][0] = mio_f32_to_tf32(bp[0]);
        bf[j][1] = mio_f32_to_tf32(bp[4]);
      }
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        const mio_t* ap = as + (i * 16 + gid) * MIO_SK + kk + tig;
        unsigned int af[4];
        af[0] = mio_f32_to_tf32(ap[0]);
        af[1] = mio_f32_to_tf32(ap[8 * MIO_SK]);
        af[2] = mio_f32_to_tf32(ap[4]);
        af[3] = mio_f32_to_tf32(ap[8 * MIO_SK + 4]);
#pragma unroll
        for (int j = 0; j < MIO_NI; ++j) mio_mma_tf32_1688(acc[i][j], af, bf[j]);
      }
    }
#else
#pragma unroll
    for (int kk = 0; kk < MIO_BK; kk += 16) {
      unsigned int bf[MIO_NI][2];
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
        const mio_t* bp = bs + (j * 8 + gid) * MIO_SK + kk + 2 * tig;
        bf[j][0] = *(const unsigned int*)bp;
        bf[j][1] = *(const unsigned int*)(bp + 8);
      }
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        const mio_t* ap = as + (i * 16 + gid) * MIO_SK + kk + 2 * tig;
        unsigned int af[4];
        af[0] = *(const unsigned int*)ap;
        af[1] = *(const unsigned int*)(ap + 8 * MIO_SK);
        af[2] = *(const unsigned int*)(ap + 8);
        af[3] = *(const unsigned int*)(ap + 8 * MIO_SK + 8);
#pragma unroll
        for (int j = 0; j < MIO_NI; ++j) {
#if defined(MIO_DTYPE_BF16)
          mio_mma_bf16_16816(acc[i][j], af, bf[j]);
#else
          mio_mma_f16_16816(acc[i][j], af, bf[j]);
#endif
        }
      }
    }
#endif
#else
    // Scalar path: the accumulator layout of the MMA fragments (rows gid, gid + 8; columns
    // 2 * tig, 2 * tig + 1 of each 16 x 8 tile).
    for (int kk = 0; kk < MIO_BK; ++kk) {
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        const float a0 = mio_elem_f(as[(i * 16 + gid) * MIO_SK + kk]);
        const float a1 = mio_elem_f(as[(i * 16 + gid + 8) * MIO_SK + kk]);
#pragma unroll
        for (int j = 0; j < MIO_NI; ++j) {
          const float b0 = mio_elem_f(bs[(j * 8 + 2 * tig) * MIO_SK + kk]);
          const float b1 = mio_elem_f(bs[(j * 8 + 2 * tig + 1) * MIO_SK + kk]);
          acc[i][j][0] += a0 * b0;
          acc[i][j][1] += a0 * b1;
          acc[i][j][2] += a1 * b0;
          acc[i][j][3] += a1 * b1;
        }
      }
    }
#endif
  }
  mio_cp_async_wait(0);

  // Epilogue: y (one split) or fp32 partials (split-K).
  const mio_index hw = p.ho * p.wo;
#pragma unroll
  for (int i = 0; i < MIO_MI; ++i) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const mio_index m = m0 + wm * MIO_WTM + i * 16 + gid + half * 8;
      if (m >= p.m) continue;
      const mio_index img = m / hw;
      const mio_index rem = m - img * hw;
      const mio_index oh = rem / p.wo;
      const mio_index ow = rem - oh * p.wo;
      mio_t* yrow = y + img * p.ys_n + oh * p.ys_h + ow * p.ys_w + grp * p.kg;
      float* prow = part + ((mio_index)blockIdx.z * p.m + m) * p.k + grp * p.kg;
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const mio_index kc = n0 + wn * MIO_WTN + j * 8 + 2 * tig + e;
          if (kc >= p.kg) continue;
          const float v = acc[i][j][half * 2 + e];
          if (p.splits > 1) {
            prow[kc] = v;
          } else {
            mio_store(yrow + kc, v);
          }
        }
      }
    }
  }
}

// Sum the split-K partials (splits x M x K, fp32) into y.
MIO_KERNEL void igemm_mma_reduce(const float* __restrict__ part, mio_t* __restrict__ y,
                                 MioIgemmParams p) {
  const mio_index total = p.m * p.k;
  const mio_index hw = p.ho * p.wo;
  MIO_GRID_LOOP(i, total) {
    float s = 0.0f;
    for (mio_index z = 0; z < p.splits; ++z) s += part[z * total + i];
    const mio_index m = i / p.k;
    const mio_index kc = i - m * p.k;
    const mio_index img = m / hw;
    const mio_index rem = m - img * hw;
    const mio_index oh = rem / p.wo;
    const mio_index ow = rem - oh * p.wo;
    mio_store(y + img * p.ys_n + oh * p.ys_h + ow * p.ys_w + kc, s);
  }
}
