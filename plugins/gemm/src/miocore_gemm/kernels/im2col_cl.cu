// Channels-last GEMM lowering for gemm.gpu_nhwc: im2col_cl (x -> rows) and col2im_cl (rows ->
// dx, a gather: no atomics, a deterministic sum). Element type from -DMIO_DTYPE_*.
//
// Row layout for images [n0, n0 + nb): col[m][g][gw], m = (n local, output position) over the
// chunk's N*O rows, g the group, and in each group's block of gw elements first the F*Cg
// entries [f][cg] (f the filter tap (Z, Y, X), cg the group's channel), then zeros up to gw.
// Each group's columns are one gw-wide block of a row-major matrix with row stride G*gw, which
// the BLAS reads directly. gw = F*Cg except where that is not a whole number of 16-byte
// chunks in a half type (conv1: 7*7*3 = 147): rows padded to 16 bytes keep the BLAS on its
// aligned tensor-core kernels. im2col_cl is a pure copy of unpadded rows, so it moves MIO_UNIT
// bytes at a time (16 where the channel runs and strides allow, else the element size);
// im2col_cl_chunks builds padded rows 16 bytes per thread.
#include "miocore_gpu.h"

#ifndef MIO_UNIT
#define MIO_UNIT 4
#endif
#if MIO_UNIT == 16
typedef uint4 mio_unit;
#elif MIO_UNIT == 8
typedef uint2 mio_unit;
#elif MIO_UNIT == 4
typedef unsigned int mio_unit;
#else
typedef unsigned short mio_unit;
#endif

struct MioClParams {
  mio_index in[3];      // input D, H, W (2-D: D = 1)
  mio_index out[3];     // output Do, Ho, Wo
  mio_index fil[3];     // Z, Y, X
  mio_index pad[3];
  mio_index stride[3];
  mio_index dil[3];
  mio_index xs[4];      // element strides of x: N, D, H, W (channel stride 1)
  mio_index c, groups, cg;
  mio_index n0, nb;     // the chunk's first image and image count
  mio_index gw;         // elements of one group's block in a row (F * cg, or padded)
  mio_index tw;         // output pixels per block of im2col_cl_tiles
};

// Integer division, not bytes, bounds these copies (a 32-bit division is some twenty
// instructions, a 64-bit one several times more). So the grid is two-dimensional: y walks
// the rows (n, d, h) and decodes them once per thread and row; x walks one row's (w, g, unit)
// items, and each thread then walks every tap of its item with additions only, writing one
// unit of each tap's channel run (the taps of one pixel are F consecutive runs of a row).
// Each body is instantiated for 32-bit and 64-bit indices and the kernel picks 32-bit when
// every index of the launch fits.
template <typename I>
MIO_DEVICE void im2col_body(const mio_t* __restrict__ x, mio_unit* __restrict__ dst,
                            const MioClParams& p, I units) {
  const I F = (I)(p.fil[0] * p.fil[1] * p.fil[2]);
  const I G = (I)p.groups, FZ = (I)p.fil[0], FY = (I)p.fil[1], FX = (I)p.fil[2];
  const I W0 = (I)p.out[2], H0 = (I)p.out[1], D0 = (I)p.out[0];
  const I rows = (I)p.nb * D0 * H0;
  const I row_items = W0 * G * units;
  for (I row = (I)blockIdx.y; row < rows; row += (I)gridDim.y) {
    const I oh = row % H0;
    const I od = (row / H0) % D0;
    const mio_index n = (mio_index)(row / (H0 * D0)) + p.n0;
    const mio_index id0 = (mio_index)od * p.stride[0] - p.pad[0];
    const mio_index ih0 = (mio_index)oh * p.stride[1] - p.pad[1];
    mio_unit* out = dst + (mio_index)row * row_items * F;
    for (I j = (I)(blockIdx.x * blockDim.x + threadIdx.x); j < row_items;
         j += (I)(gridDim.x * blockDim.x)) {
      const I u = j % units;
      const I t = j / units;  // (ow, g)
      const I g = t % G;
      const I ow = t / G;
      const mio_index iw0 = (mio_index)ow * p.stride[2] - p.pad[2];
      const mio_t* xg = x + n * p.xs[0] + g * p.cg;
      mio_unit* o = out + (mio_index)t * F * units + u;
      for (I fz = 0; fz < FZ; ++fz) {
        const mio_index id = id0 + (mio_index)fz * p.dil[0];
        const bool in_z = id >= 0 && id < p.in[0];
        for (I fy = 0; fy < FY; ++fy) {
          const mio_index ih = ih0 + (mio_index)fy * p.dil[1];
          const bool in_zy = in_z && ih >= 0 && ih < p.in[1];
          const mio_t* xrow = xg + id * p.xs[1] + ih * p.xs[2];
          for (I fx = 0; fx < FX; ++fx) {
            const mio_index iw = iw0 + (mio_index)fx * p.dil[2];
            mio_unit v{};
            if (in_zy && iw >= 0 && iw < p.in[2]) {
              v = reinterpret_cast<const mio_unit*>(xrow + iw * p.xs[3])[u];
            }
            *o = v;
            o += units;
          }
        }
      }
    }
  }
}

