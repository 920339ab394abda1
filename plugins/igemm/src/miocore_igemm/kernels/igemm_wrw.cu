// igemm.gpu_mma_wrw / igemm.gpu_tf32_wrw: backward-weights implicit GEMM on tensor cores.
//
// GEMM view (per group g):  dW[k, r] = sum_m A[k, m] * B[m, r]
//   k                          rows:      the group's output channels (Kg)
//   r = (fy, fx, c)            columns:   Y * X * Cg (channel innermost)
//   m = (n, oh, ow)            reduction: N * Ho * Wo (long: split over blocks, "split-K")
//   A[k, m] = dy[n, g*Kg + k, oh, ow]
//   B[m, r] = x[n, g*Cg + c, oh*sh - ph + fy*dh, ow*sw - pw + fx*dw]   (zero outside x)
// Both operands are reduction-major in channels-last memory (k contiguous in dy, c contiguous in
// x), so a stage is staged as [BK reduction rows][tile columns] and the MMA fragments are read
// transposed (ldmatrix.trans for 16-bit types; scalar shared reads for tf32).
//
// Compile-time (the performance config and the element type):
//   MIO_BM, MIO_BN, MIO_BK   block tile (k rows, r columns, reduction rows per stage); 8 warps
//                            in 2 (k) x 4 (r), or 4 x 2 when BM > BN
//   MIO_STAGES               shared-memory pipeline depth (cp.async multi-buffering), >= 2
//   MIO_VECA, MIO_VECB       elements per global load of dy / x: 16 bytes when channels and
//                            strides allow it, else 1 (scalar loads: any layout, NCHW included)
//   MIO_DTYPE_FP16 / _BF16   mma.sync m16n8k16 with fp32 accumulators
//   MIO_DTYPE_FP32           TF32: mma.sync m16n8k8 on inputs rounded to tf32 (cvt.rna)
// Split-K (grid z = splits > 1): each split covers a contiguous range of reduction tiles and
// adds its fp32 tile into the workspace (atomic != 0, after igemm_wrw_zero) or writes it to its
// own slab of the workspace (atomic == 0); igemm_wrw_reduce then sums, casts and stores dw.
// MFMA (MIO_MFMA: HIP on gfx90a/gfx94x, or emulated on CUDA under -DMIO_MFMA_EMULATE): 4 waves
// of 64, each covering the tiles of two warps adjacent in N (2 * WTN columns), as 16 x 16
// v_mfma_f32_16x16x16f16 / _bf16_1k tiles (v_mfma_f32_16x16x4f32 for fp32: exact on AMD); a
// lane's fragment is 4 consecutive reduction rows of one column, read from the shared tiles as
// four scalars. Without mma.sync or MFMA (other HIP targets, pre-sm_80) a scalar path multiplies
// the same shared tiles into the mma.sync accumulator layout; one epilogue serves all three
// through the fragment map of miocore_gpu.h (MIO_FRAG_*).
#include "miocore_gpu.h"

#ifndef MIO_BM
#define MIO_BM 128
#endif
#ifndef MIO_BN
#define MIO_BN 128
#endif
#ifndef MIO_BK
#define MIO_BK 32
#endif
#ifndef MIO_STAGES
#define MIO_STAGES 2
#endif
#ifndef MIO_VECA
#define MIO_VECA 1
#endif
#ifndef MIO_VECB
#define MIO_VECB 1
#endif

