// miocore portability header: one kernel source for NVRTC (CUDA) and hiprtc / hipcc (HIP).
//
// Every kernel source includes this file first. It provides:
//   MIO_KERNEL, MIO_DEVICE, MIO_HIP / MIO_CUDA   qualifiers and the platform switch
//   MIO_WARP_SIZE                                  32 on NVIDIA, 64 on CDNA (wave64)
//   mio_index                                      64-bit index type (no <stdint.h> under NVRTC)
//   mio_half_to_float / mio_float_to_half          fp16 bits <-> float, round to nearest even
//   mio_bf16_to_float / mio_float_to_bf16          bf16 bits <-> float, round to nearest even
//   mio_t, mio_load(p), mio_store(p, v)            the element type selected by one of
//                                                  -DMIO_DTYPE_FP32 / _FP16 / _BF16
//   MIO_HAS_MMA                                    1 where a matrix-unit path exists (tensor-core
//                                                  MMA on sm_80+, MFMA on gfx90a/gfx94x)
//   MIO_MMA_SYNC, mio_mma_*, mio_cp_async*         NVIDIA mma.sync / cp.async helpers (below)
//   MIO_MFMA, mio_mfma_*                           AMD MFMA helpers, or their software emulation
//                                                  on CUDA under -DMIO_MFMA_EMULATE (below)
//   MIO_FRAG_*, mio_frag_row / _col                which accumulator element of a warp (wave)
//                                                  lies at which row and column of its tile
// Storage of fp16 and bf16 is `unsigned short`: no vendor fp16 header is needed, so a source
// compiles with no include path beyond this folder.
#pragma once

#if defined(__HIPCC_RTC__)
#define MIO_HIP 1
#elif defined(__HIP__) || defined(__HIPCC__)
#define MIO_HIP 1
#include <hip/hip_runtime.h>
#else
#define MIO_CUDA 1
#endif

#define MIO_KERNEL extern "C" __global__
#define MIO_DEVICE __device__ __forceinline__

#if defined(MIO_HIP)
#define MIO_WARP_SIZE 64
#if defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define MIO_HAS_MMA 1
#else
#define MIO_HAS_MMA 0
#endif
#else
#define MIO_WARP_SIZE 32
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MIO_HAS_MMA 1
#else
#define MIO_HAS_MMA 0
#endif
#endif

typedef long long mio_index;

MIO_DEVICE float mio_half_to_float(unsigned short h) {
#if defined(MIO_HIP)
  return (float)__builtin_bit_cast(_Float16, h);
#else
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#endif
}

MIO_DEVICE unsigned short mio_float_to_half(float f) {
#if defined(MIO_HIP)
  return __builtin_bit_cast(unsigned short, (_Float16)f);
#else
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#endif
}

MIO_DEVICE float mio_bf16_to_float(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}

