// igemm.gpu_mma / igemm.gpu_tf32: implicit-GEMM convolution on tensor cores, forward and
// backward data, any layout (NHWC fast: 16-byte loads; others through scalar loads).
//
// Why ~590 lines in one file: it is one kernel, the main loop of forward and backward data,
// with the row and tap decoding, the cp.async pipeline, the matrix-unit paths and the epilogue
// that share its registers, plus its two small helpers (split-K reduce, filter transpose); the
// parts it shares with igemm_wrw.cu live in igemm_tiles.h.
//
// One GEMM per group:  O[m, col] = sum_r A[m, r] * B[col, r]
//   forward        m = (n, oh, ow)   col = output channel k    r = (fy, fx, c)   A from x
//                  ih = oh * sh - ph + fy * dh                                    B = w
//   backward data  m = (n, ih, iw)   col = input channel c     r = (fy, fx, k)   A from dy
//                  oh = (ih + ph - fy * dh) / sh, only where divisible and in range
//                  B = w transposed to [g][c][fy][fx][k] in the workspace (igemm_mma_wtrans),
//                  so that the reduction channel is innermost in both operands.
//                  Strided, undilated (p.phases = sh * sw > 1): grid z also runs over the
//                  stride phases (ih % sh, iw % sw); a phase's rows are ih = ph_h + sh * i and
//                  only its taps fy = fy0 + sh * t (fy0 = (ph_h + ph) % sh) contribute, with
//                  oh = base_h + i - t: a dense GEMM with no skipped taps.
// The reduction channel is innermost in r: a run of MIO_VEC channels is contiguous in memory
// for channels-last tensors, so A and B tiles are staged with 16-byte cp.async.
//
// Compile-time (the performance config, the element type, the direction):
//   MIO_BM, MIO_BN, MIO_BK   block tile (rows, columns, reduction per stage)
//   MIO_WARPS_M, _N          warp grid (MIO_WARPS_M * MIO_WARPS_N = 8 warps, 256 threads)
//   MIO_STAGES               shared-memory pipeline depth (cp.async multi-buffering), >= 2
//   MIO_VEC                  elements per global load: 16 bytes when the channels and strides
//                            allow it, else 1 (scalar loads through arbitrary strides)
//   MIO_BWD                  1: backward data (the gather above), 0: forward
//   MIO_BWD_DIV              1: backward data with a stride and no phases (dilated strided):
//                            a tap reads only where its row divides by the stride; 0: every
//                            gather is that of a unit stride (forward, phased, or stride 1)
//   MIO_MIN_BLOCKS           resident blocks per SM the register budget must allow
//   MIO_DTYPE_FP16 / _BF16   mma.sync m16n8k16 with fp32 accumulators, fragments by ldmatrix.x4
//   MIO_DTYPE_FP32           TF32: mma.sync m16n8k8 on inputs rounded to tf32 (cvt.rna)
// Shared tiles are rows of MIO_BK elements padded by 16 bytes: the eight 16-byte row segments
// one ldmatrix phase reads fall in distinct bank groups (row pitch 80 or 144 bytes).
// Split-K (grid z > 1): each split covers a range of reduction tiles and writes fp32 partials
// to the workspace; igemm_mma_reduce sums them and stores the output.
// MFMA (MIO_MFMA: HIP on gfx90a/gfx94x, or emulated on CUDA under -DMIO_MFMA_EMULATE): the
// 8 warps become 4 waves of 64, each covering the tiles of two warps adjacent in N (a wave tile
// of WTM x 2 * WTN, so MIO_WARPS_N must be even), as MI x NI 16 x 16 MFMA tiles:
// v_mfma_f32_16x16x16f16 / _bf16_1k with fragments of 4 consecutive k read as 8 bytes from the
// same padded shared tiles (no ldmatrix), v_mfma_f32_16x16x4f32 for fp32 (exact: the tf32
// solvers compute in full fp32 on AMD).
// Without mma.sync or MFMA (other HIP targets, pre-sm_80) the same tiles are multiplied by a
// scalar path with the mma.sync accumulator layout; one epilogue serves all three through the
// fragment map of miocore_gpu.h (MIO_FRAG_*).
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
#ifndef MIO_WARPS_M
#define MIO_WARPS_M 2
#endif
#ifndef MIO_WARPS_N
#define MIO_WARPS_N 4
#endif
#ifndef MIO_STAGES
#define MIO_STAGES 3
#endif
#ifndef MIO_VEC
#define MIO_VEC 1
#endif
#ifndef MIO_BWD
#define MIO_BWD 0
#endif
#ifndef MIO_BWD_DIV
#define MIO_BWD_DIV 0
#endif
#ifndef MIO_MIN_BLOCKS
#define MIO_MIN_BLOCKS 1  // 2: cap registers at 128 so that two blocks share an SM
#endif