#define MIO_THREADS 256
// 8 elements of padding per shared row: ldmatrix row addresses (16-bit types) and the tf32
// scalar reads (row stride = 8 mod 32 words) are then free of bank conflicts.
#define MIO_PAD 8
#define MIO_SA (MIO_BM + MIO_PAD)
#define MIO_SB (MIO_BN + MIO_PAD)
// Warps: 4 (k) x 2 (r) when the tile is taller than wide, else 2 x 4, so that each warp's tile
// is as square as possible (fewer fragment loads per MMA).
#if MIO_BM > MIO_BN
#define MIO_WARPS_M 4
#else
#define MIO_WARPS_M 2
#endif
#define MIO_WARPS_N (8 / MIO_WARPS_M)
#define MIO_WTM (MIO_BM / MIO_WARPS_M)
#define MIO_WTN (MIO_BN / MIO_WARPS_N)
// Staged tiles are [k][row] (A) and [k][col] (B), reduction-major (igemm_tiles.h).
#define MIO_A_AT(row, k) as[(k) * MIO_SA + row]
#define MIO_B_AT(col, k) bs[(k) * MIO_SB + col]
#define MIO_A_PTR(row, k) (as + (k) * MIO_SA + row)
#define MIO_B_PTR(col, k) (bs + (k) * MIO_SB + col)
#define MIO_A_ROWS(n) (n)
#define MIO_A_KS(n) (n) * MIO_SA
#define MIO_B_KS(n) (n) * MIO_SB
#include "igemm_tiles.h"
#define MIO_CPR_A (MIO_BM / MIO_VECA)  // chunks per staged dy row
#define MIO_RPI_A (MIO_THREADS / MIO_CPR_A)
#define MIO_A_ITERS ((MIO_BK + MIO_RPI_A - 1) / MIO_RPI_A)
#define MIO_CPR_B (MIO_BN / MIO_VECB)  // chunks per staged x row
#define MIO_RPI_B (MIO_THREADS / MIO_CPR_B)
#define MIO_B_ITERS ((MIO_BK + MIO_RPI_B - 1) / MIO_RPI_B)

struct MioWrwParams {
  mio_index n, c, h, w;
  mio_index k, fy, fx;
  mio_index ho, wo;
  mio_index groups, cg, kg;
  mio_index ph, pw, sh, sw, dh, dw;
  mio_index xs_n, xs_c, xs_h, xs_w;  // element strides of x
  mio_index ys_n, ys_c, ys_h, ys_w;  // of dy
  mio_index ws_k, ws_c, ws_y, ws_x;  // of dw
  mio_index m;                       // N * Ho * Wo (the reduction)
  mio_index r;                       // FY * FX * Cg (GEMM columns)
  mio_index tiles_per_split;         // reduction tiles of one split
  mio_index splits;
  mio_index atomic;                  // split-K by atomic adds into one fp32 copy
};

