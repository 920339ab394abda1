// Layout copies around the channels-last tensor-core kernels (igemm.gpu_wgmma and
// igemm.gpu_wgmma_wrw): a 4-D tensor [n][c][h][w] in any strides copied into a packed
// channels-last buffer [n][h][w][c] (to_nhwc), or a packed channels-last result copied out
// into the caller's tensor in its strides. A filter [k][c][r][s] is the same copy with k as
// n and the taps as pixels. Each block moves a 32 x 32 tile of (channels, pixels) of one
// image through shared memory, so that the reads along the strided side and the writes along
// the packed channels (or the other way round) are both coalesced where the strides allow.
// Grid: x over 32-wide tiles of the pixels, y over 32-high tiles of the channels, z over n;
// 32 x 8 threads.
//
// Compile-time: the element type (MIO_DTYPE_FP16, MIO_DTYPE_BF16: 16-bit; MIO_DTYPE_TF32:
// fp32); only bits are moved.
#if defined(MIO_DTYPE_TF32)
typedef float mio_elem;
#else
typedef unsigned short mio_elem;
#endif

struct MioLayoutGeom {
  int n, c, hw, w;  // images, channels, pixels per image, image width (a pixel's row and column)
  int to_nhwc;      // 1: strided -> packed channels-last; 0: packed channels-last -> strided
  long long sn, sc, sh, sw;  // the strided tensor's strides (elements)
};

extern "C" __global__ void __launch_bounds__(256)
    igemm_layout_copy(const mio_elem* __restrict__ in, mio_elem* __restrict__ out,
                      const MioLayoutGeom g) {
  __shared__ mio_elem tile[32][33];
  const int p0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
  const long long n = blockIdx.z;
  const long long packed = n * g.hw * g.c;  // the image's start in the packed tensor
  const long long strided = n * g.sn;
  if (g.to_nhwc) {
    for (int i = threadIdx.y; i < 32; i += 8) {  // read along the pixels
      const int c = c0 + i, p = p0 + threadIdx.x;
      if (c < g.c && p < g.hw) {
        tile[i][threadIdx.x] = in[strided + c * g.sc + (p / g.w) * g.sh + (p % g.w) * g.sw];
      }
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {  // write along the channels
      const int p = p0 + i, c = c0 + threadIdx.x;
      if (c < g.c && p < g.hw) out[packed + (long long)p * g.c + c] = tile[threadIdx.x][i];
    }
  } else {
    for (int i = threadIdx.y; i < 32; i += 8) {  // read along the channels
      const int p = p0 + i, c = c0 + threadIdx.x;
      if (c < g.c && p < g.hw) tile[i][threadIdx.x] = in[packed + (long long)p * g.c + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {  // write along the pixels
      const int c = c0 + i, p = p0 + threadIdx.x;
      if (c < g.c && p < g.hw) {
        out[strided + c * g.sc + (p / g.w) * g.sh + (p % g.w) * g.sw] = tile[threadIdx.x][i];
      }
    }
  }
}
