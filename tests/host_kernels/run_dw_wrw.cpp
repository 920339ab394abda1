// Runs direct.gpu_depthwise's backward weights on the CPU as its invoker launches it: the main
// kernel k(x, dw, dy, partials, params) (dw_wrw or dw_wrw_tile), then, over several splits,
// dw_wrw_reduce(dw, partials, params); through the host stand-in of miocore_gpu.h beside this
// file. Built with -DMIO_HOST_SOURCE=<kernel file> -DMIO_HOST_KERNEL=<main kernel name>.
//   run_dw_wrw PARAMS X DY W_BYTES OUT GRID_X GRID_Y BLOCK_X BLOCK_Y SHIFT SPLIT
//              REDUCE_GRID REDUCE_BLOCK_X REDUCE_BLOCK_Y
// SHIFT: elements x and dy start past a 16-byte aligned allocation; SPLIT: the partials (1:
// the main kernel writes dw itself and no reduce runs). Kernels built with MIO_TMA take the
// maps of x and dy first: two more arguments, X_MAP DY_MAP, 11 int64 each (dims, byte strides,
// box; tests/host_kernels/miocore_tma.h).
#include <cstdio>
#include <cstdlib>
#include <vector>

#define MIO_HOST_STR2(x) #x
#define MIO_HOST_STR(x) MIO_HOST_STR2(x)
#include MIO_HOST_STR(MIO_HOST_SOURCE)
#include "host_io.h"
#include "host_launch.h"
#ifndef MIO_TMA
#define MIO_TMA 0  // the kernels staged without TMA
#endif

#if MIO_TMA
// The map of the tensor at base from a file of its 11 fields.
static bool read_map(const char* path, const void* base, MioTensorMap& map) {
  const std::vector<char> mv = read_all(path);
  long long fields[11];
  if (mv.size() != sizeof fields) return false;
  memcpy(fields, mv.data(), sizeof fields);
  map = MioTensorMap{(const unsigned char*)base, {}, {}, {}, (int)sizeof(mio_t)};
  for (int i = 0; i < 4; ++i) map.dims[i] = fields[i];
  for (int i = 0; i < 3; ++i) map.strides[i] = fields[4 + i];
  for (int i = 0; i < 4; ++i) map.box[i] = (int)fields[7 + i];
  return true;
}
#endif

int main(int argc, char** argv) {
  if (argc != 15 + (MIO_TMA ? 2 : 0)) return 2;
  const std::vector<char> pv = read_all(argv[1]), xv = read_all(argv[2]), dyv = read_all(argv[3]);
  const size_t w_bytes = strtoull(argv[4], nullptr, 10);
  const MioDim3 grid{(unsigned)atoi(argv[6]), (unsigned)atoi(argv[7]), 1};
  const MioDim3 block{(unsigned)atoi(argv[8]), (unsigned)atoi(argv[9]), 1};
  const int shift = atoi(argv[10]);
  const int split = atoi(argv[11]);
  const MioDim3 rgrid{(unsigned)atoi(argv[12]), 1, 1};
  const MioDim3 rblock{(unsigned)atoi(argv[13]), (unsigned)atoi(argv[14]), 1};
  MioDwParams p;
  if (pv.size() != sizeof p) return 3;
  memcpy(&p, pv.data(), sizeof p);
  std::vector<uint4> x_store(xv.size() / 16 + 2), dy_store(dyv.size() / 16 + 2);
  std::vector<uint4> w_store(w_bytes / 16 + 2);
  mio_t* x = (mio_t*)x_store.data() + shift;
  mio_t* dy = (mio_t*)dy_store.data() + shift;
  mio_t* w = (mio_t*)w_store.data();
  memcpy(x, xv.data(), xv.size());
  memcpy(dy, dyv.data(), dyv.size());
  memset(w, 0xff, w_bytes);  // NaN in every element type: an element never written fails
  // the partials start as NaN too: every split must write every element it owns
  const size_t wcount = (size_t)(p.b.len[1] * MIO_TAPS);
  std::vector<float> part(split > 1 ? (size_t)split * wcount : 1, __uint_as_float(0x7fc00000u));
  float* pp = split > 1 ? part.data() : nullptr;
#if MIO_TMA
  MioTensorMap x_map, dy_map;
  if (!read_map(argv[15], x, x_map) || !read_map(argv[16], dy, dy_map)) return 5;
  mio_host_launch(grid, block, [&] { MIO_HOST_KERNEL(x_map, dy_map, x, w, dy, pp, p); });
#else
  mio_host_launch(grid, block, [&] { MIO_HOST_KERNEL(x, w, dy, pp, p); });
#endif
  if (split > 1) mio_host_launch(rgrid, rblock, [&] { dw_wrw_reduce(w, pp, p); });
  if (!write_all(argv[5], w, w_bytes)) return 4;
  return 0;
}