#if MIO_MMA_SYNC && !defined(MIO_DTYPE_FP32)
// Four 8x8 b16 matrices, transposed on the way out of shared memory.
MIO_DEVICE void mio_ldsm_x4_trans(unsigned int* r, const void* p) {
  unsigned int a = (unsigned int)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
#endif

// Reduction position of one staged row: m and its (image, oh, ow); advanced by BK per stage with
// mixed-radix carries (no division in the main loop).
struct MioRow {
  int m, img, oh, ow;
};

MIO_DEVICE void mio_row_init(const MioWrwParams& p, int m, MioRow* s) {
  const int hw = (int)(p.ho * p.wo);
  s->m = m;
  s->img = m / hw;
  const int rem = m - s->img * hw;
  s->oh = rem / (int)p.wo;
  s->ow = rem - s->oh * (int)p.wo;
}

MIO_DEVICE void mio_row_step(const MioWrwParams& p, int s_img, int s_oh, int s_ow, MioRow* s) {
  s->m += MIO_BK;
  s->ow += s_ow;
  const int c1 = s->ow >= (int)p.wo;
  if (c1) s->ow -= (int)p.wo;
  s->oh += s_oh + c1;
  const int c2 = s->oh >= (int)p.ho;
  if (c2) s->oh -= (int)p.ho;
  s->img += s_img + c2;
}

MIO_KERNEL void __launch_bounds__(MIO_THREADS)
    igemm_wrw(const mio_t* __restrict__ x, const mio_t* __restrict__ dy, mio_t* __restrict__ dw,
              float* __restrict__ ws, MioWrwParams p) {
  extern __shared__ __attribute__((aligned(16))) unsigned char mio_smem_raw[];
  mio_t* As = (mio_t*)mio_smem_raw;              // [STAGES][BK][SA]: dy, k contiguous
  mio_t* Bs = As + MIO_STAGES * MIO_BK * MIO_SA;  // [STAGES][BK][SB]: x, r contiguous

  const int tid = threadIdx.x;
  const int warp = tid / MIO_FRAG_LANES, lane = tid % MIO_FRAG_LANES;  // MFMA: wave, lane of 64
  const int wm = warp / MIO_GROUPS_N, wn = warp % MIO_GROUPS_N;
  const int gid = lane / 4, tig = lane % 4;
  const int frag_row = mio_frag_row(lane), frag_col = mio_frag_col(lane);  // epilogue

  const mio_index ktiles_out = (p.kg + MIO_BM - 1) / MIO_BM;
  const mio_index grp = blockIdx.y / ktiles_out;
  const int k0 = (int)(blockIdx.y % ktiles_out) * MIO_BM;
  const int r0 = (int)blockIdx.x * MIO_BN;
  const mio_index rtiles = (p.m + MIO_BK - 1) / MIO_BK;
  const mio_index t_begin = (mio_index)blockIdx.z * p.tiles_per_split;
  mio_index t_end = t_begin + p.tiles_per_split;
  if (t_end > rtiles) t_end = rtiles;
  const int ntile = t_begin < t_end ? (int)(t_end - t_begin) : 0;

  // The reduction step of one stage in (image, oh, ow) digits.
  const int hw = (int)(p.ho * p.wo);
  const int s_img = MIO_BK / hw;
  const int s_oh = (MIO_BK - s_img * hw) / (int)p.wo;
  const int s_ow = MIO_BK - s_img * hw - s_oh * (int)p.wo;

  // dy: this thread's column chunk (output channels) is fixed for the whole reduction.
  const int a_col = (tid % MIO_CPR_A) * MIO_VECA;
  const int a_row0 = tid / MIO_CPR_A;
  const bool a_ok = k0 + a_col < (int)p.kg;
  const mio_t* dyg = dy + (grp * p.kg + k0 + a_col) * p.ys_c;
  // x: this thread's column chunk (filter tap and channel) is fixed too.
  const int b_col = (tid % MIO_CPR_B) * MIO_VECB;
  const int b_row0 = tid / MIO_CPR_B;
  const int rr = r0 + b_col;
  const bool b_ok = rr < (int)p.r;
  int b_offy = 0, b_offx = 0;
  const mio_t* xg = x;
  if (b_ok) {
    const int tap = rr / (int)p.cg;
    const int c = rr - tap * (int)p.cg;
    const int ty = tap / (int)p.fx;
    const int tx = tap - ty * (int)p.fx;
    b_offy = ty * (int)p.dh - (int)p.ph;
    b_offx = tx * (int)p.dw - (int)p.pw;
    xg = x + (grp * p.cg + c) * p.xs_c;
  }

  MioRow arow[MIO_A_ITERS], brow[MIO_B_ITERS];
#pragma unroll
  for (int i = 0; i < MIO_A_ITERS; ++i)
    mio_row_init(p, (int)(t_begin * MIO_BK) + a_row0 + i * MIO_RPI_A, &arow[i]);
#pragma unroll
  for (int i = 0; i < MIO_B_ITERS; ++i)
    mio_row_init(p, (int)(t_begin * MIO_BK) + b_row0 + i * MIO_RPI_B, &brow[i]);

  float acc[MIO_MI][MIO_NI][4];
  MIO_ACC_ZERO(acc);

  // Stage the next reduction tile into buffer s, then advance the row positions by BK.
  auto load_tile = [&](int s) {
    mio_t* as = As + s * MIO_BK * MIO_SA;
    mio_t* bs = Bs + s * MIO_BK * MIO_SB;
#pragma unroll
    for (int i = 0; i < MIO_A_ITERS; ++i) {
      const int row = a_row0 + i * MIO_RPI_A;
      if (row < MIO_BK) {
        const MioRow& q = arow[i];
        const bool ok = a_ok && q.m < (int)p.m;
        const mio_t* src = dyg + q.img * p.ys_n + q.oh * p.ys_h + q.ow * p.ys_w;
#if MIO_VECA > 1
        mio_cp_async16(as + row * MIO_SA + a_col, ok ? (const void*)src : (const void*)dy,
                       ok ? 16 : 0);
#else
        as[row * MIO_SA + a_col] = ok ? *src : (mio_t)0;
#endif
        mio_row_step(p, s_img, s_oh, s_ow, &arow[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < MIO_B_ITERS; ++i) {
      const int row = b_row0 + i * MIO_RPI_B;
      if (row < MIO_BK) {
        const MioRow& q = brow[i];
        const int ih = q.oh * (int)p.sh + b_offy;
        const int iw = q.ow * (int)p.sw + b_offx;
        const bool ok = b_ok && q.m < (int)p.m && ih >= 0 && ih < (int)p.h && iw >= 0 &&
                        iw < (int)p.w;
        const mio_t* src = xg + q.img * p.xs_n + ih * p.xs_h + iw * p.xs_w;
#if MIO_VECB > 1
        mio_cp_async16(bs + row * MIO_SB + b_col, ok ? (const void*)src : (const void*)x,
                       ok ? 16 : 0);
#else
        bs[row * MIO_SB + b_col] = ok ? *src : (mio_t)0;
#endif
        mio_row_step(p, s_img, s_oh, s_ow, &brow[i]);
      }
    }
  };

#pragma unroll
  for (int s = 0; s < MIO_STAGES - 1; ++s) {
    if (s < ntile) load_tile(s);
    mio_cp_async_commit();
  }

  for (int it = 0; it < ntile; ++it) {
    mio_cp_async_wait(MIO_STAGES - 2);
    __syncthreads();
    {
      const int nxt = it + MIO_STAGES - 1;
      if (nxt < ntile) load_tile(nxt % MIO_STAGES);
      mio_cp_async_commit();
    }
    const int s = it % MIO_STAGES;
    const mio_t* as = As + s * MIO_BK * MIO_SA + wm * MIO_WTM;
    const mio_t* bs = Bs + s * MIO_BK * MIO_SB + wn * MIO_GTN;
#if MIO_MFMA
#if defined(MIO_DTYPE_FP32)
    MIO_TILES_MFMA_F32(acc, lane);
#else
    // Lane l: row (A: output channel) or column (B: filter tap/channel) l % 16 of each 16 x 16
    // tile, reduction rows 4 * (l / 16) onwards (x4f32: row l / 16); staged reduction-major, so
    // a fragment is four scalar reads down a column.
    const int f_col = lane % 16;
    const int f_k = 4 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < MIO_BK; kk += 16) {
      unsigned int af[MIO_MI][2];
      unsigned int bf[MIO_NI][2];
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        const mio_t* ap = as + (kk + f_k) * MIO_SA + i * 16 + f_col;
        af[i][0] = (unsigned int)ap[0] | ((unsigned int)ap[MIO_SA] << 16);
        af[i][1] = (unsigned int)ap[2 * MIO_SA] | ((unsigned int)ap[3 * MIO_SA] << 16);
      }
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
        const mio_t* bp = bs + (kk + f_k) * MIO_SB + j * 16 + f_col;
        bf[j][0] = (unsigned int)bp[0] | ((unsigned int)bp[MIO_SB] << 16);
        bf[j][1] = (unsigned int)bp[2 * MIO_SB] | ((unsigned int)bp[3 * MIO_SB] << 16);
      }
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
#pragma unroll
        for (int j = 0; j < MIO_NI; ++j) {
#if defined(MIO_DTYPE_BF16)
          mio_mfma_bf16_16x16x16(acc[i][j], af[i], bf[j]);
#else
          mio_mfma_f16_16x16x16(acc[i][j], af[i], bf[j]);
#endif
        }
      }
    }
#endif
#elif MIO_MMA_SYNC
#if defined(MIO_DTYPE_FP32)
    MIO_TILES_TF32(acc, gid, tig);
#else
    // ldmatrix lane roles: lane l addresses row (l % 8) of matrix (l / 8).
    const int lq = lane >> 3, lr = lane & 7;
#pragma unroll
    for (int kk = 0; kk < MIO_BK; kk += 16) {
      unsigned int bf[MIO_NI][2];
#pragma unroll
      for (int j = 0; j < MIO_NI; j += 2) {
        // matrices: (m 0-7, r j), (m 8-15, r j), (m 0-7, r j+1), (m 8-15, r j+1)
        unsigned int t[4];
        mio_ldsm_x4_trans(t, bs + (kk + (lq & 1) * 8 + lr) * MIO_SB + j * 8 + (lq >> 1) * 8);
        bf[j][0] = t[0];
        bf[j][1] = t[1];
        bf[j + 1][0] = t[2];
        bf[j + 1][1] = t[3];
      }
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        // matrices: (k rows 0-7, m 0-7), (k 8-15, m 0-7), (k 0-7, m 8-15), (k 8-15, m 8-15)
        unsigned int af[4];
        mio_ldsm_x4_trans(af, as + (kk + (lq >> 1) * 8 + lr) * MIO_SA + i * 16 + (lq & 1) * 8);
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
    MIO_TILES_SCALAR(acc, gid, tig);
#endif
  }
  mio_cp_async_wait(0);

  // Epilogue: dw (one split), or fp32 partials / atomic sums (split-K). Every split writes its
  // whole tile, zeros included, so that the partial slabs are complete.
  const mio_index total = p.k * p.r;
#pragma unroll
  for (int i = 0; i < MIO_MI; ++i) {
#pragma unroll
    for (int fr = 0; fr < MIO_FRAG_ROWS; ++fr) {
      const int kout = k0 + wm * MIO_WTM + i * 16 + frag_row + fr * MIO_FRAG_RSTEP;
      if (kout >= (int)p.kg) continue;
      const mio_index kabs = grp * p.kg + kout;
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
#pragma unroll
        for (int e = 0; e < MIO_FRAG_COLS; ++e) {
          const int col = r0 + wn * MIO_GTN + j * MIO_FRAG_TN + MIO_FRAG_CMUL * frag_col + e;
          if (col >= (int)p.r) continue;
          const float v = acc[i][j][fr * MIO_FRAG_COLS + e];
          if (p.splits > 1) {
            const mio_index idx = kabs * p.r + col;
            if (p.atomic) {
              atomicAdd(ws + idx, v);
            } else {
              ws[(mio_index)blockIdx.z * total + idx] = v;
            }
          } else {
            const int tap = col / (int)p.cg;
            const int c = col - tap * (int)p.cg;
            const int ty = tap / (int)p.fx;
            const int tx = tap - ty * (int)p.fx;
            mio_store(dw + kabs * p.ws_k + c * p.ws_c + ty * p.ws_y + tx * p.ws_x, v);
          }
        }
      }
    }
  }
}