MIO_DEVICE unsigned short mio_float_to_bf16(float f) {
#if defined(MIO_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // the hardware's round to nearest even: one instruction where the integer form below takes
  // about eight (a 16-bit layer's stores are a large share of a latency-bound kernel's work);
  // the same value for every non-NaN input, a NaN stays a NaN
  unsigned short b;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
  return b;
#else
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
    return (unsigned short)((u >> 16) | 0x40u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (unsigned short)(u >> 16);
#endif
}

// MIO_MAX_FINITE: the element type's largest finite value (a correctly rounded result
// beyond it is an infinity).
#if defined(MIO_DTYPE_FP16)
typedef unsigned short mio_t;
#define MIO_MAX_FINITE 65504.0
MIO_DEVICE float mio_load(const mio_t* p) { return mio_half_to_float(*p); }
MIO_DEVICE void mio_store(mio_t* p, float v) { *p = mio_float_to_half(v); }
#elif defined(MIO_DTYPE_BF16)
typedef unsigned short mio_t;
#define MIO_MAX_FINITE 3.3895313892515355e38
MIO_DEVICE float mio_load(const mio_t* p) { return mio_bf16_to_float(*p); }
MIO_DEVICE void mio_store(mio_t* p, float v) { *p = mio_float_to_bf16(v); }
#else
typedef float mio_t;
#define MIO_MAX_FINITE 3.4028234663852886e38
MIO_DEVICE float mio_load(const mio_t* p) { return *p; }
MIO_DEVICE void mio_store(mio_t* p, float v) { *p = v; }
#endif

// Grid-stride loop over [0, total): every kernel may be launched with fewer blocks than work.
#define MIO_GRID_LOOP(i, total)                                                          \
  for (mio_index i = (mio_index)blockIdx.x * blockDim.x + threadIdx.x; i < (total);      \
       i += (mio_index)gridDim.x * blockDim.x)

// Shape and element strides of a tensor of up to 5 logical dimensions (N, C, D, H, W);
// 2-D tensors have D = 1 with stride 0.
struct MioTensor5 {
  mio_index len[5];
  mio_index stride[5];
};

// The logical index of element `i` in (N, C, D, H, W) order, decoded so that the innermost
// counter is the dimension of stride 1 in memory (coalesced access for NCHW and NHWC alike).
MIO_DEVICE void mio_decode5(const MioTensor5& t, mio_index i, int channels_last, mio_index* out) {
  if (channels_last) {  // N, D, H, W, C
    out[1] = i % t.len[1]; i /= t.len[1];
    out[4] = i % t.len[4]; i /= t.len[4];
    out[3] = i % t.len[3]; i /= t.len[3];
    out[2] = i % t.len[2]; i /= t.len[2];
    out[0] = i;
  } else {  // N, C, D, H, W
    out[4] = i % t.len[4]; i /= t.len[4];
    out[3] = i % t.len[3]; i /= t.len[3];
    out[2] = i % t.len[2]; i /= t.len[2];
    out[1] = i % t.len[1]; i /= t.len[1];
    out[0] = i;
  }
}

MIO_DEVICE mio_index mio_offset5(const MioTensor5& t, const mio_index* idx) {
  return idx[0] * t.stride[0] + idx[1] * t.stride[1] + idx[2] * t.stride[2] +
         idx[3] * t.stride[3] + idx[4] * t.stride[4];
}

// ---- matrix units (tensor-core MMA) ----------------------------------------------------------
// MIO_MMA_SYNC       1 where the warp-level `mma.sync` tensor-core instructions exist (CUDA
//                    sm_80+); kernels use the fragment helpers below behind `#if MIO_MMA_SYNC`
//                    and keep a scalar path (same shared-memory tiles, same accumulator
//                    layout) for GPUs with neither mma.sync nor MFMA (MIO_MFMA below). MIO_HAS_MMA
//                    stays the coarse "a matrix unit exists" switch.
// mio_cp_async16(dst, src, n)   copy 16 bytes global -> shared, zero-filling past n bytes
//                    (n = 0 or 16); asynchronous (cp.async.cg) on sm_80+, a plain copy elsewhere.
// mio_cp_async_commit(), mio_cp_async_wait(N)   group boundaries; no-ops without cp.async.
// mio_mma_f16_16816 / mio_mma_bf16_16816 / mio_mma_tf32_1688   d += a * b on one warp,
//                    fp32 accumulators, PTX fragment layouts (row.col).
#if defined(MIO_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define MIO_MMA_SYNC 1
#else
#define MIO_MMA_SYNC 0
#endif

#if MIO_MMA_SYNC
MIO_DEVICE void mio_cp_async16(void* dst, const void* src, int nbytes) {
  unsigned int d = (unsigned int)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(nbytes));
}
#define mio_cp_async_commit() asm volatile("cp.async.commit_group;\n" ::)
#define mio_cp_async_wait(n) asm volatile("cp.async.wait_group %0;\n" ::"n"(n))