#define MIO_THREADS (32 * MIO_WARPS_M * MIO_WARPS_N)
#define MIO_PAD (16 / (int)sizeof(mio_t))  // 16 bytes: conflict-free ldmatrix phases
#define MIO_SK (MIO_BK + MIO_PAD)
#define MIO_WTM (MIO_BM / MIO_WARPS_M)
#define MIO_WTN (MIO_BN / MIO_WARPS_N)
// Staged tiles are [row][k] (A) and [col][k] (B), rows MIO_SK elements apart (igemm_tiles.h).
#define MIO_A_AT(row, k) as[(row) * MIO_SK + k]
#define MIO_B_AT(col, k) bs[(col) * MIO_SK + k]
#define MIO_A_PTR(row, k) (as + (row) * MIO_SK + k)
#define MIO_B_PTR(col, k) (bs + (col) * MIO_SK + k)
#define MIO_A_ROWS(n) (n) * MIO_SK
#define MIO_A_KS(n) (n)
#define MIO_B_KS(n) (n)
#include "igemm_tiles.h"
#define MIO_CPR (MIO_BK / MIO_VEC)                 // chunks per tile row
#define MIO_RPI (MIO_THREADS / MIO_CPR)            // tile rows per load iteration
#define MIO_A_ITERS ((MIO_BM + MIO_RPI - 1) / MIO_RPI)
#define MIO_B_ITERS ((MIO_BN + MIO_RPI - 1) / MIO_RPI)

struct MioIgemmParams {
  mio_index n, groups;
  mio_index ih, iw, icg;                  // gathered tensor A: spatial, reduction channels/group
  mio_index is_n, is_h, is_w, is_c;       // its element strides
  mio_index oh, ow, ocg;                  // output: spatial of the rows, columns per group
  mio_index rh, rw;                       // row grid (oh, ow; per stride phase: ceil(H / sh))
  mio_index phases;                       // backward data: sh * sw stride phases, else 1
  mio_index mo;                           // output rows N * oh * ow (split-K partials)
  mio_index os_n, os_h, os_w, os_c;       // its element strides
  mio_index bs_col, bs_y, bs_x, bs_c;     // B operand: [col][fy][fx][channel] strides
  mio_index bs_grp;                       // B offset of one group
  mio_index fy, fx, ph, pw, sh, sw, dh, dw;
  mio_index ws_k, ws_c, ws_y, ws_x;       // w's own strides (backward-data transpose)
  mio_index m;                            // N * rows' spatial size
  mio_index kred;                         // FY * FX * icg
  mio_index tiles_per_split;              // reduction tiles of one split
  mio_index splits;
};

#if MIO_MMA_SYNC
// Shared memory through 32-bit shared-window addresses, converted once per thread: the main
// loop then adds stage and row offsets instead of converting generic pointers per access.
MIO_DEVICE unsigned int mio_smem_addr(const void* p) {
  return (unsigned int)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared (cp.async.cg), zero-filled where !ok. The source then reads 0
// bytes; it is still a valid address (the tensor's base): the caller passes `safe`.
MIO_DEVICE void mio_cp16_or_zero(unsigned int dst, const void* src, const void* safe, bool ok) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst),
               "l"(ok ? src : safe), "r"(ok ? 16 : 0)
               : "memory");
}

