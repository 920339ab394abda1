// What the warpgroup-MMA kernels (igemm_wgmma.cu, igemm_wgmma_wrw.cu) share: the element type,
// the 5-D and multicast TMA copies (the map, mbarriers and 4-D copies: miocore_tma.h), the
// shared-memory matrix descriptors of wgmma's 128-byte swizzled layouts (sm_90a) and the paired
// stores.
#pragma once

#include "miocore_tma.h"  // the tensor map, mbarriers and 4-D TMA copies

// The element in memory: fp16/bf16 bits, or fp32 (MIO_DTYPE_TF32: the tensor cores read it as
// TF32, the low 13 mantissa bits ignored).
#if defined(MIO_DTYPE_TF32)
typedef float mio_elem;
#define MIO_ELEM_BYTES 4
#else
typedef unsigned short mio_elem;
#define MIO_ELEM_BYTES 2
#endif

__device__ __forceinline__ void bar_arrive(unsigned long long* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// Arrive on the barrier at the same place in the shared memory of cluster block ``rank``.
__device__ __forceinline__ void bar_arrive_at(unsigned long long* bar, unsigned rank) {
  asm volatile(
      "{\n.reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(
          smem_addr(bar)),
      "r"(rank)
      : "memory");
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// 3-D problems (MIO_3D): the activation's map is 5-D (c, w, h, d, n).
__device__ __forceinline__ void tma_load_5d(void* dst, const MioTensorMap* map,
                                            unsigned long long* bar, int c0, int c1, int c2,
                                            int c3, int c4) {
  asm volatile(
      "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
      "r"(c2), "r"(c3), "r"(c4)
      : "memory");
}

// The box lands at the same place in every cluster block of ``mask``, each barrier told.
__device__ __forceinline__ void tma_load_3d_multicast(void* dst, const MioTensorMap* map,
                                                      unsigned long long* bar, int c0, int c1,
                                                      int c2, unsigned short mask) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
      "r"(c2), "h"(mask)
      : "memory");
}

__device__ __forceinline__ void tma_load_3d(void* dst, const MioTensorMap* map,
                                            unsigned long long* bar, int c0, int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
      "r"(c2)
      : "memory");
}

// A shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart.
__device__ __forceinline__ unsigned long long smem_desc(const void* p) {
  unsigned long long addr = smem_addr(p);
  return ((addr & 0x3FFFFull) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// The same for an MN-major operand (M or N contiguous in shared memory): ``lbo`` bytes from
// one 64-element chunk of M or N to the next, ``sbo`` from one 8-row group of K to the next.
__device__ __forceinline__ unsigned long long smem_desc_mn_at(const void* p, unsigned lbo,
                                                              unsigned sbo) {
  unsigned long long addr = smem_addr(p);
  return ((addr & 0x3FFFFull) >> 4) | ((unsigned long long)(lbo >> 4) << 16) |
         ((unsigned long long)(sbo >> 4) << 32) | (1ull << 62);
}

// Two adjacent output channels, converted to the element type: one 4-byte store (fp16/bf16)
// or one 8-byte store (fp32).
__device__ __forceinline__ void store_pair(mio_elem* at, float lo, float hi) {
#if defined(MIO_DTYPE_TF32)
  *reinterpret_cast<float2*>(at) = make_float2(lo, hi);
#else
  unsigned out;
#if defined(MIO_DTYPE_BF16)
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(out) : "f"(hi), "f"(lo));
#endif
  *reinterpret_cast<unsigned*>(at) = out;
#endif
}