MIO_DEVICE void mio_mma_f16_16816(float* d, const unsigned int* a, const unsigned int* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

MIO_DEVICE void mio_mma_bf16_16816(float* d, const unsigned int* a, const unsigned int* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

MIO_DEVICE unsigned int mio_f32_to_tf32(float f) {
  unsigned int r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
  return r;
}

MIO_DEVICE void mio_mma_tf32_1688(float* d, const unsigned int* a, const unsigned int* b) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
#else
MIO_DEVICE void mio_cp_async16(void* dst, const void* src, int nbytes) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (nbytes > 0) v = *(const uint4*)src;
  *(uint4*)dst = v;
}
#define mio_cp_async_commit() ((void)0)
#define mio_cp_async_wait(n) ((void)0)
#endif

// ---- AMD matrix cores (MFMA) -----------------------------------------------------------------
// MIO_MFMA           1 where kernels take their wave64 MFMA path: HIP on gfx90a and gfx940-942
//                    (CDNA2/3: v_mfma_f32_16x16x16f16, _16x16x16bf16_1k, _16x16x4f32), or CUDA
//                    compiled with -DMIO_MFMA_EMULATE (below). gfx908 has fp16 MFMA but not the
//                    bf16_1k form, so it keeps the scalar path. MIO_MFMA_NATIVE: the hardware one.
// mio_mfma_f16_16x16x16 / mio_mfma_bf16_16x16x16(d, a, b)   d += A * B on one wave of 64 lanes,
//                    A 16 x 16 (rows i, reduction k), B 16 x 16 (k, columns j), fp32
//                    accumulators; a, b: 2 words = 4 consecutive k of one row / column, low
//                    half first.
// mio_mfma_f32_16x16x4(d, a, b)   the same in exact fp32 with K = 4: one element per lane.
// Lane layouts of these single-block 16 x 16 instructions (AMD Matrix Instruction Calculator,
// github.com/ROCm/amd_matrix_instruction_calculator, `--architecture cdna2 --instruction
// v_mfma_f32_16x16x16f16 --detail-instruction`: "A[i][k] Lane: 16 * floor(k / 4) + i", GPR
// (k / 2) % 2, half k % 2; "B[k][j] Lane: 16 * floor(k / 4) + j"; "C or D[i][j] GPR: i % 4,
// Lane: 16 * floor(i / 4) + j"; the bf16_1k form has the same shape and packing; for x4f32
// one k per lane: A[i][k] in lane 16 * k + i, B[k][j] in lane 16 * k + j, D as above, per the
// 16x16x4 fp32 example of AMD's lab notes "AMD matrix cores" (gpuopen.com/learn/amd-lab-notes):
// block (16, 4) = one wave, a = A[ty + 4 * tx], b = B[tx + 16 * ty], d[i] -> D[tx + 16 * i +
// 64 * ty] for row-major A (16 x 4), B (4 x 16), D (16 x 16)):
//   A[i][k]  lane i + 16 * (k / 4), item k % 4        (x4f32: lane i + 16 * k)
//   B[k][j]  lane j + 16 * (k / 4), item k % 4        (x4f32: lane j + 16 * k)
//   D[i][j]  lane j + 16 * (i / 4), item i % 4
// MIO_MFMA_EMULATE (CUDA only; ignored under HIP): mio_mfma_* are computed in software from
// exactly these layouts, so that the wave tiling, fragment addressing and epilogue of the MFMA
// path run (and are tested) on NVIDIA GPUs. Each 64-thread wave (two warps) trades its
// fragments through a small static shared scratch with a 64-thread named barrier (bar.sync
// 1 + wave, 64): every thread of a block of at most MIO_MFMA_EMU_WAVES waves must call it
// together. The scratch (4 KiB for 4 waves) adds to the kernel's dynamic shared memory, so
// launches near a shared-memory limit (48 KiB without opt-in) can fail emulated. Slow; for
// verification only.
#if defined(MIO_HIP) && \
    (defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__))