// Grid: x over one output row's (w, g, unit) items, y over the chunk's rows (nb * Do * Ho).
MIO_KERNEL void im2col_cl(const mio_t* __restrict__ x, mio_t* __restrict__ col, MioClParams p) {
  const mio_index units = p.cg * (mio_index)sizeof(mio_t) / MIO_UNIT;  // per (row, g, tap)
  const mio_index total =
      p.nb * p.out[0] * p.out[1] * p.out[2] * p.groups * p.fil[0] * p.fil[1] * p.fil[2] * units;
  mio_unit* dst = reinterpret_cast<mio_unit*>(col);
  if (total < ((mio_index)1 << 30)) {  // headroom for the grid-stride steps
    im2col_body<int>(x, dst, p, (int)units);
  } else {
    im2col_body<mio_index>(x, dst, p, units);
  }
}

// Padded rows (gw a whole number of 16-byte chunks, past F * cg: few channels, as in conv1).
// A block takes a tile of tw output pixels of one output row. It stages the input patch those
// pixels read (every tap row, (tw - 1) * stride + reach pixels wide, all channels, zeros for
// padding) in shared memory: each tap row of the patch is one contiguous run of packed NHWC
// x, so the copy needs no division. A table gives, for each element of a group's row block,
// its patch offset relative to the pixel (or -1 for the zero tail). Then consecutive threads
// write consecutive 16-byte chunks of the tile's rows from the patch.
#define MIO_CHUNK (16 / (int)sizeof(mio_t))
#define MIO_PATCH_BATCH 8