// Four 8x8 b16 matrices from shared memory; lane l gives the row address of matrix l / 8.
MIO_DEVICE void mio_ldsm_x4(unsigned int* r, unsigned int a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
#endif

// The stride phase of this block (backward data, p.phases > 1): row origins, the first tap
// and the tap counts of the phase. Without phases: the identity (every tap, rows as they are).
struct MioPhase {
  int row_mul_h, row_mul_w;  // output spatial index = row index * mul + add
  int row_add_h, row_add_w;
  int org_h, org_w;          // added to a row index to get its gather origin (backward data)
  int fy0, fx0, fy_step, fx_step, nty, ntx;
};

MIO_DEVICE MioPhase mio_phase(const MioIgemmParams& p, int phase) {
  MioPhase q;
  const int sh = (int)p.sh, sw = (int)p.sw;
  if (p.phases > 1) {
    const int ph_h = phase / sw, ph_w = phase % sw;
    q.row_mul_h = sh;
    q.row_mul_w = sw;
    q.row_add_h = ph_h;
    q.row_add_w = ph_w;
    q.fy0 = (ph_h + (int)p.ph) % sh;
    q.fx0 = (ph_w + (int)p.pw) % sw;
    q.org_h = (ph_h + (int)p.ph - q.fy0) / sh;
    q.org_w = (ph_w + (int)p.pw - q.fx0) / sw;
    q.fy_step = sh;
    q.fx_step = sw;
    q.nty = (int)p.fy > q.fy0 ? ((int)p.fy - q.fy0 + sh - 1) / sh : 0;
    q.ntx = (int)p.fx > q.fx0 ? ((int)p.fx - q.fx0 + sw - 1) / sw : 0;
  } else {
    q.row_mul_h = q.row_mul_w = 1;
    q.row_add_h = q.row_add_w = 0;
    q.org_h = (int)p.ph;
    q.org_w = (int)p.pw;
    q.fy0 = q.fx0 = 0;
    q.fy_step = q.fx_step = 1;
    q.nty = (int)p.fy;
    q.ntx = (int)p.fx;
  }
  return q;
}

// Decode GEMM row m into (image offset, row origin, column origin): forward, the first input
// pixel of the window; backward data, ih + ph (the tap subtracts fy * dh), or per stride
// phase the origin of oh. Rows past M (or past the output in a phase) get a large negative
// origin so that every tap reads as padding.
MIO_DEVICE void mio_row(const MioIgemmParams& p, const MioPhase& q, mio_index m,
                        mio_index* base, int* h0, int* w0) {
  const mio_index hw = p.rh * p.rw;
  const mio_index img = m / hw;
  const mio_index rem = m - img * hw;
  const int r = (int)(rem / p.rw);
  const int c = (int)(rem - (mio_index)r * p.rw);
  if (m >= p.m || r * q.row_mul_h + q.row_add_h >= (int)p.oh ||
      c * q.row_mul_w + q.row_add_w >= (int)p.ow) {
    *base = 0;
    *h0 = -(1 << 29);
    *w0 = -(1 << 29);
    return;
  }
  *base = img * p.is_n;
#if MIO_BWD
  *h0 = r + q.org_h;
  *w0 = c + q.org_w;
#else
  *h0 = r * (int)p.sh - (int)p.ph;
  *w0 = c * (int)p.sw - (int)p.pw;
#endif
}

// Source coordinate of one tap along one axis; false where it is padding (or, backward data,
// not a multiple of the stride).
MIO_DEVICE bool mio_tap(int origin, int tap, int dil, int stride, int extent, int* out) {
#if MIO_BWD
  int t = origin - tap * dil;
  if (t < 0) return false;
  if (stride != 1) {
    const int q = t / stride;
    if (q * stride != t) return false;
    t = q;
  }
  *out = t;
  return t < extent;
#else
  const int t = origin + tap * dil;
  *out = t;
  return t >= 0 && t < extent;
#endif
}

MIO_KERNEL void __launch_bounds__(MIO_THREADS, MIO_MIN_BLOCKS)
    igemm_mma_main(const mio_t* __restrict__ a, const mio_t* __restrict__ b,
                   mio_t* __restrict__ o, float* __restrict__ part, MioIgemmParams p) {
  extern __shared__ __attribute__((aligned(16))) unsigned char mio_smem_raw[];
  mio_t* As = (mio_t*)mio_smem_raw;                          // [STAGES][BM][SK]
  mio_t* Bs = As + MIO_STAGES * MIO_BM * MIO_SK;             // [STAGES][BN][SK]

  const int tid = threadIdx.x;
  const int warp = tid / MIO_FRAG_LANES, lane = tid % MIO_FRAG_LANES;  // MFMA: wave, lane of 64
  const int wm = warp / MIO_GROUPS_N, wn = warp % MIO_GROUPS_N;
  const int gid = lane / 4, tig = lane % 4;
  const int frag_row = mio_frag_row(lane), frag_col = mio_frag_col(lane);  // epilogue

  const mio_index ntiles = (p.ocg + MIO_BN - 1) / MIO_BN;
  const mio_index grp = blockIdx.y / ntiles;
  const mio_index n0 = (blockIdx.y % ntiles) * MIO_BN;
  const mio_index m0 = (mio_index)blockIdx.x * MIO_BM;
  const int zsplit = (int)(blockIdx.z / p.phases);
  const MioPhase q = mio_phase(p, (int)(blockIdx.z % p.phases));
  const mio_index kred = (mio_index)q.nty * q.ntx * p.icg;  // this phase's reduction
  const mio_index ktiles = (kred + MIO_BK - 1) / MIO_BK;
  const mio_index t_begin = (mio_index)zsplit * p.tiles_per_split;
  mio_index t_end = t_begin + p.tiles_per_split;
  if (t_end > ktiles) t_end = ktiles;
  const int ntile = t_begin < t_end ? (int)(t_end - t_begin) : 0;

  const int col = (tid % MIO_CPR) * MIO_VEC;  // this thread's chunk column in a tile
  const int row0 = tid / MIO_CPR;
  const mio_t* ag = a + grp * p.icg * p.is_c;
  const mio_t* bg = b + grp * p.bs_grp;
  const unsigned int ih_n = (unsigned int)p.ih, iw_n = (unsigned int)p.iw;
  // per stride phase the gather is that of a unit-stride, undilated convolution
  const bool phased = p.phases > 1;
  const int dh = phased ? 1 : (int)p.dh, dw = phased ? 1 : (int)p.dw;
  // Offsets within one tap's reach are 32-bit (the solver checks that they fit); a row's
  // image and window origin stay in its 64-bit pointer.
  const int is_h = (int)p.is_h, is_w = (int)p.is_w, is_c = (int)p.is_c, bs_c = (int)p.bs_c;
#if MIO_BWD
  const int tap_dh = -dh, tap_dw = -dw;  // backward data: a tap moves the source back
#else
  const int tap_dh = dh, tap_dw = dw;
#endif

  // Rows this thread gathers, decoded once (no divisions in the main loop): a pointer to the
  // row's window origin (never dereferenced outside the tensor: a tap reads only where its
  // row and column are in range) and the origin's coordinates, which each stage's tap
  // displacement (th, tw) moves with 32-bit adds and unsigned range compares.
  const mio_t* a_row[MIO_A_ITERS];
  int a_h[MIO_A_ITERS], a_w[MIO_A_ITERS];
#pragma unroll
  for (int i = 0; i < MIO_A_ITERS; ++i) {
    mio_index base;
    mio_row(p, q, m0 + row0 + i * MIO_RPI, &base, &a_h[i], &a_w[i]);
#if MIO_BWD_DIV
    a_row[i] = ag + base;
#else
    const bool live = a_h[i] > -(1 << 28);  // rows past the output have no origin
    a_row[i] = ag + base + (live ? (mio_index)a_h[i] * p.is_h + (mio_index)a_w[i] * p.is_w : 0);
#endif
  }
  // B rows (output columns) this thread loads, and whether they lie in the group's columns.
  const mio_t* b_row[MIO_B_ITERS];
  bool b_ok[MIO_B_ITERS];
#pragma unroll
  for (int i = 0; i < MIO_B_ITERS; ++i) {
    const mio_index cn = n0 + row0 + i * MIO_RPI;
    b_ok[i] = cn < p.ocg;
    b_row[i] = bg + (b_ok[i] ? cn * p.bs_col : 0);
  }

  // The reduction position of this thread's chunk: channel, filter column, filter row, and
  // the tap's displacement of the source row and column. One division here; each staged tile
  // advances them by MIO_BK with subtractions and adds.
  int rc, rx, ry;
  {
    const mio_index kr = t_begin * MIO_BK + col;
    const mio_index tap = kr / p.icg;
    rc = (int)(kr - tap * p.icg);
    ry = q.ntx > 0 ? (int)(tap / q.ntx) : 0;
    rx = (int)(tap - (mio_index)ry * q.ntx);
  }
  int th = ry * tap_dh, tw = rx * tap_dw;
  const int icg = (int)p.icg, fxn = q.ntx, fyn = q.nty;
  // B offset of tap (ry, rx): filter row fy0 + ry * fy_step, column fx0 + rx * fx_step
  const int b_tap0 = (int)(q.fy0 * p.bs_y + q.fx0 * p.bs_x);
  const int b_ty = (int)(q.fy_step * p.bs_y), b_tx = (int)(q.fx_step * p.bs_x);

#if MIO_MMA_SYNC
  // This thread's cp.async destinations (stage 0, first row) as shared-window addresses.
  const unsigned int smem = mio_smem_addr(mio_smem_raw);
  constexpr unsigned int a_stage_bytes = MIO_BM * MIO_SK * sizeof(mio_t);
  constexpr unsigned int b_stage_bytes = MIO_BN * MIO_SK * sizeof(mio_t);
  const unsigned int a_dst0 = smem + (row0 * MIO_SK + col) * sizeof(mio_t);
  const unsigned int b_dst0 = a_dst0 + MIO_STAGES * a_stage_bytes;
#endif

  float acc[MIO_MI][MIO_NI][4];
  MIO_ACC_ZERO(acc);

  // Stage the next reduction tile into buffer s, then advance (rc, rx, ry) by MIO_BK.
  auto load_tile = [&](int s) {
    const bool kvalid = ry < fyn;
#if !MIO_BWD_DIV
    // the tap's offset, common to every row this thread stages
    const int aoff = th * is_h + tw * is_w + rc * is_c;
#endif
    const int boff = b_tap0 + ry * b_ty + rx * b_tx + rc * bs_c;
#if MIO_MMA_SYNC && MIO_VEC > 1
    const unsigned int a_dst = a_dst0 + s * a_stage_bytes;
    const unsigned int b_dst = b_dst0 + s * b_stage_bytes;
#else
    mio_t* as = As + s * MIO_BM * MIO_SK;
    mio_t* bs = Bs + s * MIO_BN * MIO_SK;
#endif
#pragma unroll
    for (int i = 0; i < MIO_A_ITERS; ++i) {
      const int r = row0 + i * MIO_RPI;
      if ((i + 1) * MIO_RPI <= MIO_BM || r < MIO_BM) {  // whole iterations need no check
#if MIO_BWD_DIV
        int ih = 0, iw = 0;
        bool ok = kvalid && mio_tap(a_h[i], ry, dh, (int)p.sh, (int)ih_n, &ih);
        ok = ok && mio_tap(a_w[i], rx, dw, (int)p.sw, (int)iw_n, &iw);
        const mio_t* src = a_row[i] + (mio_index)ih * p.is_h + (mio_index)iw * p.is_w + rc * is_c;
#else
        const bool ok = kvalid && (unsigned int)(a_h[i] + th) < ih_n &&
                        (unsigned int)(a_w[i] + tw) < iw_n;
        const mio_t* src = a_row[i] + aoff;
#endif
#if MIO_MMA_SYNC && MIO_VEC > 1
        mio_cp16_or_zero(a_dst + i * MIO_RPI * MIO_SK * sizeof(mio_t), src, a, ok);
#elif MIO_VEC > 1
        mio_cp_async16(as + r * MIO_SK + col, ok ? (const void*)src : (const void*)a, ok ? 16 : 0);
#else
        as[r * MIO_SK + col] = ok ? *src : (mio_t)0;
#endif
      }
    }
#pragma unroll
    for (int i = 0; i < MIO_B_ITERS; ++i) {
      const int r = row0 + i * MIO_RPI;
      if ((i + 1) * MIO_RPI <= MIO_BN || r < MIO_BN) {
        const bool ok = kvalid && b_ok[i];
        const mio_t* src = b_row[i] + boff;
#if MIO_MMA_SYNC && MIO_VEC > 1
        mio_cp16_or_zero(b_dst + i * MIO_RPI * MIO_SK * sizeof(mio_t), src, b, ok);
#elif MIO_VEC > 1
        mio_cp_async16(bs + r * MIO_SK + col, ok ? (const void*)src : (const void*)b, ok ? 16 : 0);
#else
        bs[r * MIO_SK + col] = ok ? *src : (mio_t)0;
#endif
      }
    }
    rc += MIO_BK;
    while (rc >= icg) {
      rc -= icg;
      tw += tap_dw;
      if (++rx == fxn) {
        rx = 0;
        tw = 0;
        ++ry;
        th += tap_dh;
      }
    }
  };

#pragma unroll
  for (int s = 0; s < MIO_STAGES - 1; ++s) {
    if (s < ntile) load_tile(s);
    mio_cp_async_commit();
  }

#if MIO_MMA_SYNC && !defined(MIO_DTYPE_FP32)
  // ldmatrix.x4 row addresses of this lane in stage 0 (see the fragment comment below).
  const unsigned int a_ld0 =
      smem + ((wm * MIO_WTM + lane % 16) * MIO_SK + (lane / 16) * 8) * sizeof(mio_t);
  const unsigned int b_ld0 =
      smem + MIO_STAGES * a_stage_bytes +
      ((wn * MIO_GTN + lane % 8 + (lane / 16) * 8) * MIO_SK + ((lane / 8) % 2) * 8) *
          sizeof(mio_t);
#endif
  // The stage read this iteration and the one written (the ring of MIO_STAGES buffers).
  int s = 0, s_load = MIO_STAGES - 1;
  for (int it = 0; it < ntile; ++it) {
    mio_cp_async_wait(MIO_STAGES - 2);
    __syncthreads();
    if (it + MIO_STAGES - 1 < ntile) load_tile(s_load);
    mio_cp_async_commit();
    s_load = s_load + 1 == MIO_STAGES ? 0 : s_load + 1;
    const mio_t* as = As + s * MIO_BM * MIO_SK + (wm * MIO_WTM) * MIO_SK;
    const mio_t* bs = Bs + s * MIO_BN * MIO_SK + (wn * MIO_GTN) * MIO_SK;
#if MIO_MFMA
#if defined(MIO_DTYPE_FP32)
    MIO_TILES_MFMA_F32(acc, lane);
#else
    // Lane l: row (A) or column (B) l % 16 of each 16 x 16 tile, k = 4 * (l / 16) onwards.
    const int f_row = lane % 16;
    const int f_k = 4 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < MIO_BK; kk += 16) {
      unsigned int af[MIO_MI][2];
      unsigned int bf[MIO_NI][2];
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        const uint2 v = *(const uint2*)(as + (i * 16 + f_row) * MIO_SK + kk + f_k);
        af[i][0] = v.x;
        af[i][1] = v.y;
      }
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
        const uint2 v = *(const uint2*)(bs + (j * 16 + f_row) * MIO_SK + kk + f_k);
        bf[j][0] = v.x;
        bf[j][1] = v.y;
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
    // ldmatrix.x4: A, matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) = a0..a3 of m16n8k16;
    // B (stored [col][k]), matrices (cols 0-7, k 0-7 | 8-15), (cols 8-15, ...) = b of two
    // n8 tiles. Lane l addresses row l % 16 (A) and column l % 8 + 8 * (l / 16) (B).
    const unsigned int a_lane = a_ld0 + s * a_stage_bytes;
    const unsigned int b_lane = b_ld0 + s * b_stage_bytes;
#pragma unroll
    for (int kk = 0; kk < MIO_BK; kk += 16) {
      unsigned int af[MIO_MI][4];
      unsigned int bf[MIO_NI][2];
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
        mio_ldsm_x4(af[i], a_lane + (i * 16 * MIO_SK + kk) * sizeof(mio_t));
      }
#pragma unroll
      for (int j = 0; j < MIO_NI; j += 2) {
        unsigned int r4[4];
        mio_ldsm_x4(r4, b_lane + (j * 8 * MIO_SK + kk) * sizeof(mio_t));
        bf[j][0] = r4[0];
        bf[j][1] = r4[1];
        bf[j + 1][0] = r4[2];
        bf[j + 1][1] = r4[3];
      }
#pragma unroll
      for (int i = 0; i < MIO_MI; ++i) {
#pragma unroll
        for (int j = 0; j < MIO_NI; ++j) {
#if defined(MIO_DTYPE_BF16)
          mio_mma_bf16_16816(acc[i][j], af[i], bf[j]);
#else
          mio_mma_f16_16816(acc[i][j], af[i], bf[j]);
#endif
        }
      }
    }
#endif
#else
    MIO_TILES_SCALAR(acc, gid, tig);
#endif
    s = s + 1 == MIO_STAGES ? 0 : s + 1;
  }
  mio_cp_async_wait(0);

  // Epilogue: the output (one split) or fp32 partials (split-K, [split][m][groups * ocg]).
  const mio_index hw = p.rh * p.rw;
  const mio_index ncols = p.groups * p.ocg;