#define MIO_MFMA 1
#define MIO_MFMA_NATIVE 1
#elif defined(MIO_CUDA) && defined(MIO_MFMA_EMULATE)
#define MIO_MFMA 1
#define MIO_MFMA_NATIVE 0
#else
#define MIO_MFMA 0
#define MIO_MFMA_NATIVE 0
#endif

#if MIO_MFMA_NATIVE
typedef float mio_f32x4 __attribute__((ext_vector_type(4)));
typedef _Float16 mio_f16x4 __attribute__((ext_vector_type(4)));
typedef short mio_bf16x4 __attribute__((ext_vector_type(4)));

MIO_DEVICE void mio_mfma_f16_16x16x16(float* d, const unsigned int* a, const unsigned int* b) {
  const mio_f32x4 c = {d[0], d[1], d[2], d[3]};
  const unsigned long long a64 = (unsigned long long)a[0] | ((unsigned long long)a[1] << 32);
  const unsigned long long b64 = (unsigned long long)b[0] | ((unsigned long long)b[1] << 32);
  const mio_f32x4 r = __builtin_amdgcn_mfma_f32_16x16x16f16(
      __builtin_bit_cast(mio_f16x4, a64), __builtin_bit_cast(mio_f16x4, b64), c, 0, 0, 0);
  d[0] = r[0];
  d[1] = r[1];
  d[2] = r[2];
  d[3] = r[3];
}

MIO_DEVICE void mio_mfma_bf16_16x16x16(float* d, const unsigned int* a, const unsigned int* b) {
  const mio_f32x4 c = {d[0], d[1], d[2], d[3]};
  const unsigned long long a64 = (unsigned long long)a[0] | ((unsigned long long)a[1] << 32);
  const unsigned long long b64 = (unsigned long long)b[0] | ((unsigned long long)b[1] << 32);
  const mio_f32x4 r = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(
      __builtin_bit_cast(mio_bf16x4, a64), __builtin_bit_cast(mio_bf16x4, b64), c, 0, 0, 0);
  d[0] = r[0];
  d[1] = r[1];
  d[2] = r[2];
  d[3] = r[3];
}

MIO_DEVICE void mio_mfma_f32_16x16x4(float* d, float a, float b) {
  const mio_f32x4 c = {d[0], d[1], d[2], d[3]};
  const mio_f32x4 r = __builtin_amdgcn_mfma_f32_16x16x4f32(a, b, c, 0, 0, 0);
  d[0] = r[0];
  d[1] = r[1];
  d[2] = r[2];
  d[3] = r[3];
}
#elif MIO_MFMA
#ifndef MIO_MFMA_EMU_WAVES
#define MIO_MFMA_EMU_WAVES 4  // blocks of up to 256 threads
#endif
// The 64 threads of this thread's wave meet (both warps); barrier 0 stays __syncthreads'.
MIO_DEVICE void mio_mfma_emu_bar() {
  asm volatile("bar.sync %0, 64;\n" ::"r"(1 + (int)(threadIdx.x / 64)) : "memory");
}