// Grid: x over the row's tiles, y over the chunk's rows (nb * Do * Ho). Dynamic shared
// memory: the table (gw ints), then the patch (fil[0] * fil[1] * pw * c elements,
// pw = (tw - 1) * stride + dil * (X - 1) + 1).
MIO_KERNEL void im2col_cl_tiles(const mio_t* __restrict__ x, mio_t* __restrict__ col,
                                MioClParams p) {
  extern __shared__ __attribute__((aligned(16))) unsigned char mio_smem_raw[];
  const int GW = (int)p.gw;
  int* table = reinterpret_cast<int*>(mio_smem_raw);
  mio_t* patch = reinterpret_cast<mio_t*>(mio_smem_raw + ((GW * 4 + 15) & ~15));
  const int TW = (int)p.tw;
  const int FZ = (int)p.fil[0], FY = (int)p.fil[1], FX = (int)p.fil[2];
  const int C = (int)p.c, CG = (int)p.cg, G = (int)p.groups;
  const int SW = (int)p.stride[2], DZ = (int)p.dil[0], DY = (int)p.dil[1], DX = (int)p.dil[2];
  const int W0 = (int)p.out[2], H0 = (int)p.out[1], D0 = (int)p.out[0];
  const int IN2C = (int)p.in[2] * C;
  const int PW = (TW - 1) * SW + DX * (FX - 1) + 1;
  const int PWC = PW * C, patch_size = FZ * FY * PWC;
  const int IN0 = (int)p.in[0], IN1 = (int)p.in[1];
  const mio_index XS1 = p.xs[1], XS2 = p.xs[2];
  const int chunks = GW / MIO_CHUNK;  // per group block
  const int tiles = (W0 + TW - 1) / TW;
  const mio_index rows = p.nb * D0 * H0;
  for (int e = threadIdx.x; e < GW; e += blockDim.x) {
    const int f = e / CG, c = e - (e / CG) * CG;
    table[e] = f < FZ * FY * FX ? ((f / FX) * PW + (f % FX) * DX) * C + c : -1;
  }
  // Where a thread's patch elements start: (tap row, element in row), advanced by the block
  // size with subtractions; the integer divisions are paid once per block, not per element.
  const int bd = (int)blockDim.x, tid = (int)threadIdx.x;
  const int zy_first = tid / PWC, i_first = tid - (tid / PWC) * PWC;
  // Chunks: a thread keeps one chunk position q of a row block (its eight table entries in
  // registers) and walks pixels; when a block has more chunks than threads, it walks q too.
  const bool narrow = chunks <= bd;
  const int pixels_per_pass = narrow ? bd / chunks : 1;
  const int q_first = narrow ? tid % chunks : tid;
  const int t_first = narrow ? tid / chunks : 0;
  const int q_step = narrow ? chunks : bd;
  uint4* dst = reinterpret_cast<uint4*>(col);
  for (mio_index row = blockIdx.y; row < rows; row += gridDim.y) {
    const int oh = (int)(row % H0);
    const int od = (int)((row / H0) % D0);
    const mio_index n = row / ((mio_index)H0 * D0) + p.n0;
    const int id0 = od * (int)p.stride[0] - (int)p.pad[0];
    const int ih0 = oh * (int)p.stride[1] - (int)p.pad[1];
    const mio_t* xn = x + n * p.xs[0];
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
      const int ow0 = tile * TW;
      const int first = (ow0 * SW - (int)p.pad[2]) * C;  // x element of the patch's start
      __syncthreads();  // the table is built; the previous tile's chunks are written
      // MIO_PATCH_BATCH loads per thread issued before any is stored, so that the patch
      // costs one or two memory round trips rather than one per tap row.
      int zy = zy_first, i = i_first;
      for (int base = tid; base < patch_size; base += MIO_PATCH_BATCH * bd) {
        mio_t v[MIO_PATCH_BATCH];
#pragma unroll
        for (int u = 0; u < MIO_PATCH_BATCH; ++u) {
          const int fz = zy / FY;  // a division by FY only (often a power of two or 1)
          const int id = id0 + fz * DZ, ih = ih0 + (zy - fz * FY) * DY, e = first + i;
          const bool ok = base + u * bd < patch_size && id >= 0 && id < IN0 && ih >= 0 &&
                          ih < IN1 && e >= 0 && e < IN2C;
          const mio_t loaded = xn[ok ? id * XS1 + ih * XS2 + e : 0];
          v[u] = ok ? loaded : (mio_t)0;
          i += bd;
          while (i >= PWC) {
            i -= PWC;
            ++zy;
          }
        }
#pragma unroll
        for (int u = 0; u < MIO_PATCH_BATCH; ++u) {
          if (base + u * bd < patch_size) patch[base + u * bd] = v[u];
        }
      }
      __syncthreads();
      const int width = W0 - ow0 < TW ? W0 - ow0 : TW;
      uint4* out = dst + (row * W0 + ow0) * G * chunks;
      if (tid >= pixels_per_pass * chunks) continue;  // no barrier before the next tile's
      for (int q = q_first; q < chunks; q += q_step) {
        int off[MIO_CHUNK];
#pragma unroll
        for (int v = 0; v < MIO_CHUNK; ++v) off[v] = table[q * MIO_CHUNK + v];
        for (int t = t_first; t < width * G; t += pixels_per_pass) {  // t = (pixel, group)
          const int g = G == 1 ? 0 : t % G;
          const mio_t* at = patch + (G == 1 ? t : t / G) * SW * C + g * CG;
          union {
            uint4 u;
            mio_t v[MIO_CHUNK];
          } chunk;
#pragma unroll
          for (int v = 0; v < MIO_CHUNK; ++v) {
            const mio_t loaded = at[off[v] < 0 ? 0 : off[v]];
            chunk.v[v] = off[v] < 0 ? (mio_t)0 : loaded;
          }
          out[t * chunks + q] = chunk.u;
        }
      }
    }
  }
}

// col2im_cl sums, for each dx element, the row entries of every (output position, tap) that
// reads it: a gather, so no atomics and a fixed summation order. Each thread owns MIO_UNIT
// bytes of channels of one dx pixel (MIO_UNIT / element size channels, a run inside one
// group): the tap and stride arithmetic, which costs a few integer divisions, is paid once
// per run rather than once per element, and the row entries and dx are moved MIO_UNIT bytes
// at a time.
#define MIO_RUN (MIO_UNIT / (int)sizeof(mio_t))