#pragma unroll
  for (int i = 0; i < MIO_MI; ++i) {
#pragma unroll
    for (int fr = 0; fr < MIO_FRAG_ROWS; ++fr) {
      const mio_index m = m0 + wm * MIO_WTM + i * 16 + frag_row + fr * MIO_FRAG_RSTEP;
      if (m >= p.m) continue;
      const mio_index img = m / hw;
      const mio_index rem = m - img * hw;
      const mio_index r = (rem / p.rw) * q.row_mul_h + q.row_add_h;
      const mio_index c = (rem % p.rw) * q.row_mul_w + q.row_add_w;
      if (r >= p.oh || c >= p.ow) continue;  // a stride phase's rows past the output
      mio_t* orow = o + img * p.os_n + r * p.os_h + c * p.os_w + grp * p.ocg * p.os_c;
      const mio_index mrow = (img * p.oh + r) * p.ow + c;
      float* prow = part + ((mio_index)zsplit * p.mo + mrow) * ncols + grp * p.ocg;
#pragma unroll
      for (int j = 0; j < MIO_NI; ++j) {
        const mio_index kc = n0 + wn * MIO_GTN + j * MIO_FRAG_TN + MIO_FRAG_CMUL * frag_col;
#if MIO_FRAG_COLS == 2
        const float v0 = acc[i][j][fr * 2];
        const float v1 = acc[i][j][fr * 2 + 1];
        if (p.splits > 1) {
          if (kc < p.ocg) prow[kc] = v0;
          if (kc + 1 < p.ocg) prow[kc + 1] = v1;
          continue;
        }
#if !defined(MIO_DTYPE_FP32)
        // Both columns in one 4-byte store where they are adjacent and aligned.
        if (p.os_c == 1 && kc + 1 < p.ocg && ((unsigned long long)(orow + kc) & 3) == 0) {
          mio_t pair[2];
          mio_store(pair, v0);
          mio_store(pair + 1, v1);
          *(unsigned int*)(orow + kc) = (unsigned int)pair[0] | ((unsigned int)pair[1] << 16);
          continue;
        }
#endif
        if (kc < p.ocg) mio_store(orow + kc * p.os_c, v0);
        if (kc + 1 < p.ocg) mio_store(orow + (kc + 1) * p.os_c, v1);
#else
        // one column per row (MFMA): lanes 0-15 store 16 adjacent columns
        const float v0 = acc[i][j][fr];
        if (kc >= p.ocg) continue;
        if (p.splits > 1) {
          prow[kc] = v0;
        } else {
          mio_store(orow + kc * p.os_c, v0);
        }
#endif
      }
    }
  }
}

