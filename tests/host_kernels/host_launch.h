// A launch of a kernel on the host (the stand-in miocore_gpu.h): one std::thread per GPU
// thread of a block; every thread runs the kernel for each block in turn and waits for the
// others before the next, so a block's shared memory (a function-static array) serves the
// blocks one after another and its barriers are met by all of its threads.
#pragma once
#include <thread>
#include <vector>

template <class Kernel>
static void mio_host_launch(MioDim3 grid, MioDim3 block, Kernel kernel) {
  gridDim = grid;
  blockDim = block;
  mio_host_barrier.count = block.x * block.y;
  std::vector<std::thread> threads;
  for (unsigned ty = 0; ty < block.y; ++ty) {
    for (unsigned tx = 0; tx < block.x; ++tx) {
      threads.emplace_back([=] {
        threadIdx.x = tx;
        threadIdx.y = ty;
        for (unsigned by = 0; by < grid.y; ++by) {
          for (unsigned bx = 0; bx < grid.x; ++bx) {
            blockIdx.x = bx;
            blockIdx.y = by;
            kernel();
            mio_host_barrier.wait();
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
}
