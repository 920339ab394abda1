// Runs one of direct.gpu_depthwise's kernels k(a, w, b, params) on the CPU: a block's threads
// as std::threads that meet at its barriers, the blocks one after another, through the host
// stand-in of miocore_gpu.h beside this file. Built with -DMIO_HOST_SOURCE=<kernel file>
// -DMIO_HOST_KERNEL=<kernel name> beside the kernel's own options.
//   run_dw_block PARAMS A W B_BYTES OUT GRID_X GRID_Y BLOCK_X BLOCK_Y SHIFT [MAP]
// PARAMS: the packed MioDwParams; A, W: raw element files; OUT: where the written tensor goes;
// SHIFT: elements the activation buffers start past a 16-byte aligned allocation; MAP (kernels
// built with MIO_TMA, which take the read tensor's map first): 11 int64, the map's dims,
// byte strides and box (tests/host_kernels/miocore_tma.h).
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MIO_HOST_STR2(x) #x
#define MIO_HOST_STR(x) MIO_HOST_STR2(x)
#include MIO_HOST_STR(MIO_HOST_SOURCE)
#include "host_io.h"
#include "host_launch.h"
#ifndef MIO_TMA
#define MIO_TMA 0  // the kernel sources without TMA staging
#endif

int main(int argc, char** argv) {
  if (argc != 11 + (MIO_TMA ? 1 : 0)) return 2;
  const std::vector<char> pv = read_all(argv[1]), av = read_all(argv[2]), wv = read_all(argv[3]);
  const size_t b_bytes = strtoull(argv[4], nullptr, 10);
  const MioDim3 grid{(unsigned)atoi(argv[6]), (unsigned)atoi(argv[7]), 1};
  const MioDim3 block{(unsigned)atoi(argv[8]), (unsigned)atoi(argv[9]), 1};
  const int shift = atoi(argv[10]);
  MioDwParams p;
  if (pv.size() != sizeof p) return 3;
  memcpy(&p, pv.data(), sizeof p);
  // 16-byte aligned storage, then `shift` elements in
  std::vector<uint4> a_store(av.size() / 16 + 2), w_store(wv.size() / 16 + 2);
  std::vector<uint4> b_store(b_bytes / 16 + 2);
  mio_t* a = (mio_t*)a_store.data() + shift;
  mio_t* w = (mio_t*)w_store.data();
  mio_t* b = (mio_t*)b_store.data() + shift;
  memcpy(a, av.data(), av.size());
  memcpy(w, wv.data(), wv.size());
  memset(b, 0xff, b_bytes);  // NaN in every element type: an element never written fails
#if MIO_TMA
  const std::vector<char> mv = read_all(argv[11]);
  long long fields[11];
  if (mv.size() != sizeof fields) return 5;
  memcpy(fields, mv.data(), sizeof fields);
  MioTensorMap map{(const unsigned char*)a, {}, {}, {}, (int)sizeof(mio_t)};
  for (int i = 0; i < 4; ++i) map.dims[i] = fields[i];
  for (int i = 0; i < 3; ++i) map.strides[i] = fields[4 + i];
  for (int i = 0; i < 4; ++i) map.box[i] = (int)fields[7 + i];
  mio_host_launch(grid, block, [&] { MIO_HOST_KERNEL(map, a, w, b, p); });
#else
  mio_host_launch(grid, block, [&] { MIO_HOST_KERNEL(a, w, b, p); });
#endif
  if (!write_all(argv[5], b, b_bytes)) return 4;
  return 0;
}
