// igemm.gpu_fma: exact-fp32 implicit-GEMM convolution on the CUDA cores (FMA, no TF32), for the
// three directions, any layout / strides (16-byte loads where channels and strides allow).
//
// GEMM view, one GEMM per group g:  C[row, col] = sum_r A[row, r] * B[col, r]
//   forward          rows m = (n, oh, ow)   cols k (Kg)                r = (fy, fx, c)  Y*X*Cg
//   backward data    rows m = (n, ih, iw)   cols c (Cg)                r = (fy, fx, k)  Y*X*Kg
//                    A = dy[n, oh, ow, k] with oh = (ih + ph - fy*dh) / sh when divisible and in
//                    range (else zero), B = w[k, c, fy, fx]. Strided: split into sh*sw residue
//                    classes (ih % sh, iw % sw), each its own GEMM over its (n, ih, iw) rows and
//                    only the taps fy that divide for it (fy0 + u*step): no zero work.
//   backward weights rows k (Kg)            cols r' = (fy, fx, c)      r = m = (n, oh, ow)
//                    A = dy[m, k], B = x[n, c, oh*sh - ph + fy*dh, ow*sw - pw + fx*dw]
// A and B are gathered on the fly; out-of-range taps read as zero.
//
// Structure: the register-blocked SGEMM. 256 threads in a 16 x 16 grid, each owning a
// (BM/16) x (BN/16) micro-tile of fp32 accumulators (8x8 for 128x128). A and B tiles sit in
// shared memory reduction-major (As[r][row], rows padded by 4 floats) so the inner loop reads
// float4s; two shared buffers, the next tile prefetched into registers while the current one is
// multiplied (one __syncthreads per tile). Each thread's gather rows are decoded once; its
// reduction coordinates are advanced incrementally (no divisions in the main loop).
//
// Compile-time (perf config and per-operand load mode, chosen by gpu_fma.py):
//   MIO_DIR                0 forward, 1 backward data, 2 backward weights
//   MIO_BM, MIO_BN, MIO_BK block tile (64 or 128, 64 or 128, 8 or 16)
//   MIO_A_VEC, MIO_B_VEC   4 (one 16-byte load) or 1 (scalar) elements per load
//   MIO_A_ALONG_R, _B_     1: a thread's chunk runs along the reduction (channels of fwd A/B,
//                          bwd-data A); 0: along the tile rows (bwd-data B, both wrw operands)
// Split-K (grid z > 1): each split writes fp32 partials [z][g][row][col] to the workspace;
// igemm_fma_reduce sums them in split order (deterministic) and stores the output.
#include "miocore_gpu.h"

#ifndef MIO_DIR
#define MIO_DIR 0
#endif
#ifndef MIO_BM
#define MIO_BM 128
#endif
#ifndef MIO_BN
#define MIO_BN 128
#endif
#ifndef MIO_BK
#define MIO_BK 8
#endif
#ifndef MIO_A_VEC
#define MIO_A_VEC 1
#endif
#ifndef MIO_B_VEC
#define MIO_B_VEC 1
#endif
#ifndef MIO_A_ALONG_R
#define MIO_A_ALONG_R 1
#endif
#ifndef MIO_B_ALONG_R
#define MIO_B_ALONG_R 1
#endif
#ifndef MIO_MINB
#define MIO_MINB 2
#endif

#define MIO_THREADS 256
#define MIO_TM (MIO_BM / 16)
#define MIO_TN (MIO_BN / 16)
#define MIO_LDA (MIO_BM + 4)  // padded shared rows: conflict-free transposing stores
#define MIO_LDB (MIO_BN + 4)

struct MioFmaParams {
  mio_index n, c, h, w;
  mio_index k, fy, fx;
  mio_index ho, wo;
  mio_index groups, cg, kg;
  mio_index ph, pw, sh, sw, dh, dw;
  mio_index xs_n, xs_c, xs_h, xs_w;  // element strides of x (any layout)
  mio_index ws_k, ws_c, ws_y, ws_x;  // of w
  mio_index ys_n, ys_c, ys_h, ys_w;  // of y
  mio_index gm, gn, gk;              // GEMM rows, columns, reduction length (per group)
  mio_index tiles_per_split;         // reduction tiles of one split
  mio_index splits;
};