// Clear the fp32 accumulation buffer of atomic split-K.
MIO_KERNEL void igemm_wrw_zero(float* __restrict__ ws, MioWrwParams p) {
  const mio_index total = p.k * p.r;
  MIO_GRID_LOOP(i, total) { ws[i] = 0.0f; }
}

// Sum the split-K partials (one slab when atomic, else `splits` slabs of K x R fp32), cast, and
// store dw in its own layout.
MIO_KERNEL void igemm_wrw_reduce(const float* __restrict__ ws, mio_t* __restrict__ dw,
                                 MioWrwParams p) {
  const mio_index total = p.k * p.r;
  const mio_index slabs = p.atomic ? 1 : p.splits;
  MIO_GRID_LOOP(i, total) {
    float s = 0.0f;
    for (mio_index z = 0; z < slabs; ++z) s += ws[z * total + i];
    const mio_index kabs = i / p.r;
    const int col = (int)(i - kabs * p.r);
    const int tap = col / (int)p.cg;
    const int c = col - tap * (int)p.cg;
    const int ty = tap / (int)p.fx;
    const int tx = tap - ty * (int)p.fx;
    mio_store(dw + kabs * p.ws_k + c * p.ws_c + ty * p.ws_y + tx * p.ws_x, s);
  }
}
