// Layout copies around the channels-last tensor-core kernels (igemm.gpu_wgmma and
// igemm.gpu_wgmma_wrw): a 4-D tensor [n][c][h][w] in any strides copied into a packed
// channels-last buffer [n][h][w][c] (to_nhwc), or a packed channels-last result copied out
// into the caller's tensor in its strides. A filter [k][c][r][s] is the same copy with k as
// n and the taps as pixels.
//
// Each block moves a tile of 64 channels x 64 pixels of one image through shared memory,
// kept pixel-major ([pixel][channel], as the packed side lies). The packed side moves in
// 32-bit words (two 16-bit channels, or one fp32), so each warp's access is one full
// 128-byte line; the strided side moves single elements along the pixels, 32 consecutive
// pixels per warp access. Every thread issues all its loads before its first store (16 of
// them on the strided side), which is what keeps enough bytes in flight for the memory's
// rate: the first version (32 x 32 tiles, four loads per thread) ran at a quarter of it.
// Grid: x over 64-pixel tiles, y over 64-channel tiles, z over n; 32 x 8 threads.
//
// Compile-time: the element type (MIO_DTYPE_FP16, MIO_DTYPE_BF16: 16-bit; MIO_DTYPE_TF32:
// fp32); only bits are moved. The packed side's channel count is a multiple of the words'
// elements (the solvers' channel rule makes it a multiple of 8 for 16-bit data).
#if defined(MIO_DTYPE_TF32)
typedef float mio_elem;
#else
typedef unsigned short mio_elem;
#endif

#define MIO_TILE 64
#define MIO_PER_WORD (4 / (int)sizeof(mio_elem))
#define MIO_ROW_WORDS (MIO_TILE / MIO_PER_WORD)  // words of one pixel's 64 channels
// One pixel's row in shared memory: 64 channels and one spare word, so that the strided
// side's 32 lanes (32 pixels, one channel) fall on 32 banks.
#define MIO_PITCH (MIO_TILE + MIO_PER_WORD)

struct MioLayoutGeom {
  int n, c, hw, w;  // images, channels, pixels per image, image width (a pixel's row and column)
  int to_nhwc;      // 1: strided -> packed channels-last; 0: packed channels-last -> strided
  long long sn, sc, sh, sw;  // the strided tensor's strides (elements)
};

// Where pixel p of an image lies in the strided tensor (elements from the channel's start).
__device__ __forceinline__ long long mio_pixel_offset(const MioLayoutGeom& g, int p) {
  if (g.sh == (long long)g.w * g.sw) return p * g.sw;  // rows follow each other: no division
  return (long long)(p / g.w) * g.sh + (long long)(p % g.w) * g.sw;
}

extern "C" __global__ void __launch_bounds__(256)
    igemm_layout_copy(const mio_elem* __restrict__ in, mio_elem* __restrict__ out,
                      const MioLayoutGeom g) {
  __shared__ __align__(16) mio_elem tile[MIO_TILE * MIO_PITCH];
  const int p0 = blockIdx.x * MIO_TILE, c0 = blockIdx.y * MIO_TILE;
  const int lane = threadIdx.x, warp = threadIdx.y, t = warp * 32 + lane;
  const long long packed = (long long)blockIdx.z * g.hw * g.c;  // the image in the packed tensor
  const long long strided = (long long)blockIdx.z * g.sn;
  // The strided side: this thread's two pixels (lane, lane + 32) and eight channels
  // (warp, warp + 8, ...) of the tile.
  const int pa = p0 + lane, pb = p0 + lane + 32;
  const long long oa = pa < g.hw ? mio_pixel_offset(g, pa) : 0;
  const long long ob = pb < g.hw ? mio_pixel_offset(g, pb) : 0;
  // The packed side: 64 pixels x MIO_ROW_WORDS words, 256 threads in steps over them.
  const unsigned* in_words = reinterpret_cast<const unsigned*>(in);
  unsigned* out_words = reinterpret_cast<unsigned*>(out);
  unsigned* tile_words = reinterpret_cast<unsigned*>(tile);
  constexpr int kWordSteps = MIO_TILE * MIO_ROW_WORDS / 256;
  constexpr int kPitchWords = MIO_PITCH / MIO_PER_WORD;
  if (g.to_nhwc) {
    mio_elem v[16];
#pragma unroll
    for (int i = 0; i < 8; ++i) {  // all loads first
      const int c = c0 + warp + 8 * i;
      const long long base = strided + (long long)c * g.sc;
      v[2 * i] = c < g.c && pa < g.hw ? in[base + oa] : mio_elem(0);
      v[2 * i + 1] = c < g.c && pb < g.hw ? in[base + ob] : mio_elem(0);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      tile[lane * MIO_PITCH + warp + 8 * i] = v[2 * i];
      tile[(lane + 32) * MIO_PITCH + warp + 8 * i] = v[2 * i + 1];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kWordSteps; ++i) {
      const int idx = t + 256 * i, row = idx / MIO_ROW_WORDS, word = idx % MIO_ROW_WORDS;
      const int p = p0 + row, c = c0 + word * MIO_PER_WORD;
      if (p < g.hw && c < g.c) {
        out_words[(packed + (long long)p * g.c + c) / MIO_PER_WORD] =
            tile_words[row * kPitchWords + word];
      }
    }
  } else {
    unsigned v[kWordSteps];
#pragma unroll
    for (int i = 0; i < kWordSteps; ++i) {  // all loads first
      const int idx = t + 256 * i, row = idx / MIO_ROW_WORDS, word = idx % MIO_ROW_WORDS;
      const int p = p0 + row, c = c0 + word * MIO_PER_WORD;
      v[i] = p < g.hw && c < g.c ? in_words[(packed + (long long)p * g.c + c) / MIO_PER_WORD] : 0u;
    }
#pragma unroll
    for (int i = 0; i < kWordSteps; ++i) {
      const int idx = t + 256 * i;
      tile_words[(idx / MIO_ROW_WORDS) * kPitchWords + idx % MIO_ROW_WORDS] = v[i];
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int c = c0 + warp + 8 * i;
      if (c >= g.c) continue;
      const long long base = strided + (long long)c * g.sc;
      if (pa < g.hw) out[base + oa] = tile[lane * MIO_PITCH + warp + 8 * i];
      if (pb < g.hw) out[base + ob] = tile[(lane + 32) * MIO_PITCH + warp + 8 * i];
    }
  }
}