// The wave's fragments (two words of A and two of B per lane) in shared memory, then each lane
// forms its four D elements (column lane % 16, rows 4 * (lane / 16) + e) from the layouts above.
// words == 2: four 16-bit elements per lane (K = 16; bf16 != 0: bf16, else fp16); words == 1:
// one fp32 per lane (K = 4).
MIO_DEVICE void mio_mfma_emu(float* d, const unsigned int* a, const unsigned int* b, int words,
                             int bf16) {
  __shared__ unsigned int mio_mfma_scratch[MIO_MFMA_EMU_WAVES][2][64][2];
  const int wave = (int)(threadIdx.x / 64), lane = (int)(threadIdx.x % 64);
  mio_mfma_emu_bar();  // the previous call's readers are done with the scratch
  for (int w = 0; w < words; ++w) {
    mio_mfma_scratch[wave][0][lane][w] = a[w];
    mio_mfma_scratch[wave][1][lane][w] = b[w];
  }
  mio_mfma_emu_bar();
  const int j = lane % 16, i0 = 4 * (lane / 16);
  const int kdim = words == 2 ? 16 : 4;
  for (int e = 0; e < 4; ++e) {
    float s = d[e];
    for (int k = 0; k < kdim; ++k) {
      float av, bv;
      if (words == 2) {
        // item k % 4 of lane (row or column) + 16 * (k / 4): word (k % 4) / 2, half k % 2
        const unsigned int aw = mio_mfma_scratch[wave][0][i0 + e + 16 * (k / 4)][(k % 4) / 2];
        const unsigned int bw = mio_mfma_scratch[wave][1][j + 16 * (k / 4)][(k % 4) / 2];
        const unsigned short ah = (unsigned short)(aw >> (16 * (k % 2)));
        const unsigned short bh = (unsigned short)(bw >> (16 * (k % 2)));
        av = bf16 ? mio_bf16_to_float(ah) : mio_half_to_float(ah);
        bv = bf16 ? mio_bf16_to_float(bh) : mio_half_to_float(bh);
      } else {
        av = __uint_as_float(mio_mfma_scratch[wave][0][i0 + e + 16 * k][0]);
        bv = __uint_as_float(mio_mfma_scratch[wave][1][j + 16 * k][0]);
      }
      s = fmaf(av, bv, s);
    }
    d[e] = s;
  }
}

MIO_DEVICE void mio_mfma_f16_16x16x16(float* d, const unsigned int* a, const unsigned int* b) {
  mio_mfma_emu(d, a, b, 2, 0);
}

MIO_DEVICE void mio_mfma_bf16_16x16x16(float* d, const unsigned int* a, const unsigned int* b) {
  mio_mfma_emu(d, a, b, 2, 1);
}

MIO_DEVICE void mio_mfma_f32_16x16x4(float* d, float a, float b) {
  const unsigned int aw = __float_as_uint(a), bw = __float_as_uint(b);
  mio_mfma_emu(d, &aw, &bw, 1, 0);
}
#endif

// ---- accumulator fragments -------------------------------------------------------------------
// One code for the epilogues of the matrix-unit kernels: a warp (MFMA: a wave) holds tiles of
// 16 rows x MIO_FRAG_TN columns, four fp32 per lane per tile. Within a tile, lane `lane` holds
// MIO_FRAG_ROWS rows, mio_frag_row(lane) + r * MIO_FRAG_RSTEP, and in each MIO_FRAG_COLS
// adjacent columns from MIO_FRAG_CMUL * mio_frag_col(lane): element r * MIO_FRAG_COLS + c of the
// lane's four. (Kernels compute mio_frag_row / _col once per thread and apply the steps in the
// epilogue: the form the mma.sync kernels had, so their code stays what it was.)
//   mma.sync m16n8 (and the scalar path, which keeps its layout): rows lane / 4 + 8 * r,
//                 columns 2 * (lane % 4) + c (MIO_FRAG_LANES 32, TN 8, ROWS 2, COLS 2);
//   MFMA 16x16:   rows 4 * (lane / 16) + r, column lane % 16 (LANES 64, TN 16, ROWS 4, COLS 1).
#if MIO_MFMA
#define MIO_FRAG_LANES 64
#define MIO_FRAG_TN 16
#define MIO_FRAG_ROWS 4
#define MIO_FRAG_RSTEP 1
#define MIO_FRAG_COLS 1
#define MIO_FRAG_CMUL 1
MIO_DEVICE int mio_frag_row(int lane) { return 4 * (lane / 16); }
MIO_DEVICE int mio_frag_col(int lane) { return lane % 16; }
#else
#define MIO_FRAG_LANES 32
#define MIO_FRAG_TN 8
#define MIO_FRAG_ROWS 2
#define MIO_FRAG_RSTEP 8
#define MIO_FRAG_COLS 2
#define MIO_FRAG_CMUL 2
MIO_DEVICE int mio_frag_row(int lane) { return lane / 4; }
MIO_DEVICE int mio_frag_col(int lane) { return lane % 4; }
#endif