template <typename I>
MIO_DEVICE void col2im_body(const mio_t* __restrict__ col, mio_t* __restrict__ x,
                            const MioClParams& p) {
  const I C = (I)p.c, CG = (I)p.cg, G = (I)p.groups, GW = (I)p.gw;
  const I IN0 = (I)p.in[0], IN1 = (I)p.in[1], IN2 = (I)p.in[2];
  const I OUT0 = (I)p.out[0], OUT1 = (I)p.out[1], OUT2 = (I)p.out[2];
  const I S0 = (I)p.stride[0], S1 = (I)p.stride[1], S2 = (I)p.stride[2];
  const I O = OUT0 * OUT1 * OUT2;
  const I rows = (I)p.nb * IN0 * IN1;
  const I runs = C / MIO_RUN;  // per dx pixel
  const I row_items = IN2 * runs;
  for (I row = (I)blockIdx.y; row < rows; row += (I)gridDim.y) {
    const I ih = row % IN1;
    const I id = (row / IN1) % IN0;
    const I n = row / (IN1 * IN0);
    mio_t* out = x + ((mio_index)n + p.n0) * p.xs[0] + id * p.xs[1] + ih * p.xs[2];
    for (I j = (I)(blockIdx.x * blockDim.x + threadIdx.x); j < row_items;
         j += (I)(gridDim.x * blockDim.x)) {
      const I iw = j / runs;
      const I c = (j - iw * runs) * MIO_RUN;
      const I g = c / CG, cc = c - g * CG;
      // Entry (o, f) of this run: base + o * G * GW + f * CG.
      const mio_t* base = col + ((mio_index)n * O * G + g) * GW + cc;
      float acc[MIO_RUN];
#pragma unroll
      for (int v = 0; v < MIO_RUN; ++v) acc[v] = 0.0f;
      for (I fz = 0; fz < (I)p.fil[0]; ++fz) {
        const I tz = id + (I)p.pad[0] - fz * (I)p.dil[0];
        if (tz < 0 || (S0 > 1 && tz % S0)) continue;
        const I od = S0 > 1 ? tz / S0 : tz;
        if (od >= OUT0) continue;
        for (I fy = 0; fy < (I)p.fil[1]; ++fy) {
          const I ty = ih + (I)p.pad[1] - fy * (I)p.dil[1];
          if (ty < 0 || (S1 > 1 && ty % S1)) continue;
          const I oh = S1 > 1 ? ty / S1 : ty;
          if (oh >= OUT1) continue;
          for (I fx = 0; fx < (I)p.fil[2]; ++fx) {
            const I tx = iw + (I)p.pad[2] - fx * (I)p.dil[2];
            if (tx < 0 || (S2 > 1 && tx % S2)) continue;
            const I ow = S2 > 1 ? tx / S2 : tx;
            if (ow >= OUT2) continue;
            const I f = (fz * (I)p.fil[1] + fy) * (I)p.fil[2] + fx;
            const I o = (od * OUT1 + oh) * OUT2 + ow;
            union {
              mio_unit u;
              mio_t v[MIO_RUN];
            } entry;
            entry.u = *reinterpret_cast<const mio_unit*>(base + (mio_index)o * G * GW + f * CG);
#pragma unroll
            for (int v = 0; v < MIO_RUN; ++v) acc[v] += mio_load(&entry.v[v]);
          }
        }
      }
      union {
        mio_unit u;
        mio_t v[MIO_RUN];
      } result;
#pragma unroll
      for (int v = 0; v < MIO_RUN; ++v) mio_store(&result.v[v], acc[v]);
      *reinterpret_cast<mio_unit*>(out + iw * p.xs[3] + c) = result.u;
    }
  }
}

// Grid: x over one dx row's (w, channel run) items, y over the chunk's rows (nb * D * H).
MIO_KERNEL void col2im_cl(const mio_t* __restrict__ col, mio_t* __restrict__ x, MioClParams p) {
  const mio_index total = p.nb * p.in[0] * p.in[1] * p.in[2] * p.c;
  // 32-bit indices when the rows and the chunk's dx both fit.
  const mio_index rows = p.nb * p.out[0] * p.out[1] * p.out[2] * p.groups * p.gw;
  if (total < ((mio_index)1 << 30) && rows < ((mio_index)1 << 30)) {
    col2im_body<int>(col, x, p);
  } else {
    col2im_body<mio_index>(col, x, p);
  }
}

