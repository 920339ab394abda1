"""Prototype kernels (benchmarks/gpu_triton_tma_prototype.py; measured, not kept in miocore-triton):
forward convolution on the tensor memory accelerator (TMA): channels-last, undilated or
dilated, stride 1, one group.

A program owns a BH x BW rectangle of one image's output pixels and BN output channels. The
reduction walks (filter tap, channel block); for each step one TMA load brings the input box
``x[n, oh0 + r*DH - PH : +BH, ow0 + s*DW - PW : +BW, c0 : +BK]`` into shared memory, whose
out-of-bounds elements (the zero padding, channels past C) the TMA unit fills with zeros, and
one more the filter's ``(BN, BK)`` slice of the (K, R*S*C) matrix. No address arithmetic or
masks per element: the copies run asynchronously while the tensor cores work on the previous
stage. The output rectangle is stored by TMA too (clipped at the image's edge).

The descriptors (base, shape, strides, box) are made by the caller: ``x`` as (N, H, W, C),
``w`` as (K, R*S*C), ``y`` as (N, P, Q, K), each with its last dimension contiguous.
"""

import triton
import triton.language as tl


@triton.jit
def _tile_origin(tile, N, P, Q, K, BH: tl.constexpr, BW: tl.constexpr, BN: tl.constexpr,
                 GROUP_M: tl.constexpr):  # fmt: skip
    """Image, first output row and column, and first channel of output tile ``tile``
    (GROUP_M row tiles share their column tiles in L2)."""
    tiles_w = tl.cdiv(Q, BW)
    tiles_img = tl.cdiv(P, BH) * tiles_w
    tiles_m = N * tiles_img
    group = GROUP_M * tl.cdiv(K, BN)
    first = (tile // group) * GROUP_M
    rows = tl.minimum(tiles_m - first, GROUP_M)
    pid_m = first + (tile % group) % rows
    img = pid_m // tiles_img
    rem = pid_m - img * tiles_img
    return img, (rem // tiles_w) * BH, (rem % tiles_w) * BW, ((tile % group) // rows) * BN


@triton.jit
def conv_fwd_tma(
    x_desc,
    w_desc,
    y_desc,
    N,
    P,
    Q,
    C,
    K,
    R: tl.constexpr,
    S: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    BH: tl.constexpr,
    BW: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    STAGES: tl.constexpr,
    PRECISION: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr = False,
):
    """y[n, p, q, k] = sum over (r, s, c) of x[n, p + r*DH - PH, q + s*DW - PW, c] *
    w[k, (r*S + s)*C + c]."""
    BM: tl.constexpr = BH * BW
    img, oh0, ow0, k0 = _tile_origin(tl.program_id(0), N, P, Q, K, BH, BW, BN, GROUP_M)
    c_blocks = tl.cdiv(C, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for it in tl.range(0, R * S * c_blocks, num_stages=STAGES, warp_specialize=WARP_SPECIALIZE):
        tap = it // c_blocks
        c0 = (it - tap * c_blocks) * BK
        r = tap // S
        s = tap - r * S
        a = x_desc.load([img, oh0 + r * DH - PH, ow0 + s * DW - PW, c0])
        a = a.reshape(BM, BK)
        # Channels past C read the next tap's filter columns; x's zeros there cancel them.
        b = w_desc.load([k0, tap * C + c0])
        acc = tl.dot(a, b.T, acc, input_precision=PRECISION)
    out = acc.to(y_desc.dtype).reshape(1, BH, BW, BN)
    y_desc.store([img, oh0, ow0, k0], out)


@triton.jit
def conv_fwd_tma_persistent(
    x_desc,
    w_desc,
    y_desc,
    N,
    P,
    Q,
    C,
    K,
    R: tl.constexpr,
    S: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    BH: tl.constexpr,
    BW: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
    GROUP_M: tl.constexpr,
    STAGES: tl.constexpr,
    PRECISION: tl.constexpr,
    PROGRAMS: tl.constexpr,
    FLATTEN: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """:func:`conv_fwd_tma` with PROGRAMS programs walking the tiles (persistent): a tile's
    stores overlap the next tile's loads."""
    BM: tl.constexpr = BH * BW
    tiles = N * tl.cdiv(P, BH) * tl.cdiv(Q, BW) * tl.cdiv(K, BN)
    c_blocks = tl.cdiv(C, BK)
    steps = R * S * c_blocks
    for tile in tl.range(
        tl.program_id(0), tiles, PROGRAMS, flatten=FLATTEN, warp_specialize=WARP_SPECIALIZE
    ):
        img, oh0, ow0, k0 = _tile_origin(tile, N, P, Q, K, BH, BW, BN, GROUP_M)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for it in range(steps):
            tap = it // c_blocks
            c0 = (it - tap * c_blocks) * BK
            r = tap // S
            s = tap - r * S
            a = x_desc.load([img, oh0 + r * DH - PH, ow0 + s * DW - PW, c0]).reshape(BM, BK)
            b = w_desc.load([k0, tap * C + c0])
            acc = tl.dot(a, b.T, acc, input_precision=PRECISION)
        y_desc.store([img, oh0, ow0, k0], acc.to(y_desc.dtype).reshape(1, BH, BW, BN))
