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
//                                                  MMA on sm_80+, MFMA on gfx90a/gfx94x); the
//                                                  intrinsics themselves come with the first
//                                                  solver that uses them, behind this switch.
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
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN stays a (quiet) NaN
    return (unsigned short)((u >> 16) | 0x40u);
  }
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return (unsigned short)(u >> 16);
}

#if defined(MIO_DTYPE_FP16)
typedef unsigned short mio_t;
MIO_DEVICE float mio_load(const mio_t* p) { return mio_half_to_float(*p); }
MIO_DEVICE void mio_store(mio_t* p, float v) { *p = mio_float_to_half(v); }
#elif defined(MIO_DTYPE_BF16)
typedef unsigned short mio_t;
MIO_DEVICE float mio_load(const mio_t* p) { return mio_bf16_to_float(*p); }
MIO_DEVICE void mio_store(mio_t* p, float v) { *p = mio_float_to_bf16(v); }
#else
typedef float mio_t;
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
//                    layout) for HIP and older GPUs. MIO_HAS_MMA stays the coarse "a matrix
//                    unit exists" switch (MFMA on gfx90a/gfx94x is not used yet).
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
