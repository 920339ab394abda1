// Prints the stream-K shares of igemm.gpu_wgmma_wrw (kernels/igemm_wgmma_wrw_streamk.h, the
// header the kernel and its reduce include) for ``tiles boxes blocks`` given on the command
// line: one line "s block tile lo hi ordinal" per segment, then "c tile contributors" per tile.
#define __host__
#define __device__
#define __forceinline__ inline
#include <cstdio>
#include <cstdlib>

#include "igemm_wgmma_wrw_streamk.h"

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  const long long tiles = atoll(argv[1]), boxes = atoll(argv[2]), blocks = atoll(argv[3]);
  for (long long b = 0; b < blocks; ++b) {
    MioSkSegment s;
    for (int i = 0; mio_sk_segment(tiles, boxes, blocks, b, i, &s); ++i) {
      printf("s %lld %lld %d %d %d\n", b, s.tile, s.lo, s.hi, s.ordinal);
    }
  }
  for (long long t = 0; t < tiles; ++t) {
    printf("c %lld %d\n", t, mio_sk_contributors(t, boxes, tiles * boxes, blocks));
  }
  return 0;
}
