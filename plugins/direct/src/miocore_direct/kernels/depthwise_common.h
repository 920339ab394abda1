// direct.gpu_depthwise's shared part: the compile-time parameters' defaults (their meaning:
// depthwise.cu's header), the kernels' parameter struct, element-vector loads and stores, the
// filter tap read. Included by depthwise.cu and depthwise_rows.cu.
#pragma once
#include "miocore_gpu.h"

#ifndef MIO_FZ
#define MIO_FZ 1
#endif
#ifndef MIO_FY
#define MIO_FY 3
#endif
#ifndef MIO_FX
#define MIO_FX 3
#endif
#ifndef MIO_SD
#define MIO_SD 1
#endif
#ifndef MIO_SH
#define MIO_SH 1
#endif
#ifndef MIO_SW
#define MIO_SW 1
#endif
#ifndef MIO_DD
#define MIO_DD 1
#endif
#ifndef MIO_DH
#define MIO_DH 1
#endif
#ifndef MIO_DW
#define MIO_DW 1
#endif
#ifndef MIO_R
#define MIO_R 1
#endif
#ifndef MIO_M
#define MIO_M 1
#endif
#ifndef MIO_FLIP
#define MIO_FLIP 0
#endif
#ifndef MIO_GATHER
#define MIO_GATHER 0
#endif
#ifndef MIO_VEC
#define MIO_VEC 1
#endif
#ifndef MIO_PIX
#define MIO_PIX 1
#endif
#ifndef MIO_WREG
#define MIO_WREG 1
#endif
#ifndef MIO_WSH
#define MIO_WSH 0
#endif
#ifndef MIO_CT
#define MIO_CT 32
#endif
#ifndef MIO_TW
#define MIO_TW 32
#endif
#ifndef MIO_BY
#define MIO_BY 8
#endif
#ifndef MIO_PY
#define MIO_PY 1
#endif
#ifndef MIO_PP
#define MIO_PP 1
#endif
#ifndef MIO_TC
#define MIO_TC 9
#endif
#ifndef MIO_WRW_TILE
#define MIO_WRW_TILE 0
#endif
#define MIO_TAPS (MIO_FZ * MIO_FY * MIO_FX)
// input columns the MIO_PIX outputs of one dw_nhwc thread read along W
#define MIO_WIN ((MIO_PIX - 1) * MIO_SW + (MIO_FX - 1) * MIO_DW + 1)
// dw_nhwc: output rows per thread (MIO_PY) and the input rows they read
#define MIO_ROWS ((MIO_PY - 1) * MIO_SH + (MIO_FY - 1) * MIO_DH + 1)

struct MioDwParams {
  MioTensor5 a;  // read: x (forward, backward weights) or dy (backward data)
  MioTensor5 b;  // written: y (forward) or dx (backward data); backward weights: dy (read)
  MioTensor5 w;  // filter (M*C, 1, FZ, FY, FX)
  mio_index pad_d;
  mio_index pad_h;
  mio_index pad_w;
  mio_index groups_w;  // dw_nhwc: pixel groups along W (ceil(W / PIX))
  mio_index items;     // dw_nhwc: pixel groups of the written tensor; dw_wrw: dy pixels
  mio_index tiles_w;   // dw_nchw: tiles along W
  mio_index tiles;     // dw_nchw: tiles per plane
  mio_index split;     // dw_wrw: blocks along the reduction
};

// ---- element vectors: MIO_VEC consecutive elements in one load / store ---------------------
#if defined(MIO_DTYPE_FP32)
#define MIO_ESIZE 4
#else
#define MIO_ESIZE 2
#endif
#define MIO_VBYTES (MIO_VEC * MIO_ESIZE)

MIO_DEVICE float mio_word_lo(unsigned int u) {
#if defined(MIO_DTYPE_FP32)
  return __uint_as_float(u);
#elif defined(MIO_DTYPE_FP16)
  return mio_half_to_float((unsigned short)(u & 0xffffu));
#else
  return mio_bf16_to_float((unsigned short)(u & 0xffffu));
#endif
}

MIO_DEVICE float mio_word_hi(unsigned int u) {
#if defined(MIO_DTYPE_FP16)
  return mio_half_to_float((unsigned short)(u >> 16));
#else
  return mio_bf16_to_float((unsigned short)(u >> 16));
#endif
}

MIO_DEVICE void mio_unpack(const unsigned int* u, int words, float* v) {
#pragma unroll
  for (int i = 0; i < words; ++i) {
#if defined(MIO_DTYPE_FP32)
    v[i] = __uint_as_float(u[i]);
#else
    v[2 * i] = mio_word_lo(u[i]);
    v[2 * i + 1] = mio_word_hi(u[i]);
#endif
  }
}

MIO_DEVICE unsigned int mio_pack_word(const float* v) {
#if defined(MIO_DTYPE_FP32)
  return __float_as_uint(v[0]);
#elif defined(MIO_CUDA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  // both halves rounded to nearest even in one instruction (v[1] the upper half), as the
  // wgmma kernels' paired stores do
  unsigned int out;
#if defined(MIO_DTYPE_FP16)
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(v[1]), "f"(v[0]));
#else
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(v[1]), "f"(v[0]));
#endif
  return out;
#elif defined(MIO_DTYPE_FP16)
  return (unsigned int)mio_float_to_half(v[0]) | ((unsigned int)mio_float_to_half(v[1]) << 16);
#else
  return (unsigned int)mio_float_to_bf16(v[0]) | ((unsigned int)mio_float_to_bf16(v[1]) << 16);
#endif
}

