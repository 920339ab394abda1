"""Depthwise convolution's backward weights in Triton (one filter per channel, multiplier 1).

dw[c, r, s] = sum over (n, p, q) of dy[n, c, p, q] * x[n, c, p*SH - PH + r*DH, q*SW - PW + s*DW]

There is no GEMM here: every channel's filter is its own reduction over the whole batch, so
the work is memory-bound (each tap reads x once more, mostly from L1/L2). A program owns a block
of channels (contiguous in channels-last memory: 16-byte loads) and one of SPLITS shares of the
(n, p, q) rows; it loads a block of dy rows once and, for every tap, the x rows that tap reads,
keeping all taps' sums in one (TAPS_PAD, BLOCK_C) fp32 accumulator. Split, each share writes
fp32 partials ``part[split][c][tap]`` that ``conv_igemm.conv_wrw_reduce`` sums (with K = the
channels, C = 1); unsplit, the program writes dw itself. Every size and stride but the row
count ``M`` (the batch) is a compile-time constant; x and dy are channels-last (XC = YC = 1).
"""

import triton
import triton.language as tl


@triton.jit
def dw_wrw(
    x_ptr,
    y_ptr,
    w_ptr,
    part_ptr,
    M,
    C: tl.constexpr,
    H: tl.constexpr,
    W: tl.constexpr,
    P: tl.constexpr,
    Q: tl.constexpr,
    R: tl.constexpr,
    S: tl.constexpr,
    SH: tl.constexpr,
    SW: tl.constexpr,
    PH: tl.constexpr,
    PW: tl.constexpr,
    DH: tl.constexpr,
    DW: tl.constexpr,
    XN: tl.constexpr,
    XH: tl.constexpr,
    XW: tl.constexpr,
    YN: tl.constexpr,
    YH: tl.constexpr,
    YW: tl.constexpr,
    WK: tl.constexpr,
    WR: tl.constexpr,
    WS: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_C: tl.constexpr,
    TAPS_PAD: tl.constexpr,
    SPLITS: tl.constexpr,
):
    """Partial (or whole) sums of one channel block over one share of the (n, p, q) rows."""
    offs_c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    offs_c = tl.max_contiguous(tl.multiple_of(offs_c, BLOCK_C), BLOCK_C)
    c_ok = offs_c < C
    split = tl.program_id(1)
    taps = tl.arange(0, TAPS_PAD)
    acc = tl.zeros((TAPS_PAD, BLOCK_C), dtype=tl.float32)
    # the same trip count in every share (the last one's surplus rows are masked off)
    share = tl.cdiv(tl.cdiv(M, BLOCK_P), SPLITS)
    first = split * share * BLOCK_P
    for i in range(0, share):
        rows = first + i * BLOCK_P + tl.arange(0, BLOCK_P)
        m_ok = rows < M
        q = rows % Q
        p = (rows // Q) % P
        n = rows // (P * Q)
        dy_ptrs = y_ptr + (n * YN + p * YH + q * YW)[:, None] + offs_c[None, :]
        dy = tl.load(dy_ptrs, mask=m_ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
        for t in tl.static_range(R * S):
            ih = p * SH - PH + (t // S) * DH
            iw = q * SW - PW + (t % S) * DW
            ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            x_ptrs = x_ptr + (n * XN + ih * XH + iw * XW)[:, None] + offs_c[None, :]
            xv = tl.load(x_ptrs, mask=ok[:, None] & c_ok[None, :], other=0.0).to(tl.float32)
            contribution = tl.sum(dy * xv, axis=0)
            acc = tl.where((taps == t)[:, None], acc + contribution[None, :], acc)
    out_ok = (taps < R * S)[:, None] & c_ok[None, :]
    if SPLITS > 1:
        part = part_ptr + split * (C * R * S) + (offs_c * (R * S))[None, :] + taps[:, None]
        tl.store(part, acc, mask=out_ok)
    else:
        w_ptrs = w_ptr + (offs_c * WK)[None, :] + ((taps // S) * WR + (taps % S) * WS)[:, None]
        tl.store(w_ptrs, acc.to(w_ptr.dtype.element_ty), mask=out_ok)
