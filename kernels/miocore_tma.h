// miocore TMA header: the tensor memory accelerator of NVIDIA sm_90 and later, for any kernel
// that stages tiles through it (CUDA only; a kernel includes it under its own sm_90 switch).
//
//   MioTensorMap   a CUtensorMap (128 opaque bytes made on the host by cuTensorMapEncodeTiled,
//                  miocore/backends/cuda_tma.py), taken by value as a __grid_constant__
//                  kernel argument
//   bar_*          shared-memory mbarriers: init (and its fence), arrive expecting a byte
//                  count, wait on a phase
//   tma_load_4d    one box of a 4-D map copied into shared memory, completing on a barrier
#pragma once

struct alignas(64) MioTensorMap {
  unsigned long long opaque[16];
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(unsigned long long* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count));
}

// Makes barriers just initialized visible to the other threads and the asynchronous proxy
// (before the block's barrier that follows their init).
__device__ __forceinline__ void bar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void bar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void bar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done;
  do {
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// Orders this thread's earlier generic-proxy accesses of shared memory (reads of a buffer, a
// barrier's init) before the asynchronous proxy's (a TMA copy into that buffer).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void tma_load_4d(void* dst, const MioTensorMap* map,
                                            unsigned long long* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<unsigned long long>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1),
      "r"(c2), "r"(c3)
      : "memory");
}
