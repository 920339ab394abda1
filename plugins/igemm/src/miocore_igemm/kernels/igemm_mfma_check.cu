// igemm_mfma_check: one wave of 64 computes D = A * B + C for one 16 x 16 tile through the
// mio_mfma_* helpers of miocore_gpu.h, every lane loading its fragments from the lane layouts
// AMD documents (written out in miocore_gpu.h's MFMA section). A test kernel, not a solver's:
//   on AMD gfx90a / gfx94x it checks the hardware builtins against those layouts;
//   on CUDA under -DMIO_MFMA_EMULATE it checks the software emulation against them (the
//   emulation the igemm kernels' MFMA path is tested with).
// Element type by -DMIO_DTYPE_FP16 / _BF16 (K = 16) or _FP32 (K = 4); a (16 x K, row-major),
// b (K x 16, row-major), c and d (16 x 16, row-major) are fp32 in memory, rounded to the
// element type on load. Launch with one block of 64 threads. Where no MFMA path exists
// (MIO_MFMA == 0) d is filled with NaN, so a test cannot pass by accident.
#include "miocore_gpu.h"

MIO_DEVICE unsigned int mio_check_bits(float v) {
#if defined(MIO_DTYPE_BF16)
  return mio_float_to_bf16(v);
#else
  return mio_float_to_half(v);
#endif
}

MIO_KERNEL void igemm_mfma_tile(const float* __restrict__ a, const float* __restrict__ b,
                                const float* __restrict__ c, float* __restrict__ d) {
  const int lane = (int)threadIdx.x;  // 0..63
  const int rc = lane % 16;           // A row i, B column j, D column j
  float acc[4];
  for (int e = 0; e < 4; ++e) acc[e] = c[(4 * (lane / 16) + e) * 16 + rc];  // D[i][j]: item i % 4
#if MIO_MFMA
#if defined(MIO_DTYPE_FP32)
  // A[i][k] in lane i + 16 * k, B[k][j] in lane j + 16 * k (K = 4)
  const int k = lane / 16;
  mio_mfma_f32_16x16x4(acc, a[rc * 4 + k], b[k * 16 + rc]);
#else
  // A[i][k] in lane i + 16 * (k / 4), item k % 4 (two per word, low half first); B alike
  unsigned int af[2], bf[2];
  for (int w = 0; w < 2; ++w) {
    const int k0 = 4 * (lane / 16) + 2 * w;
    af[w] = mio_check_bits(a[rc * 16 + k0]) | (mio_check_bits(a[rc * 16 + k0 + 1]) << 16);
    bf[w] = mio_check_bits(b[k0 * 16 + rc]) | (mio_check_bits(b[(k0 + 1) * 16 + rc]) << 16);
  }
#if defined(MIO_DTYPE_BF16)
  mio_mfma_bf16_16x16x16(acc, af, bf);
#else
  mio_mfma_f16_16x16x16(acc, af, bf);
#endif
#endif
#else
  for (int e = 0; e < 4; ++e) acc[e] = __int_as_float(0x7fc00000);
#endif
  for (int e = 0; e < 4; ++e) d[(4 * (lane / 16) + e) * 16 + rc] = acc[e];
}
