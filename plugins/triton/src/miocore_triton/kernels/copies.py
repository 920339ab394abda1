"""The element-wise kernels around the implicit GEMMs of ``conv_igemm.py`` and ``conv_wrw.py``.

* ``repack``: an input copied into the workspace in packed channels-last order where it is
  not (NCHW, NCDHW, KCRS), so every GEMM reads 16-byte vectors; or in packed channels-first
  order, for TF32 backward weights on channels-last tensors (its operands need the pixels,
  the reduction, innermost). The cost is the solver's own, inside its measured time.
* ``conv_wtrans``: w copied with k innermost, for TF32 backward data (whose B operand must
  have its reduction dimension contiguous); ``conv_bwd`` then reads it through its strides.
* ``conv_wrw_reduce``: the SPLITS fp32 partials of a split ``conv_wrw`` summed into dw.
* ``conv_split_reduce``: the SPLITS fp32 partials of a split ``conv_fwd`` or ``conv_bwd``
  summed into y or dx.
"""

import triton
import triton.language as tl


@triton.jit
def conv_wrw_reduce(
    part_ptr,
    w_ptr,
    SPLITS: tl.constexpr,
    C: tl.constexpr,
    K: tl.constexpr,
    T: tl.constexpr,
    R: tl.constexpr,
    S: tl.constexpr,
    WK: tl.constexpr,
    WC: tl.constexpr,
    WT: tl.constexpr,
    WR: tl.constexpr,
    WS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """dw = the sum of ``conv_wrw``'s SPLITS fp32 partials, in dw's type and strides."""
    TOTAL: tl.constexpr = K * T * R * S * C
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < TOTAL
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    # unrolled: every share's load is in flight at once (a loop waits for each in turn, which
    # made the reduction, not the GEMM, the floor of a split run)
    for i in tl.static_range(SPLITS):
        acc += tl.load(part_ptr + i * TOTAL + offs, mask=ok, other=0.0)
    k = offs // (T * R * S * C)
    tap = (offs // C) % (T * R * S)
    c = offs % C
    w_ptrs = w_ptr + k * WK + c * WC + (tap // (R * S)) * WT + ((tap // S) % R) * WR
    w_ptrs += (tap % S) * WS
    tl.store(w_ptrs, acc.to(w_ptr.dtype.element_ty), mask=ok)


@triton.jit
def conv_split_reduce(
    part_ptr,
    out_ptr,
    M,
    SPLITS: tl.constexpr,
    L_C: tl.constexpr,
    L_D: tl.constexpr,
    L_H: tl.constexpr,
    L_W: tl.constexpr,
    CHANNELS_FIRST: tl.constexpr,
    S_N: tl.constexpr,
    S_C: tl.constexpr,
    S_D: tl.constexpr,
    S_H: tl.constexpr,
    S_W: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """The output of a split ``conv_fwd`` (y) or ``conv_bwd`` (dx) = the sum of its SPLITS
    fp32 partials, in the output's type and strides (S_*). Each share's partials are the
    output packed in its own order (channels first or last): M * L_C elements, M the images x
    pixels (L_D x L_H x L_W)."""
    total = M * L_C
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in tl.static_range(SPLITS):  # every share's load in flight at once
        acc += tl.load(part_ptr + i * total + offs, mask=ok, other=0.0)
    PIXELS: tl.constexpr = L_D * L_H * L_W
    if CHANNELS_FIRST:
        pix = offs % PIXELS
        c = (offs // PIXELS) % L_C
    else:
        c = offs % L_C
        pix = (offs // L_C) % PIXELS
    n = offs // (L_C * PIXELS)
    out = out_ptr + n * S_N + c * S_C + (pix // (L_H * L_W)) * S_D + ((pix // L_W) % L_H) * S_H
    out += (pix % L_W) * S_W
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def conv_wtrans(
    w_ptr,
    wt_ptr,
    C: tl.constexpr,
    K: tl.constexpr,
    T: tl.constexpr,
    R: tl.constexpr,
    S: tl.constexpr,
    WK: tl.constexpr,
    WC: tl.constexpr,
    WT: tl.constexpr,
    WR: tl.constexpr,
    WS: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """w copied to ``wt[c][t][r][s][k]`` (k contiguous): backward data's B operand with its
    reduction dimension innermost, the only order TF32 tensor-core instructions read."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < K * C * T * R * S
    k = offs % K
    s = (offs // K) % S
    r = (offs // (K * S)) % R
    t = (offs // (K * S * R)) % T
    c = offs // (K * S * R * T)
    src = w_ptr + k * WK + c * WC + t * WT + r * WR + s * WS
    tl.store(wt_ptr + offs, tl.load(src, mask=ok), mask=ok)


@triton.jit
def repack(
    src_ptr,
    dst_ptr,
    CHANNELS_FIRST: tl.constexpr,
    C: tl.constexpr,
    D: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    SN: tl.constexpr,
    SC: tl.constexpr,
    SD: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """One (N, C, D, H, W) tensor of any strides (D = 1 in 2-D) copied to packed
    channels-last order (N, D, H, W, C), or channels-first (N, C, D, H, W) with
    CHANNELS_FIRST: program axis 0 walks (n, pixel block), axis 1 channel blocks; a tile is
    read along the source's inner dimension and written along the destination's (Triton turns
    it in shared memory)."""
    PIXELS: tl.constexpr = D * H * W
    P_TILES: tl.constexpr = (PIXELS + BLOCK_P - 1) // BLOCK_P
    n = tl.program_id(0) // P_TILES
    offs_p = (tl.program_id(0) % P_TILES) * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    ok = (offs_p < PIXELS)[:, None] & (offs_c < C)[None, :]
    # pixels packed (one stride: NCHW, NHWC and their 3-D forms), so the loads are vectors
    if SH == W * SW and (D == 1 or SD == H * SH):
        pix = offs_p * SW
    else:
        pix = ((offs_p // W) % H) * SH + (offs_p % W) * SW
        if D > 1:
            pix += (offs_p // (H * W)) * SD
    src = src_ptr + n * SN + pix[:, None] + (offs_c * SC)[None, :]
    if CHANNELS_FIRST:
        dst = dst_ptr + n * C * PIXELS + offs_p[:, None] + (offs_c * PIXELS)[None, :]
    else:
        dst = dst_ptr + (n * PIXELS + offs_p)[:, None] * C + offs_c[None, :]
    tl.store(dst, tl.load(src, mask=ok), mask=ok)