#include "igemm_fma_index.h"

// ---- tile loader -----------------------------------------------------------------------------
// One operand's share of a tile: NR rows x MIO_BK reduction, VEC elements per load, chunks
// along the reduction (ALONG_R) or along the rows.
template <int NR, int VEC, int ALONG_R>
struct MioLoader {
  static constexpr int CPL = ALONG_R ? MIO_BK / VEC : NR / VEC;  // chunks per line
  static constexpr int LPI = MIO_THREADS / CPL;                  // lines per iteration
  static constexpr int ITERS = ALONG_R ? (NR + LPI - 1) / LPI : (MIO_BK + LPI - 1) / LPI;
  static constexpr int ROWS = ALONG_R ? ITERS : 1;  // gather rows of this thread
  static constexpr int REDS = ALONG_R ? 1 : ITERS;  // reduction coordinates of this thread
  static constexpr int LD = NR + 4;

  MioRow rows[ROWS];
  MioRed reds[REDS];
  int row0, r0;
  bool active[ITERS];
  float v[ITERS][VEC];

  MIO_DEVICE int row_of(int i) const { return ALONG_R ? row0 + i * LPI : row0; }
  MIO_DEVICE int red_of(int i) const { return ALONG_R ? r0 : r0 + i * LPI; }

  MIO_DEVICE void init(int tid) {
    if (ALONG_R) {
      r0 = (tid % CPL) * VEC;
      row0 = tid / CPL;
    } else {
      row0 = (tid % CPL) * VEC;
      r0 = tid / CPL;
    }
#pragma unroll
    for (int i = 0; i < ITERS; ++i) active[i] = row_of(i) < NR && red_of(i) < MIO_BK;
  }

  template <typename At>
  MIO_DEVICE void fetch(const float* __restrict__ base, At at) {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      const mio_index off = active[i] ? at(rows[ALONG_R ? i : 0], reds[ALONG_R ? 0 : i]) : -1;
      if (VEC == 4) {
        float4 q = make_float4(0.f, 0.f, 0.f, 0.f);
        if (off >= 0) q = *(const float4*)(base + off);
        v[i][0] = q.x;
        v[i][VEC > 1 ? 1 : 0] = q.y;
        v[i][VEC > 2 ? 2 : 0] = q.z;
        v[i][VEC > 3 ? 3 : 0] = q.w;
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) v[i][e] = off >= 0 ? base[off] : 0.0f;
      }
    }
  }

  MIO_DEVICE void store(float* s) const {
#pragma unroll
    for (int i = 0; i < ITERS; ++i) {
      if (!active[i]) continue;
      const int row = row_of(i), r = red_of(i);
      if (ALONG_R) {
#pragma unroll
        for (int e = 0; e < VEC; ++e) s[(r + e) * LD + row] = v[i][e];
      } else if (VEC == 4) {
        *(float4*)(s + r * LD + row) = make_float4(v[i][0], v[i][VEC > 1 ? 1 : 0],
                                                   v[i][VEC > 2 ? 2 : 0], v[i][VEC > 3 ? 3 : 0]);
      } else {
        s[r * LD + row] = v[i][0];
      }
    }
  }

  MIO_DEVICE void advance(const MioFmaParams& p, const MioCls& k) {
#pragma unroll
    for (int j = 0; j < REDS; ++j) mio_red_advance(p, k, reds[j], MIO_BK);
  }
};

