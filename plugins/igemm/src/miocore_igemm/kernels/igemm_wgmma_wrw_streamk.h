// Stream-K work shares of igemm.gpu_wgmma_wrw (MIO_STREAMK), shared by the kernel, its reduce
// and the host test that checks them (tests/host_kernels/run_wrw_streamk.cpp).
//
// The work is the flattened space of (tile, pixel box) iterations, tile-major: tile t owns
// iterations [t * boxes, (t + 1) * boxes). Block b of ``blocks`` owns the contiguous share
// [b * total / blocks, (b + 1) * total / blocks), so every block does the same work to one
// iteration, whatever the tile count: a layer of 72 tiles on 132 SMs no longer leaves 60 idle
// (split-K in equal parts can only pick a part count). A share crosses tiles: each piece of one
// tile is a segment, summed into its own fp32 slab (the tile's ``ordinal``-th contributor),
// and the reduce adds a tile's contributors in order (deterministic).
#pragma once

#ifndef MIO_SK_FN
#define MIO_SK_FN __host__ __device__ __forceinline__
#endif

// The block whose share holds iteration ``x``: the largest b with b * total / blocks <= x.
MIO_SK_FN long long mio_sk_owner(long long x, long long total, long long blocks) {
  return ((x + 1) * blocks - 1) / total;
}

// One segment: boxes [lo, hi) of tile ``tile``, its ``ordinal``-th contributor.
struct MioSkSegment {
  long long tile;
  int lo, hi, ordinal;
};

// The ``index``-th segment of block ``b``'s share (tiles in order); false past its last one.
MIO_SK_FN bool mio_sk_segment(long long tiles, long long boxes, long long blocks, long long b,
                              int index, MioSkSegment* s) {
  const long long total = tiles * boxes;
  const long long i0 = b * total / blocks, i1 = (b + 1) * total / blocks;
  const long long t = i0 / boxes + index;
  const long long start = t * boxes > i0 ? t * boxes : i0;
  if (start >= i1) return false;
  const long long end = (t + 1) * boxes < i1 ? (t + 1) * boxes : i1;
  s->tile = t;
  s->lo = (int)(start - t * boxes);
  s->hi = (int)(end - t * boxes);
  s->ordinal = (int)(b - mio_sk_owner(t * boxes, total, blocks));
  return true;
}

// The blocks whose shares hold some of tile ``t``: the slabs the reduce adds for it.
MIO_SK_FN int mio_sk_contributors(long long t, long long boxes, long long total,
                                  long long blocks) {
  return (int)(mio_sk_owner(t * boxes + boxes - 1, total, blocks) -
               mio_sk_owner(t * boxes, total, blocks) + 1);
}
