// Runs direct.gpu_depthwise's dw_nchw_rows on the CPU: every thread of a (smaller) grid in
// turn, through the host stand-in of miocore_gpu.h beside this file.
//   run_dw_nchw_rows PARAMS A W B_BYTES OUT GRID BLOCK SHIFT
// PARAMS: the packed MioDwParams; A, W: raw element files; OUT: where the written tensor goes;
// SHIFT: elements every buffer starts past an aligned allocation (1: the unchunked path).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "depthwise_rows.cu"
#include "host_io.h"

int main(int argc, char** argv) {
  if (argc != 9) return 2;
  const std::vector<char> pv = read_all(argv[1]), av = read_all(argv[2]), wv = read_all(argv[3]);
  const size_t b_bytes = strtoull(argv[4], nullptr, 10);
  const unsigned grid = (unsigned)atoi(argv[6]), block = (unsigned)atoi(argv[7]);
  const int shift = atoi(argv[8]);
  MioDwParams p;
  if (pv.size() != sizeof p) return 3;
  memcpy(&p, pv.data(), sizeof p);
  // 16-byte aligned storage (vectors of uint4), then `shift` elements in
  std::vector<uint4> a_store(av.size() / 16 + 2), w_store(wv.size() / 16 + 2);
  std::vector<uint4> b_store(b_bytes / 16 + 2);
  mio_t* a = (mio_t*)a_store.data() + shift;
  mio_t* w = (mio_t*)w_store.data();
  mio_t* b = (mio_t*)b_store.data() + shift;
  memcpy(a, av.data(), av.size());
  memcpy(w, wv.data(), wv.size());
  memset(b, 0xff, b_bytes);  // NaN in every element type: an element never written fails
  blockDim.x = block;
  gridDim.x = grid;
  for (unsigned bx = 0; bx < grid; ++bx) {
    blockIdx.x = bx;
    for (unsigned t = 0; t < block; ++t) {
      threadIdx.x = t;
      dw_nchw_rows(a, w, b, p);
    }
  }
  if (!write_all(argv[5], b, b_bytes)) return 4;
  return 0;
}
