// A host stand-in for kernels/miocore_tma.h: the tensor map as the fields the host encodes it
// from, a TMA copy as a plain box copy (zeros outside the tensor, the box dense in shared
// memory, as SWIZZLE_NONE lays it), and an mbarrier as the bytes its phase still expects (high
// 32 bits) and the phases completed (low 32 bits): bar_expect adds the bytes, each copy takes
// its box's off, and the copy that brings them to zero completes the phase, which bar_wait
// spins on by parity. So a kernel's TMA staging (coordinates, boxes, buffers, the bytes each
// phase expects and the phases) runs on the CPU. Built by run_dw_block.cpp with MIO_TMA; the test writes the map's
// fields from the solver's own tensor-map description.
#pragma once
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

struct MioTensorMap {
  const unsigned char* base;
  long long dims[4];     // innermost first
  long long strides[3];  // bytes, of dims 1-3
  int box[4];
  int esize;  // bytes of an element
};

MIO_DEVICE void bar_init(unsigned long long* bar, unsigned) {
  __atomic_store_n(bar, 0ull, __ATOMIC_SEQ_CST);
}
MIO_DEVICE void bar_init_fence() {}
MIO_DEVICE void bar_expect(unsigned long long* bar, unsigned bytes) {
  __atomic_fetch_add(bar, (unsigned long long)bytes << 32, __ATOMIC_SEQ_CST);
}
MIO_DEVICE void fence_proxy_async_shared() {}

// Returns once the phase of this parity has completed (completed phases: the count); a wait
// for a phase no copy completes aborts the run instead of hanging it.
MIO_DEVICE void bar_wait(unsigned long long* bar, unsigned parity) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((__atomic_load_n(bar, __ATOMIC_SEQ_CST) & 1ull) == parity) {
    if (std::chrono::steady_clock::now() > deadline) {
      fprintf(stderr, "bar_wait: phase of parity %u never completed\n", parity);
      abort();
    }
    std::this_thread::yield();
  }
}

MIO_DEVICE void tma_load_4d(void* dst, const MioTensorMap* map, unsigned long long* bar, int c0,
                            int c1, int c2, int c3) {
  const MioTensorMap& m = *map;
  unsigned char* out = (unsigned char*)dst;
  for (int z = 0; z < m.box[3]; ++z)
    for (int y = 0; y < m.box[2]; ++y)
      for (int x = 0; x < m.box[1]; ++x)
        for (int e = 0; e < m.box[0]; ++e) {
          const long long at[4] = {c0 + e, c1 + x, c2 + y, c3 + z};
          bool inside = true;
          for (int d = 0; d < 4; ++d) inside = inside && at[d] >= 0 && at[d] < m.dims[d];
          if (inside) {
            const unsigned char* src = m.base + at[0] * m.esize + at[1] * m.strides[0] +
                                       at[2] * m.strides[1] + at[3] * m.strides[2];
            memcpy(out, src, m.esize);
          } else {
            memset(out, 0, m.esize);
          }
          out += m.esize;
        }
  const unsigned long long bytes = (unsigned long long)(out - (unsigned char*)dst);
  const unsigned long long before = __atomic_fetch_sub(bar, bytes << 32, __ATOMIC_SEQ_CST);
  if ((before >> 32) == bytes) __atomic_fetch_add(bar, 1ull, __ATOMIC_SEQ_CST);  // all landed
}
