"""The copies around a few-channel layer run as its depth image (``miocore_triton.depth``):
depth pixel (t, u, v) holds, in channel ((a * FH + i) * FW + j) * C + c, input channel c at
(t * SD + a * MD - PD, u * SH + i * MH - PH, v * SW + j * MW - PW): FD x FH x FW positions, a
stride's phases (M* = 1) or a stride-1 layer's taps (the dilation apart); channels past
FD * FH * FW * C up to C2 are zeros. The filter is regrouped the same way. A 2-D problem is a
3-D one of depth 1 (its depth strides 0).

* ``space_to_depth``: x (any strides) into the packed channels-last depth image, zeros in the
  padding and past the input;
* ``filter_depth``: w (any strides) into the packed (K, R2, S2, C2) depth filter, zeros where
  a depth tap reaches past the filter; or back, backward weights' depth filter into dw;
* ``depth_to_space``: backward data's depth image (of a stride's phases) back into dx's
  pixels and strides (zeros for input pixels no output reaches).
"""

import triton
import triton.language as tl


@triton.jit
def space_to_depth(
    src_ptr,
    dst_ptr,
    C: tl.constexpr,
    D: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    XN: tl.constexpr,
    XC: tl.constexpr,
    XD: tl.constexpr,
    XH: tl.constexpr,
    XW: tl.constexpr,
    SD: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PD: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    FD: tl.constexpr,
    FH: tl.constexpr,
    FW: tl.constexpr,
    MD: tl.constexpr,
    MH: tl.constexpr,
    MW: tl.constexpr,
    C2: tl.constexpr,
    D2: tl.constexpr,
    H2: tl.constexpr,
    W2: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Program axis 0 walks (image, block of depth pixels), axis 1 blocks of depth channels."""
    PIXELS: tl.constexpr = D2 * H2 * W2
    P_TILES: tl.constexpr = (PIXELS + BLOCK_P - 1) // BLOCK_P
    n = tl.program_id(0) // P_TILES
    offs_p = (tl.program_id(0) % P_TILES) * BLOCK_P + tl.arange(0, BLOCK_P)
    cc = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c = cc % C
    phase = cc // C
    d = (offs_p // (H2 * W2))[:, None] * SD + ((phase // (FH * FW)) * MD)[None, :] - PD
    h = ((offs_p // W2) % H2)[:, None] * SH + (((phase // FW) % FH) * MH)[None, :] - PH
    w = (offs_p % W2)[:, None] * SW + ((phase % FW) * MW)[None, :] - PW
    inside = (offs_p < PIXELS)[:, None] & (cc < C2)[None, :]
    ok = inside & (cc < FD * FH * FW * C)[None, :] & (d >= 0) & (d < D)
    ok = ok & (h >= 0) & (h < H) & (w >= 0) & (w < W)
    src = src_ptr + n * XN + c[None, :] * XC + d * XD + h * XH + w * XW
    dst = dst_ptr + (n * PIXELS + offs_p)[:, None] * C2 + cc[None, :]
    tl.store(dst, tl.load(src, mask=ok, other=0.0), mask=inside)


@triton.jit
def filter_depth(
    w_ptr,
    wd_ptr,
    BACK: tl.constexpr,
    K: tl.constexpr,
    C: tl.constexpr,
    T: tl.constexpr,
    R: tl.constexpr,
    S: tl.constexpr,
    WK: tl.constexpr,
    WC: tl.constexpr,
    WT: tl.constexpr,
    WR: tl.constexpr,
    WS: tl.constexpr,
    FD: tl.constexpr,
    FH: tl.constexpr,
    FW: tl.constexpr,
    C2: tl.constexpr,
    T2: tl.constexpr,
    R2: tl.constexpr,
    S2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One element of the packed (K, T2, R2, S2, C2) depth filter per lane: read from w's tap
    (zero where it has none), or with BACK written to it (backward weights' dw)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < K * T2 * R2 * S2 * C2
    cc = offs % C2
    ax = (offs // C2) % S2
    ay = (offs // (C2 * S2)) % R2
    az = (offs // (C2 * S2 * R2)) % T2
    k = offs // (C2 * S2 * R2 * T2)
    phase = cc // C
    t = az * FD + phase // (FH * FW)
    r = ay * FH + (phase // FW) % FH
    s = ax * FW + phase % FW
    ok = inside & (cc < FD * FH * FW * C) & (t < T) & (r < R) & (s < S)
    w_ptrs = w_ptr + k * WK + (cc % C) * WC + t * WT + r * WR + s * WS
    if BACK:
        tl.store(w_ptrs, tl.load(wd_ptr + offs, mask=ok), mask=ok)
    else:
        tl.store(wd_ptr + offs, tl.load(w_ptrs, mask=ok, other=0.0), mask=inside)


@triton.jit
def depth_to_space(
    src_ptr,
    dx_ptr,
    N: tl.constexpr,
    C: tl.constexpr,
    D: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    XN: tl.constexpr,
    XC: tl.constexpr,
    XD: tl.constexpr,
    XH: tl.constexpr,
    XW: tl.constexpr,
    SD: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PD: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    C2: tl.constexpr,
    D2: tl.constexpr,
    H2: tl.constexpr,
    W2: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """One dx element (N, C, D, H, W order) per lane, read from its depth pixel and channel
    (a stride's phases: each input position in exactly one)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offs < N * C * D * H * W
    w = offs % W
    h = (offs // W) % H
    d = (offs // (W * H)) % D
    c = (offs // (W * H * D)) % C
    n = offs // (W * H * D * C)
    dp = d + PD
    hp = h + PH
    wp = w + PW
    cc = (((dp % SD) * SH + hp % SH) * SW + wp % SW) * C + c
    ok = inside & (dp // SD < D2) & (hp // SH < H2) & (wp // SW < W2)
    src = src_ptr + (((n * D2 + dp // SD) * H2 + hp // SH) * W2 + wp // SW) * C2 + cc
    values = tl.load(src, mask=ok, other=0.0)
    tl.store(dx_ptr + n * XN + c * XC + d * XD + h * XH + w * XW, values, mask=inside)