// Sum the split-K partials (splits x M x groups * ocg, fp32) into the output.
MIO_KERNEL void igemm_mma_reduce(const float* __restrict__ part, mio_t* __restrict__ o,
                                 MioIgemmParams p) {
  const mio_index ncols = p.groups * p.ocg;
  const mio_index total = p.mo * ncols;
  const mio_index hw = p.oh * p.ow;
  MIO_GRID_LOOP(i, total) {
    float s = 0.0f;
    for (mio_index z = 0; z < p.splits; ++z) s += part[z * total + i];
    const mio_index m = i / ncols;
    const mio_index kc = i - m * ncols;
    const mio_index img = m / hw;
    const mio_index rem = m - img * hw;
    const mio_index r = rem / p.ow;
    const mio_index q = rem - r * p.ow;
    mio_store(o + img * p.os_n + r * p.os_h + q * p.os_w + kc * p.os_c, s);
  }
}

// Backward data: w (K x Cg x FY x FX, any strides) to wt[g][c][fy][fx][k] (contiguous), the
// B operand with the reduction channel k innermost. Here icg = K / groups, ocg = Cg.
MIO_KERNEL void igemm_mma_wtrans(const mio_t* __restrict__ w, mio_t* __restrict__ wt,
                                 MioIgemmParams p) {
  const mio_index total = p.groups * p.ocg * p.fy * p.fx * p.icg;
  MIO_GRID_LOOP(i, total) {
    mio_index j = i;
    const mio_index k = j % p.icg;
    j /= p.icg;
    const mio_index tx = j % p.fx;
    j /= p.fx;
    const mio_index ty = j % p.fy;
    j /= p.fy;
    const mio_index c = j % p.ocg;
    const mio_index g = j / p.ocg;
    wt[i] = w[(g * p.icg + k) * p.ws_k + c * p.ws_c + ty * p.ws_y + tx * p.ws_x];
  }
}
