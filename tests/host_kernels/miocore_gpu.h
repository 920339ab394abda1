// A host stand-in for kernels/miocore_gpu.h: enough of the portability header to build a
// depthwise kernel as plain C++ and run its grid on the CPU, so its indexing is checked against
// the float64 reference without a GPU (tests/test_gpu_depthwise_host.py). run_dw_block.cpp
// runs each block's threads as std::threads meeting at mio_host_barrier (__syncthreads), the
// blocks one after another (so a function-static array is the block's shared memory). fp16
// through the compiler's _Float16, bf16 by bits.
#pragma once
#include <condition_variable>
#include <cstring>
#include <mutex>

typedef long long mio_index;
#define MIO_KERNEL
#define MIO_DEVICE inline  // member functions too: not static
#define __launch_bounds__(...)
#define __shared__ static  // blocks run one at a time: one array serves each in turn
#define __syncthreads() mio_host_barrier.wait()
#define __forceinline__ inline
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))

struct MioDim3 {
  unsigned x = 0, y = 0, z = 0;
};
static thread_local MioDim3 threadIdx, blockIdx;
static MioDim3 blockDim, gridDim;

// A reusable barrier for one block's threads (C++17: no std::barrier).
struct MioHostBarrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned count = 1, waiting = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> lock(m);
    const unsigned gen = generation;
    if (++waiting == count) {
      waiting = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return gen != generation; });
    }
  }
};
static MioHostBarrier mio_host_barrier;

struct uint2 {
  unsigned int x, y;
};
struct uint4 {
  unsigned int x, y, z, w;
};
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
static inline uint2 make_uint2(unsigned a, unsigned b) { return uint2{a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) {
  return uint4{a, b, c, d};
}
static inline float __uint_as_float(unsigned u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

MIO_DEVICE float mio_half_to_float(unsigned short h) {
  _Float16 v;
  memcpy(&v, &h, 2);
  return (float)v;
}
MIO_DEVICE unsigned short mio_float_to_half(float f) {
  const _Float16 v = (_Float16)f;
  unsigned short h;
  memcpy(&h, &v, 2);
  return h;
}
MIO_DEVICE float mio_bf16_to_float(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
MIO_DEVICE unsigned short mio_float_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (finite values only here)
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

struct MioTensor5 {
  mio_index len[5];
  mio_index stride[5];
};

#define MIO_GRID_LOOP(i, total)                                                        \
  for (mio_index i = (mio_index)blockIdx.x * blockDim.x + threadIdx.x; i < (total);    \
       i += (mio_index)gridDim.x * blockDim.x)

// cp.async's host form: a plain 16-byte copy (zeros past nbytes); groups complete at once.
MIO_DEVICE void mio_cp_async16(void* dst, const void* src, int nbytes) {
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (nbytes > 0) memcpy(&v, src, 16);
  memcpy(dst, &v, 16);
}
#define mio_cp_async_commit() ((void)0)
#define mio_cp_async_wait(n) ((void)0)