// Row blocks between the GEMM's padded matrices and the caller's tensors: dst[r][c] =
// src[r][c] for c < cols, 0 for cols <= c < dst_cols (rows x dst_cols, leading dimensions
// src_ld and dst_ld). copy_rows pads w to the rows' block width; copy_rows_from_f32 brings a
// float32 (or padded) dW back to dw's element type and width. Filters are small enough for
// 32-bit index arithmetic (a 64-bit division costs several times a 32-bit one), which the
// kernels take whenever the whole block fits.
template <typename I, typename S>
MIO_DEVICE void copy_rows_body(const S* __restrict__ src, mio_t* __restrict__ dst, I rows,
                               I cols, I dst_cols, I src_ld, I dst_ld) {
  for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < rows * dst_cols;
       i += (I)(gridDim.x * blockDim.x)) {
    const I r = i / dst_cols;
    const I c = i - r * dst_cols;
    const S zero = (S)0;
    const S v = c < cols ? src[r * src_ld + c] : zero;
    if constexpr (sizeof(S) == sizeof(mio_t)) {
      dst[r * dst_ld + c] = v;  // same type: a copy, no rounding
    } else {
      mio_store(dst + r * dst_ld + c, v);
    }
  }
}

#define MIO_SMALL(n) ((n) < ((mio_index)1 << 31))

MIO_KERNEL void copy_rows(const mio_t* __restrict__ src, mio_t* __restrict__ dst, mio_index rows,
                          mio_index cols, mio_index dst_cols, mio_index src_ld,
                          mio_index dst_ld) {
  if (MIO_SMALL(rows * (dst_ld > src_ld ? dst_ld : src_ld))) {
    copy_rows_body<int>(src, dst, (int)rows, (int)cols, (int)dst_cols, (int)src_ld, (int)dst_ld);
  } else {
    copy_rows_body<mio_index>(src, dst, rows, cols, dst_cols, src_ld, dst_ld);
  }
}

MIO_KERNEL void copy_rows_from_f32(const float* __restrict__ src, mio_t* __restrict__ dst,
                                   mio_index rows, mio_index cols, mio_index dst_cols,
                                   mio_index src_ld, mio_index dst_ld) {
  if (MIO_SMALL(rows * (dst_ld > src_ld ? dst_ld : src_ld))) {
    copy_rows_body<int>(src, dst, (int)rows, (int)cols, (int)dst_cols, (int)src_ld, (int)dst_ld);
  } else {
    copy_rows_body<mio_index>(src, dst, rows, cols, dst_cols, src_ld, dst_ld);
  }
}

// Stride-1 backward data as a forward convolution: dst[o][e] (rows o = g * Cg + c, each gw
// wide) holds w flipped in every spatial axis and transposed per group, e = (tap, k) over
// F * Kg, zeros past that: dst[g*Cg + c][f][k] = w[g*Kg + k][F - 1 - f][c] (w packed
// [K][taps][Cg]; reversing the flattened tap index flips every axis).
template <typename I>
MIO_DEVICE void flip_filter_body(const mio_t* __restrict__ w, mio_t* __restrict__ dst, I rows,
                                 I gw, I taps, I kg, I cg) {
  for (I i = (I)(blockIdx.x * blockDim.x + threadIdx.x); i < rows * gw;
       i += (I)(gridDim.x * blockDim.x)) {
    const I o = i / gw;
    const I e = i - o * gw;
    mio_t v = (mio_t)0;
    if (e < taps * kg) {
      const I f = e / kg, k = e - f * kg;
      const I g = o / cg, c = o - g * cg;
      v = w[((g * kg + k) * taps + (taps - 1 - f)) * cg + c];
    }
    dst[i] = v;
  }
}

MIO_KERNEL void flip_filter(const mio_t* __restrict__ w, mio_t* __restrict__ dst, mio_index rows,
                            mio_index gw, mio_index taps, mio_index kg, mio_index cg) {
  if (MIO_SMALL(rows * gw)) {
    flip_filter_body<int>(w, dst, (int)rows, (int)gw, (int)taps, (int)kg, (int)cg);
  } else {
    flip_filter_body<mio_index>(w, dst, rows, gw, taps, kg, cg);
  }
}
