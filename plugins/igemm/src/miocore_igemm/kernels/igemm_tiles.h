// What igemm_mma.cu (forward, backward data) and igemm_wrw.cu (backward weights) share: the
// thread groups that own accumulator tiles, and the multiply of one staged reduction slice
// for the paths whose arithmetic is the same in both (fp32 on MFMA, TF32 on mma.sync, and the
// scalar fallback). The 16-bit fragment loads stay in each kernel: forward reads its tiles
// row-major with ldmatrix, backward weights reads them reduction-major with ldmatrix.trans.
//
// The including kernel defines, before including this file: MIO_BN, MIO_WARPS_N, MIO_WTM and
// how its staged tiles are addressed (as: A, rows by reduction; bs: B, columns by reduction),
// each in terms of pointers named `as` and `bs`:
//   MIO_A_AT(row, k), MIO_B_AT(col, k)   the element (an lvalue)
//   MIO_A_PTR(row, k), MIO_B_PTR(col, k) its address
//   MIO_A_ROWS(n), MIO_A_KS(n), MIO_B_KS(n)
//                                        element offsets of n rows of A, n reduction steps of
//                                        A and of B (from a MIO_*_PTR address)
// The macro arguments are pasted as written (the kernels' own expressions, unchanged).
//
// The tile multiplies and the accumulator clear are statement macros (MIO_TILES_*,
// MIO_ACC_ZERO), not inline functions, on purpose: the compilers optimise a callee before
// inlining it, and as functions they changed the registers and schedule of the kernels' main
// loops (NVRTC sm_90: SASS compared with nvdisasm; hipcc gfx90a: one instruction moved); as
// macros the binaries are byte-identical to the kernels' own loops (kernels/kernel_fingerprints.py). They read the
// staged tiles through pointers named `as` and `bs` in the caller's scope.
#ifndef MIOCORE_IGEMM_TILES_H
#define MIOCORE_IGEMM_TILES_H

// The thread groups that own accumulator tiles: warps of 32 (mma.sync, scalar), or waves of 64
// spanning two warps along N (MFMA); MIO_GTN columns each, MIO_GROUPS_N of them along N.
#if MIO_MFMA
#if MIO_WARPS_N % 2
#error "the MFMA path pairs warps along N: MIO_WARPS_N must be even"
#endif
#define MIO_GROUPS_N (MIO_WARPS_N / 2)
#else
#define MIO_GROUPS_N MIO_WARPS_N
#endif
#define MIO_GTN (MIO_BN / MIO_GROUPS_N)
#define MIO_MI (MIO_WTM / 16)
#define MIO_NI (MIO_GTN / MIO_FRAG_TN)

MIO_DEVICE float mio_elem_f(mio_t v) {
#if defined(MIO_DTYPE_FP16)
  return mio_half_to_float(v);
#elif defined(MIO_DTYPE_BF16)
  return mio_bf16_to_float(v);
#else
  return v;
#endif
}

#define MIO_ACC_ZERO(acc) \
  { \
  _Pragma("unroll") \
  for (int i = 0; i < MIO_MI; ++i) \
  _Pragma("unroll") \
    for (int j = 0; j < MIO_NI; ++j) \
  _Pragma("unroll") \
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.0f; \
  }

#if MIO_MFMA && defined(MIO_DTYPE_FP32)
// v_mfma_f32_16x16x4f32: lane l holds row (A) or column (B) l % 16 of each 16 x 16 tile at
// reduction step l / 16 of every group of four.
#define MIO_TILES_MFMA_F32(acc, lane) \
  { \
  const int f_idx = lane % 16; \
  const int f_k = lane / 16; \
_Pragma("unroll") \
  for (int kk = 0; kk < MIO_BK; kk += 4) { \
    float bf[MIO_NI]; \
_Pragma("unroll") \
    for (int j = 0; j < MIO_NI; ++j) bf[j] = MIO_B_AT(j * 16 + f_idx, kk + f_k); \
_Pragma("unroll") \
    for (int i = 0; i < MIO_MI; ++i) { \
      const float af = MIO_A_AT(i * 16 + f_idx, kk + f_k); \
_Pragma("unroll") \
      for (int j = 0; j < MIO_NI; ++j) mio_mfma_f32_16x16x4(acc[i][j], af, bf[j]); \
    } \
  } \
  }
#endif

#if MIO_MMA_SYNC && !MIO_MFMA && defined(MIO_DTYPE_FP32)
// mma.sync m16n8k8 on inputs rounded to TF32: lane (gid, tig) reads A rows gid, gid + 8 and
// B column gid at reduction steps tig, tig + 4 (scalar shared reads, either tile layout).
#define MIO_TILES_TF32(acc, gid, tig) \
  { \
_Pragma("unroll") \
  for (int kk = 0; kk < MIO_BK; kk += 8) { \
    unsigned int bf[MIO_NI][2]; \
_Pragma("unroll") \
    for (int j = 0; j < MIO_NI; ++j) { \
      const mio_t* bp = MIO_B_PTR(j * 8 + gid, kk + tig); \
      bf[j][0] = mio_f32_to_tf32(bp[0]); \
      bf[j][1] = mio_f32_to_tf32(bp[MIO_B_KS(4)]); \
    } \
_Pragma("unroll") \
    for (int i = 0; i < MIO_MI; ++i) { \
      const mio_t* ap = MIO_A_PTR(i * 16 + gid, kk + tig); \
      unsigned int af[4]; \
      af[0] = mio_f32_to_tf32(ap[0]); \
      af[1] = mio_f32_to_tf32(ap[MIO_A_ROWS(8)]); \
      af[2] = mio_f32_to_tf32(ap[MIO_A_KS(4)]); \
      af[3] = mio_f32_to_tf32(ap[MIO_A_ROWS(8) + MIO_A_KS(4)]); \
_Pragma("unroll") \
      for (int j = 0; j < MIO_NI; ++j) mio_mma_tf32_1688(acc[i][j], af, bf[j]); \
    } \
  } \
  }
#endif

#if !MIO_MMA_SYNC && !MIO_MFMA
// Without a matrix unit: the same tiles multiplied in the accumulator layout of the mma.sync
// fragments (rows gid, gid + 8; columns 2 * tig, 2 * tig + 1 of each 16 x 8 tile).
#define MIO_TILES_SCALAR(acc, gid, tig) \
  { \
  for (int kk = 0; kk < MIO_BK; ++kk) { \
_Pragma("unroll") \
    for (int i = 0; i < MIO_MI; ++i) { \
      const float a0 = mio_elem_f(MIO_A_AT(i * 16 + gid, kk)); \
      const float a1 = mio_elem_f(MIO_A_AT(i * 16 + gid + 8, kk)); \
_Pragma("unroll") \
      for (int j = 0; j < MIO_NI; ++j) { \
        const float b0 = mio_elem_f(MIO_B_AT(j * 8 + 2 * tig, kk)); \
        const float b1 = mio_elem_f(MIO_B_AT(j * 8 + 2 * tig + 1, kk)); \
        acc[i][j][0] += a0 * b0; \
        acc[i][j][1] += a0 * b1; \
        acc[i][j][2] += a1 * b0; \
        acc[i][j][3] += a1 * b1; \
      } \
    } \
  } \
  }
#endif

#endif  // MIOCORE_IGEMM_TILES_H
