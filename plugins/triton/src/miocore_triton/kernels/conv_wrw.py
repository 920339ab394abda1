"""Backward weights as an implicit GEMM in Triton: ``conv_wrw``.

Rows k, columns c of one filter tap (or, on fewer than 16 channels, the (tap, c) pairs
together), reduction over the output pixels (n, [od,] p, q), split over grid axis 1 into
SPLITS fp32 partials that ``copies.conv_wrw_reduce`` sums (one split writes dw directly).
Compiled and launched as the kernels of ``conv_igemm.py`` are (every size and stride a
compile-time constant but ``M``, the pixel count, which carries the batch); any strides, and
a channels-first dy with packed pixels is read in place (``IMAGE_SLICES``), and in TF32 a
channels-first x through its own strides (both operands then hold the reduction innermost).

Offsets are 32-bit: the solvers refuse tensors of 2**31 elements or more.
"""

import triton
import triton.language as tl


@triton.jit
def conv_wrw(
    x_ptr,
    w_ptr,
    y_ptr,
    part_ptr,
    M,
    C: tl.constexpr,
    K: tl.constexpr,
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
    D: tl.constexpr,
    O: tl.constexpr,  # noqa: E741 (output depth: NKOPQ, as cuDNN names it)
    T: tl.constexpr,
    SD: tl.constexpr,
    PD: tl.constexpr,
    DD: tl.constexpr,
    XD: tl.constexpr,
    YD: tl.constexpr,
    WT: tl.constexpr,
    XN: tl.constexpr,
    XC: tl.constexpr,
    XH: tl.constexpr,
    XW: tl.constexpr,
    WK: tl.constexpr,
    WC: tl.constexpr,
    WR: tl.constexpr,
    WS: tl.constexpr,
    YN: tl.constexpr,
    YC: tl.constexpr,
    YH: tl.constexpr,
    YW: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
    PRECISION: tl.constexpr,
    SPLITS: tl.constexpr,
    IMAGE_SLICES: tl.constexpr,
    X_DIRECT: tl.constexpr,
    TAP_COLUMNS: tl.constexpr,
):
    """dw[k, c, t, r, s] = sum over (n, od, p, q) of dy[n, k, od, p, q] * x[n, c, id, ih, iw];
    program axis 1 takes one of SPLITS shares of the (n, od, p, q) slices. Split, each share
    writes fp32 partials ``part[split][k][t][r][s][c]``; unsplit, dw itself. D = O = T = 1 in
    2-D. IMAGE_SLICES: each reduction slice stays inside one image (the last one of an image
    masked), so that a channels-first dy with packed pixels (NCHW) is read in place along its
    pixels; X_DIRECT (1x1, stride 1, no padding, x channels-first and packed): x too.
    TAP_COLUMNS (few channels: a stem's 3): the columns are (tap, c) together, an im2col
    gathered on the fly, instead of one program per tap whose column tile would be mostly
    empty."""
    DEPTH: tl.constexpr = D * O * T > 1
    C_TILES: tl.constexpr = (C + BLOCK_N - 1) // BLOCK_N
    K_TILES: tl.constexpr = (K + BLOCK_M - 1) // BLOCK_M
    pid = tl.program_id(0)
    split = tl.program_id(1)
    # k tiles vary fastest: neighbours read the same x columns
    tile_k = pid % K_TILES
    offs_k = tile_k * BLOCK_M + tl.arange(0, BLOCK_M)
    ks = offs_k % K if K % BLOCK_M != 0 else offs_k
    COLUMNS: tl.constexpr = T * R * S * C
    if TAP_COLUMNS:
        # column j = (t, r, s, c), the order of the partials; per column vectors
        offs_c = (pid // K_TILES) * BLOCK_N + tl.arange(0, BLOCK_N)
        js = offs_c % COLUMNS if COLUMNS % BLOCK_N != 0 else offs_c
        cs = js % C
        tap = js // C
    else:
        tile_c = (pid // K_TILES) % C_TILES
        tap = pid // (K_TILES * C_TILES)
        offs_c = tile_c * BLOCK_N + tl.arange(0, BLOCK_N)
        cs = offs_c % C if C % BLOCK_N != 0 else offs_c
    if DEPTH:
        t = tap // (R * S)
        r = (tap // S) % R
    else:
        r = tap // S
    s = tap % S
    PIXELS: tl.constexpr = O * P * Q
    if IMAGE_SLICES:
        PER_IMAGE: tl.constexpr = (PIXELS + BLOCK_K - 1) // BLOCK_K
        slices = (M // PIXELS) * PER_IMAGE
    else:
        slices = tl.cdiv(M, BLOCK_K)
    # the same trip count in every share (the last one's surplus slices are masked off)
    share = tl.cdiv(slices, SPLITS)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in tl.range(0, share, num_stages=STAGES):
        slice_id = split * share + i
        if IMAGE_SLICES:
            n = slice_id // PER_IMAGE
            pix = (slice_id % PER_IMAGE) * BLOCK_K + tl.arange(0, BLOCK_K)
            m_ok = pix < tl.where(slice_id < slices, PIXELS, 0)  # a surplus slice: none
        else:
            offs = slice_id * BLOCK_K + tl.arange(0, BLOCK_K)
            m_ok = offs < M
            pix = offs % PIXELS
            n = offs // PIXELS
        q = pix % Q
        p = (pix // Q) % P
        if TAP_COLUMNS:  # [pixels, columns]: each column its own tap
            ih = (p * SH - PH)[:, None] + (r * DH)[None, :]
            iw = (q * SW - PW)[:, None] + (s * DW)[None, :]
            x_ok = m_ok[:, None] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        else:
            ih = p * SH - PH + r * DH
            iw = q * SW - PW + s * DW
            x_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        if IMAGE_SLICES and YH == Q * YW and (not DEPTH or YD == P * YH):
            y_rows = n * YN + pix * YW  # dy's pixels are one run: consecutive along the slice
        else:
            y_rows = n * YN + p * YH + q * YW
            if DEPTH:
                y_rows += (pix // (P * Q)) * YD
        if TAP_COLUMNS:
            image = n * XN + pix * 0  # one image per pixel, as a vector in either slicing
            x_at = image[:, None] + ih * XH + iw * XW + (cs * XC)[None, :]
            if DEPTH:
                i_d = ((pix // (P * Q)) * SD - PD)[:, None] + (t * DD)[None, :]
                x_ok = x_ok & (i_d >= 0) & (i_d < D)
                x_at += i_d * XD
            x_mask = x_ok
        else:
            if X_DIRECT:
                x_rows = n * XN + pix * XW  # 1x1, stride 1, no padding: x's pixels are dy's
            else:
                x_rows = n * XN + ih * XH + iw * XW
                if DEPTH:
                    i_d = (pix // (P * Q)) * SD - PD + t * DD
                    x_ok = x_ok & (i_d >= 0) & (i_d < D)
                    x_rows += i_d * XD
            x_at = x_rows[:, None] + (cs * XC)[None, :]
            x_mask = x_ok[:, None]
        a = tl.load(y_ptr + (ks * YC)[:, None] + y_rows[None, :], mask=m_ok[None, :], other=0.0)
        b = tl.load(x_ptr + x_at, mask=x_mask, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if TAP_COLUMNS:
        out_ok = (offs_k < K)[:, None] & (offs_c < COLUMNS)[None, :]
        column = offs_c  # (tap, c) already
    else:
        out_ok = (offs_k < K)[:, None] & (offs_c < C)[None, :]
        column = tap * C + offs_c
    if SPLITS > 1:
        part = part_ptr + split * (K * COLUMNS)
        part_ptrs = part + (offs_k * COLUMNS)[:, None] + column[None, :]
        tl.store(part_ptrs, acc, out_ok)
    else:
        w_at = cs * WC + r * WR + s * WS
        if DEPTH:
            w_at += t * WT
        w_ptrs = w_ptr + (offs_k * WK)[:, None] + w_at[None, :]
        tl.store(w_ptrs, acc.to(w_ptr.dtype.element_ty), mask=out_ok)