MIO_KERNEL void __launch_bounds__(MIO_THREADS, MIO_MINB)
    igemm_fma(float* __restrict__ x, float* __restrict__ w, float* __restrict__ y,
              float* __restrict__ part, MioFmaParams p) {
  __shared__ __attribute__((aligned(16))) float As[2][MIO_BK * MIO_LDA];
  __shared__ __attribute__((aligned(16))) float Bs[2][MIO_BK * MIO_LDB];

  const int tid = threadIdx.x;
  // 8 warps as 4 x 2, lanes as 4 x 8: a warp reads 4 float4 of A and 8 of B per step.
  const int warp = tid / 32, lane = tid % 32;
  const int ty = (warp / 2) * 4 + lane / 8;
  const int tx = (warp % 2) * 8 + lane % 8;

  const mio_index ntiles = (p.gn + MIO_BN - 1) / MIO_BN;
  const mio_index g = blockIdx.y / ntiles;
  const mio_index n0 = (blockIdx.y % ntiles) * MIO_BN;
  // Backward data: grid x runs over the sh*sw residue classes, ceil(mmax / BM) tiles each.
  int cls_id = 0;
  mio_index m0 = (mio_index)blockIdx.x * MIO_BM, row_base = 0, rows = p.gm;
#if MIO_DIR == 1
  {
    const mio_index mmax = p.n * ((p.h + p.sh - 1) / p.sh) * ((p.w + p.sw - 1) / p.sw);
    const mio_index per_class = (mmax + MIO_BM - 1) / MIO_BM;
    cls_id = (int)(blockIdx.x / per_class);
    m0 = (blockIdx.x - cls_id * per_class) * MIO_BM;
    row_base = cls_id * mmax;
    rows = mmax;
  }
#endif
  const MioCls cl = mio_cls(p, cls_id);
  const mio_index gk = MIO_DIR == 1 ? (mio_index)cl.nfy * cl.nfx * p.kg : p.gk;
  const mio_index ktiles = (gk + MIO_BK - 1) / MIO_BK;
  const mio_index t_begin = (mio_index)blockIdx.z * p.tiles_per_split;
  mio_index t_end = t_begin + p.tiles_per_split;
  if (t_end > ktiles) t_end = ktiles;
  const int ntile = t_begin < t_end ? (int)(t_end - t_begin) : 0;

#if MIO_DIR == 0
  const float* a_src = x;
  const float* b_src = w;
#elif MIO_DIR == 1
  const float* a_src = y;
  const float* b_src = w;
#else
  const float* a_src = y;
  const float* b_src = x;
#endif

  MioLoader<MIO_BM, MIO_A_VEC, MIO_A_ALONG_R> la;
  MioLoader<MIO_BN, MIO_B_VEC, MIO_B_ALONG_R> lb;
  la.init(tid);
  lb.init(tid);
#pragma unroll
  for (int i = 0; i < la.ROWS; ++i) la.rows[i] = mio_a_row(p, cl, g, m0 + la.row_of(i));
#pragma unroll
  for (int i = 0; i < la.REDS; ++i)
    la.reds[i] = mio_red_init(p, cl, t_begin * MIO_BK + la.red_of(i));
#pragma unroll
  for (int i = 0; i < lb.ROWS; ++i) lb.rows[i] = mio_b_row(p, g, n0 + lb.row_of(i));
#pragma unroll
  for (int i = 0; i < lb.REDS; ++i)
    lb.reds[i] = mio_red_init(p, cl, t_begin * MIO_BK + lb.red_of(i));

  auto a_at = [&](const MioRow& t, const MioRed& s) { return mio_a_at(p, cl, t, s); };
  auto b_at = [&](const MioRow& t, const MioRed& s) { return mio_b_at(p, cl, t, s, g); };

  float acc[MIO_TM][MIO_TN];
#pragma unroll
  for (int i = 0; i < MIO_TM; ++i)
#pragma unroll
    for (int j = 0; j < MIO_TN; ++j) acc[i][j] = 0.0f;

  if (ntile > 0) {
    la.fetch(a_src, a_at);
    lb.fetch(b_src, b_at);
    la.store(As[0]);
    lb.store(Bs[0]);
    la.advance(p, cl);
    lb.advance(p, cl);
  }
  __syncthreads();

  for (int it = 0; it < ntile; ++it) {
    const bool more = it + 1 < ntile;
    if (more) {  // next tile's global loads in flight while this one is multiplied
      la.fetch(a_src, a_at);
      lb.fetch(b_src, b_at);
    }
    const float* as = As[it & 1];
    const float* bs = Bs[it & 1];
#pragma unroll
    for (int kk = 0; kk < MIO_BK; ++kk) {
      float a[MIO_TM], b[MIO_TN];
#pragma unroll
      for (int q = 0; q < MIO_TM / 4; ++q) {
        const float4 t = *(const float4*)(as + kk * MIO_LDA + q * 64 + ty * 4);
        a[q * 4 + 0] = t.x;
        a[q * 4 + 1] = t.y;
        a[q * 4 + 2] = t.z;
        a[q * 4 + 3] = t.w;
      }
#pragma unroll
      for (int q = 0; q < MIO_TN / 4; ++q) {
        const float4 t = *(const float4*)(bs + kk * MIO_LDB + q * 64 + tx * 4);
        b[q * 4 + 0] = t.x;
        b[q * 4 + 1] = t.y;
        b[q * 4 + 2] = t.z;
        b[q * 4 + 3] = t.w;
      }
#pragma unroll
      for (int i = 0; i < MIO_TM; ++i)
#pragma unroll
        for (int j = 0; j < MIO_TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    if (more) {
      la.store(As[(it + 1) & 1]);
      lb.store(Bs[(it + 1) & 1]);
      la.advance(p, cl);
      lb.advance(p, cl);
    }
    __syncthreads();
  }

  // Epilogue: the output (one split) or fp32 partials [z][g][row][col] (split-K).
  float* out = MIO_DIR == 0 ? y : (MIO_DIR == 1 ? x : w);
  mio_index cols[MIO_TN];
#pragma unroll
  for (int j = 0; j < MIO_TN; ++j) {
    const mio_index col = n0 + (j / 4) * 64 + tx * 4 + (j % 4);
    cols[j] = col < p.gn ? (p.splits > 1 ? col : mio_out_col(p, col)) : -1;
  }
  float* pbase = part + ((mio_index)blockIdx.z * p.groups + g) * p.gm * p.gn;
#pragma unroll
  for (int i = 0; i < MIO_TM; ++i) {
    const mio_index local = m0 + (i / 4) * 64 + ty * 4 + (i % 4);
    if (local >= rows) continue;
    const mio_index row = row_base + local;
    if (p.splits > 1) {
      float* prow = pbase + row * p.gn;
#pragma unroll
      for (int j = 0; j < MIO_TN; ++j)
        if (cols[j] >= 0) prow[cols[j]] = acc[i][j];
    } else {
      const mio_index orow_off = mio_out_row(p, g, row);
      if (orow_off < 0) continue;
      float* orow = out + orow_off;
#pragma unroll
      for (int j = 0; j < MIO_TN; ++j)
        if (cols[j] >= 0) orow[cols[j]] = acc[i][j];
    }
  }
}

// Sum the split-K partials (splits x groups x GM x GN, fp32) in split order into the output.
MIO_KERNEL void igemm_fma_reduce(const float* __restrict__ part, float* __restrict__ out,
                                 MioFmaParams p) {
  const mio_index per_group = p.gm * p.gn;
  const mio_index total = p.groups * per_group;
  MIO_GRID_LOOP(i, total) {
    float s = 0.0f;
    for (mio_index z = 0; z < p.splits; ++z) s += part[z * total + i];
    const mio_index g = i / per_group;
    const mio_index rc = i - g * per_group;
    const mio_index row = rc / p.gn;
    const mio_index col = rc - row * p.gn;
    const mio_index orow = mio_out_row(p, g, row);
    if (orow >= 0) out[orow + mio_out_col(p, col)] = s;
  }
}