// BYTES (16, 8 or 4) of consecutive elements as floats in one access (the caller guarantees
// the alignment; 4 bytes: two 16-bit elements).
template <int BYTES>
MIO_DEVICE void mio_load_words(const mio_t* p, float* v) {
  if constexpr (BYTES == 16) {
    const uint4 r = *(const uint4*)p;
    const unsigned int u[4] = {r.x, r.y, r.z, r.w};
    mio_unpack(u, 4, v);
  } else if constexpr (BYTES == 8) {
    const uint2 r = *(const uint2*)p;
    const unsigned int u[2] = {r.x, r.y};
    mio_unpack(u, 2, v);
  } else {
    const unsigned int u[1] = {*(const unsigned int*)p};
    mio_unpack(u, 1, v);
  }
}

// Load MIO_VEC consecutive elements as float (one 16/8/4-byte access; the host guarantees
// the alignment whenever MIO_VEC > 1).
MIO_DEVICE void mio_loadv(const mio_t* p, float* v) {
#if MIO_VBYTES == 16 || MIO_VBYTES == 8 || (MIO_VBYTES == 4 && MIO_VEC == 2)
  mio_load_words<MIO_VBYTES>(p, v);
#else
#pragma unroll
  for (int e = 0; e < MIO_VEC; ++e) v[e] = mio_load(p + e);
#endif
}

MIO_DEVICE void mio_storev(mio_t* p, const float* v) {
#if MIO_VBYTES == 16 || MIO_VBYTES == 8 || (MIO_VBYTES == 4 && MIO_VEC == 2)
  constexpr int words = MIO_VBYTES / 4;
  constexpr int per = 4 / MIO_ESIZE;
  unsigned int u[words];
#pragma unroll
  for (int i = 0; i < words; ++i) u[i] = mio_pack_word(v + i * per);
#if MIO_VBYTES == 16
  *(uint4*)p = make_uint4(u[0], u[1], u[2], u[3]);
#elif MIO_VBYTES == 8
  *(uint2*)p = make_uint2(u[0], u[1]);
#else
  *(unsigned int*)p = u[0];
#endif
#else
#pragma unroll
  for (int e = 0; e < MIO_VEC; ++e) mio_store(p + e, v[e]);
#endif
}

// MIO_VEC consecutive floats of shared memory (16-byte aligned when MIO_VEC >= 4) as vectors.
MIO_DEVICE void mio_shared_vec(const float* s, float* v) {
#if MIO_VEC % 4 == 0
#pragma unroll
  for (int i = 0; i < MIO_VEC; i += 4) {
    const float4 q = *(const float4*)(s + i);
    v[i] = q.x;
    v[i + 1] = q.y;
    v[i + 2] = q.z;
    v[i + 3] = q.w;
  }
#elif MIO_VEC == 2
  const float2 q = *(const float2*)s;
  v[0] = q.x;
  v[1] = q.y;
#else
#pragma unroll
  for (int i = 0; i < MIO_VEC; ++i) v[i] = s[i];
#endif
}

// Filter element (channel kw, tap (fz, fy, fx) as the kernel sees it; flipped when MIO_FLIP).
MIO_DEVICE float mio_wtap(const mio_t* w, const MioTensor5& t, mio_index kw, int fz, int fy,
                          int fx) {
#if MIO_FLIP
  fz = MIO_FZ - 1 - fz;
  fy = MIO_FY - 1 - fy;
  fx = MIO_FX - 1 - fx;
#endif
  return mio_load(w + kw * t.stride[0] + fz * t.stride[2] + fy * t.stride[3] + fx * t.stride[4]);
}

MIO_DEVICE mio_index mio_floordiv(mio_index a, mio_index b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}


// ---- 8-byte chunks of rows (dw_nchw's staging, dw_nchw_rows' loads and stores) -------------
#ifndef MIO_NV
#define MIO_NV 1
#endif
#if MIO_NV > 1
// Whether every chunk of MIO_NV elements the staging reads is one aligned 8-byte load: rows
// contiguous, every stride and the base whole chunks.
MIO_DEVICE bool mio_nchw_chunked(const mio_t* a, const MioTensor5& t) {
  return t.stride[4] == 1 && t.stride[3] % MIO_NV == 0 && t.stride[2] % MIO_NV == 0 &&
         t.stride[1] % MIO_NV == 0 && t.stride[0] % MIO_NV == 0 &&
         ((unsigned long long)a) % (MIO_NV * MIO_ESIZE) == 0;
}

// Columns col .. col + MIO_NV - 1 of a row of aw elements as floats: one aligned 8-byte (or
// 4-byte: 16-bit rows of a width that is even but not a multiple of 4) load where the chunk
// lies inside the row, else element by element with zeros outside it.
MIO_DEVICE void mio_load_chunk(const mio_t* row, int col, int aw, float* v) {
  if (col >= 0 && col + MIO_NV <= aw) {
#if MIO_NV * MIO_ESIZE == 8
    const uint2 q = *(const uint2*)(row + col);
    const unsigned int u[2] = {q.x, q.y};
    mio_unpack(u, 2, v);
#elif MIO_NV * MIO_ESIZE == 4
    const unsigned int u[1] = {*(const unsigned int*)(row + col)};
    mio_unpack(u, 1, v);
#else
#error "MIO_NV: 8-byte or 4-byte chunks only"
#endif
  } else {
#pragma unroll
    for (int e = 0; e < MIO_NV; ++e) {
      v[e] = col + e >= 0 && col + e < aw ? mio_load(row + col + e) : 0.0f;
    }
  }
}
#endif
