"""Implicit-GEMM convolution kernels in Triton: forward and backward data.

Compiled by :mod:`miocore_triton.builder` to a cubin (NVIDIA, ``wgmma`` on sm_90) or a hsaco
(AMD, MFMA) and launched through miocore's own backend; Triton's launcher is never used. Every
size, stride, padding and tensor stride is a compile-time constant except ``M``, the GEMM's
row count, which carries the batch: one binary serves every batch size of a layer. The
tensors may have any strides (NHWC, with channels contiguous, is the fast case: its loads are
16-byte vectors); lengths are logical (N, C, H, W) for x and y and (K, C, R, S) for w.

Each kernel is one GEMM whose reduction walks (filter tap, channel block) in one flat loop, so
Triton's software pipeliner overlaps the loads of later iterations with the current dot:

* ``conv_fwd``: rows (n, p, q) of y, columns k, reduction (r, s, c); A gathered from x with the
  padding as the load mask.
* ``conv_bwd``: rows (n, h, w) of dx, columns c, reduction (r, s, k); A gathered from dy where
  ``h + ph - r*dh`` is a multiple of the stride and in range. Strided undilated problems run
  one GEMM per stride phase (grid axis 1) over only the taps that phase reaches; strided
  dilated ones mask the other taps (they only cost time).
* ``conv_bwd_spread``: backward data of a strided 1x1 layer without padding, one GEMM over
  dy's pixels whose epilogue spreads each result over dx with its zeros (below).
* backward weights is in ``conv_wrw.py``.

The copies around them (staging channels-last, TF32's transposed filter, the split sum) are in
``copies.py``.

Offsets are 32-bit: the solvers refuse tensors of 2**31 elements or more.
"""

import triton
import triton.language as tl


@triton.jit
def _tile(pid, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    """Row and column tile of program ``pid``, GROUP_M row tiles sharing columns in L2."""
    group = GROUP_M * tiles_n
    first = (pid // group) * GROUP_M
    rows = tl.minimum(tiles_m - first, GROUP_M)
    return first + (pid % group) % rows, (pid % group) // rows


@triton.jit
def conv_fwd(
    x_ptr,
    w_ptr,
    y_ptr,
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
    GROUP_M: tl.constexpr,
    STAGES: tl.constexpr,
    PRECISION: tl.constexpr,
    IMAGE_TILES: tl.constexpr,
    DIRECT_PIX: tl.constexpr,
    SPLITS: tl.constexpr,
):
    """y[n, k, od, p, q] = sum over (t, r, s, c) of w[k, c, t, r, s] *
    x[n, c, od*SD - PD + t*DD, p*SH - PH + r*DH, q*SW - PW + s*DW].

    SPLITS > 1 (layers with few output tiles): grid axis 1 splits the reduction loop into
    SPLITS shares; each writes its fp32 partial sums into its own copy of the output (y_ptr
    is then the partials, the Y strides theirs, M * K elements a copy), which
    ``conv_split_reduce`` adds up in share order.

    2-D problems have D = O = T = 1 (their depth code compiles away). IMAGE_TILES: each row
    tile lies in one image, so its pixels are consecutive: stores into a y whose pixels are
    packed (NCHW, NCDHW) run along them. DIRECT_PIX (1x1, stride 1, no padding, x's pixels
    packed): x is read at its pixel offsets directly, consecutive along the tile (NCHW's
    native GEMM, no copy)."""
    DEPTH: tl.constexpr = D * O * T > 1
    C_BLOCKS: tl.constexpr = (C + BLOCK_K - 1) // BLOCK_K
    if IMAGE_TILES:
        IMAGE_ROW_TILES: tl.constexpr = (O * P * Q + BLOCK_M - 1) // BLOCK_M
        tiles_m = (M // (O * P * Q)) * IMAGE_ROW_TILES
        pid_m, pid_n = _tile(tl.program_id(0), tiles_m, tl.cdiv(K, BLOCK_N), GROUP_M)
        n = pid_m // IMAGE_ROW_TILES
        pix = (pid_m % IMAGE_ROW_TILES) * BLOCK_M + tl.arange(0, BLOCK_M)
        pix = tl.max_contiguous(tl.multiple_of(pix, BLOCK_M), BLOCK_M)
        row_ok = pix < O * P * Q
        q = pix % Q
        if DEPTH:
            p = (pix // Q) % P
            od = pix // (P * Q)
        else:
            p = pix // Q
    else:
        pid_m, pid_n = _tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(K, BLOCK_N), GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = offs_m < M
        q = offs_m % Q
        p = (offs_m // Q) % P
        if DEPTH:
            od = (offs_m // (P * Q)) % O
        n = offs_m // (O * P * Q)
    ih0 = p * SH - PH
    iw0 = q * SW - PW
    if DEPTH:
        id0 = od * SD - PD
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # columns past K wrap around to stay in bounds; the store masks them out
    cols = offs_n % K if K % BLOCK_N != 0 else offs_n
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    ITERS: tl.constexpr = T * R * S * C_BLOCKS
    if SPLITS > 1:  # this program's share of the reduction, into its copy of the partials
        SHARE: tl.constexpr = (ITERS + SPLITS - 1) // SPLITS
        share = tl.program_id(1)
        lo = share * SHARE
        hi = tl.minimum(lo + SHARE, ITERS)
        y_ptr += share.to(tl.int64) * M * K
    else:
        lo = 0
        hi = ITERS
    for it in tl.range(lo, hi, num_stages=STAGES):
        tap = it // C_BLOCKS
        c0 = (it % C_BLOCKS) * BLOCK_K
        if DEPTH:  # noqa: SIM108 (a compile-time branch: 2-D code keeps its one division)
            r = (tap // S) % R
        else:
            r = tap // S
        s = tap % S
        ih = ih0 + r * DH
        iw = iw0 + s * DW
        ok = row_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        chans = tl.max_contiguous(tl.multiple_of(c0 + offs_k, BLOCK_K), BLOCK_K)
        if DIRECT_PIX:
            a_ptrs = x_ptr + n * XN + (pix * XW)[:, None] + (chans * XC)[None, :]
        else:
            a_ptrs = x_ptr + (n * XN + ih * XH + iw * XW)[:, None] + (chans * XC)[None, :]
        b_ptrs = w_ptr + (cols * WK)[None, :] + (chans * WC + r * WR + s * WS)[:, None]
        if DEPTH:
            t = tap // (R * S)
            i_d = id0 + t * DD
            ok = ok & (i_d >= 0) & (i_d < D)
            if not DIRECT_PIX:
                a_ptrs += (i_d * XD)[:, None]
            b_ptrs += t * WT
        if C % BLOCK_K == 0:
            a = tl.load(a_ptrs, mask=ok[:, None], other=0.0)
            b = tl.load(b_ptrs)
        else:
            chan_ok = chans < C
            a = tl.load(a_ptrs, mask=ok[:, None] & chan_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=chan_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if IMAGE_TILES and YH == Q * YW and (not DEPTH or YD == P * YH):
        y_ptrs = y_ptr + n * YN + (pix * YW)[:, None] + (offs_n * YC)[None, :]
    else:
        y_ptrs = y_ptr + (n * YN + p * YH + q * YW)[:, None] + (offs_n * YC)[None, :]
        if DEPTH:
            y_ptrs += (od * YD)[:, None]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n < K)[None, :])


@triton.jit
def conv_bwd(
    x_ptr,
    w_ptr,
    y_ptr,
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
    GROUP_M: tl.constexpr,
    STAGES: tl.constexpr,
    PRECISION: tl.constexpr,
    PHASED: tl.constexpr,
    IMAGE_TILES: tl.constexpr,
    DIRECT_PIX: tl.constexpr,
    SPLITS: tl.constexpr,
):
    """dx[n, c, d, h, w] = sum over (t, r, s, k) of dy[n, k, od, p, q] * w[k, c, t, r, s]
    where d = od*SD - PD + t*DD, h = p*SH - PH + r*DH and w = q*SW - PW + s*DW.

    PHASED (a stride above 1, no dilation): program axis 1 is the stride phase (d mod SD,
    h mod SH, w mod SW); its rows are that phase's pixels and its taps only those whose stride
    divides, so no dot is spent on masked taps. Otherwise every tap runs, masked where the
    stride does not divide. IMAGE_TILES, DIRECT_PIX and SPLITS (never with PHASED) as in
    ``conv_fwd``, for dx's rows and dy's pixels (split: x_ptr and the X strides are the
    partials', M * C elements a copy); D = O = T = 1 in 2-D."""
    DEPTH: tl.constexpr = D * O * T > 1
    K_BLOCKS: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    if IMAGE_TILES:
        IMAGE_ROW_TILES: tl.constexpr = (D * H * W + BLOCK_M - 1) // BLOCK_M
        tiles_m = (M // (D * H * W)) * IMAGE_ROW_TILES
        pid_m, pid_n = _tile(tl.program_id(0), tiles_m, tl.cdiv(C, BLOCK_N), GROUP_M)
        n = pid_m // IMAGE_ROW_TILES
        pix = (pid_m % IMAGE_ROW_TILES) * BLOCK_M + tl.arange(0, BLOCK_M)
        pix = tl.max_contiguous(tl.multiple_of(pix, BLOCK_M), BLOCK_M)
        row_ok = pix < D * H * W
        wi = pix % W
        if DEPTH:
            hi = (pix // W) % H
            di = pix // (H * W)
        else:
            hi = pix // W
        t0 = 0
        r0 = 0
        s0 = 0
        taps_s = S
        taps_rs = R * S
        taps = T * R * S
    else:
        pid_m, pid_n = _tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(C, BLOCK_N), GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        if PHASED:
            DP: tl.constexpr = (D + SD - 1) // SD
            HP: tl.constexpr = (H + SH - 1) // SH
            WP: tl.constexpr = (W + SW - 1) // SW
            phase = tl.program_id(1)
            ph = (phase // SW) % SH
            pw = phase % SW
            hi = ph + ((offs_m // WP) % HP) * SH
            wi = pw + (offs_m % WP) * SW
            row_ok = (offs_m < M) & (hi < H) & (wi < W)
            if DEPTH:
                pd = phase // (SH * SW)
                di = pd + ((offs_m // (HP * WP)) % DP) * SD
                n = offs_m // (DP * HP * WP)
                row_ok = row_ok & (di < D)
                t0 = (pd + PD) % SD
            else:
                n = offs_m // (HP * WP)
                t0 = 0
            # the taps t = t0 + SD*i, r = r0 + SH*j, s = s0 + SW*l whose strides divide
            # d + PD - t, h + PH - r and w + PW - s in this phase
            r0 = (ph + PH) % SH
            s0 = (pw + PW) % SW
            taps_s = (S - s0 + SW - 1) // SW
            taps_rs = ((R - r0 + SH - 1) // SH) * taps_s
            taps = ((T - t0 + SD - 1) // SD) * taps_rs
        else:
            wi = offs_m % W
            hi = (offs_m // W) % H
            if DEPTH:
                di = (offs_m // (H * W)) % D
            n = offs_m // (D * H * W)
            row_ok = offs_m < M
            t0 = 0
            r0 = 0
            s0 = 0
            taps_s = S
            taps_rs = R * S
            taps = T * R * S
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    cols = offs_n % C if C % BLOCK_N != 0 else offs_n
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SPLITS > 1:  # unphased: this program's share of every tap's slices
        SHARE: tl.constexpr = (T * R * S * K_BLOCKS + SPLITS - 1) // SPLITS
        share = tl.program_id(1)
        it_lo = share * SHARE
        it_hi = tl.minimum(it_lo + SHARE, T * R * S * K_BLOCKS)
        x_ptr += share.to(tl.int64) * M * C
    else:
        it_lo = 0
        it_hi = taps * K_BLOCKS
    for it in tl.range(it_lo, it_hi, num_stages=STAGES):
        tap = it // K_BLOCKS
        k0 = (it % K_BLOCKS) * BLOCK_K
        if PHASED:
            if DEPTH:
                t = t0 + (tap // taps_rs) * SD
                r = r0 + ((tap % taps_rs) // taps_s) * SH
            else:
                r = r0 + (tap // taps_s) * SH
            s = s0 + (tap % taps_s) * SW
        else:
            if DEPTH:
                t = tap // (R * S)
                r = (tap // S) % R
            else:
                r = tap // S
            s = tap % S
        th = hi + PH - r * DH
        tw = wi + PW - s * DW
        if PHASED or SH == 1:
            p = th // SH
            ok_h = (th >= 0) & (p < P)
        else:
            p = th // SH
            ok_h = (th >= 0) & (th % SH == 0) & (p < P)
        if PHASED or SW == 1:
            q = tw // SW
            ok_w = (tw >= 0) & (q < Q)
        else:
            q = tw // SW
            ok_w = (tw >= 0) & (tw % SW == 0) & (q < Q)
        ok = row_ok & ok_h & ok_w
        ks = tl.max_contiguous(tl.multiple_of(k0 + offs_k, BLOCK_K), BLOCK_K)
        if DIRECT_PIX:
            a_ptrs = y_ptr + n * YN + (pix * YW)[:, None] + (ks * YC)[None, :]
        else:
            a_ptrs = y_ptr + (n * YN + p * YH + q * YW)[:, None] + (ks * YC)[None, :]
        b_ptrs = w_ptr + (ks * WK)[:, None] + (cols * WC + r * WR + s * WS)[None, :]
        if DEPTH:
            td = di + PD - t * DD
            od = td // SD
            if PHASED or SD == 1:
                ok = ok & (td >= 0) & (od < O)
            else:
                ok = ok & (td >= 0) & (td % SD == 0) & (od < O)
            if not DIRECT_PIX:
                a_ptrs += (od * YD)[:, None]
            b_ptrs += t * WT
        if K % BLOCK_K == 0:
            a = tl.load(a_ptrs, mask=ok[:, None], other=0.0)
            b = tl.load(b_ptrs)
        else:
            k_ok = ks < K
            a = tl.load(a_ptrs, mask=ok[:, None] & k_ok[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=k_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    if IMAGE_TILES and XH == W * XW and (not DEPTH or XD == H * XH):
        x_ptrs = x_ptr + n * XN + (pix * XW)[:, None] + (offs_n * XC)[None, :]
    else:
        x_ptrs = x_ptr + (n * XN + hi * XH + wi * XW)[:, None] + (offs_n * XC)[None, :]
        if DEPTH:
            x_ptrs += (di * XD)[:, None]
    tl.store(x_ptrs, acc.to(x_ptr.dtype.element_ty), mask=row_ok[:, None] & (offs_n < C)[None, :])


@triton.jit
def _spread_row(values, SW: tl.constexpr):
    """A [BLOCK_N, BLOCK_M] tile with SW - 1 zeros after each element along its last axis."""
    row = values
    if SW >= 2:  # (compile-time branches: Triton compiles no return inside an if)
        row = tl.interleave(row, tl.zeros_like(row))
    if SW == 4:
        row = tl.interleave(row, tl.zeros_like(row))
    return row


@triton.jit
def conv_bwd_spread(
    x_ptr,
    w_ptr,
    y_ptr,
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
    GROUP_M: tl.constexpr,
    STAGES: tl.constexpr,
    PRECISION: tl.constexpr,
):
    """dx[n, c, p*SH, q*SW] = sum over k of dy[n, k, p, q] * w[k, c, 0, 0]; every other dx
    element is 0 (no tap reaches it). 2-D, 1x1, no padding.

    The phased ``conv_bwd`` runs one GEMM per stride phase, each writing every SW-th element
    of a channels-first dx row, and the phases no tap reaches write only zeros. Here rows are
    dy's pixels (p, q) of one image (M = N * P * Q; dy read in place, consecutive along the
    tile in NCHW), columns c, reduction k; the epilogue writes the SH x SW block of dx each
    result heads: along a dx row the results interleaved with SW - 1 zeros (SW is 1, 2 or 4),
    and SH - 1 rows of zeros below, so every dx element is written once, in runs along its
    rows. The constexprs are ``conv_bwd``'s; those a 1x1 unpadded layer does not need are
    unused."""
    ROW_TILES: tl.constexpr = (P * Q + BLOCK_M - 1) // BLOCK_M
    K_BLOCKS: tl.constexpr = (K + BLOCK_K - 1) // BLOCK_K
    tiles_m = (M // (P * Q)) * ROW_TILES
    pid_m, pid_n = _tile(tl.program_id(0), tiles_m, tl.cdiv(C, BLOCK_N), GROUP_M)
    n = pid_m // ROW_TILES
    first = (pid_m % ROW_TILES) * BLOCK_M
    pix = first + tl.arange(0, BLOCK_M)
    pix = tl.max_contiguous(tl.multiple_of(pix, BLOCK_M), BLOCK_M)
    row_ok = pix < P * Q
    # dy's pixels packed (NCHW): one offset per pixel, consecutive along the tile
    dy_pixels = pix * YW if YH == Q * YW else (pix // Q) * YH + (pix % Q) * YW
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # columns past C wrap around to stay in bounds; the stores mask them out
    cols = offs_n % C if C % BLOCK_N != 0 else offs_n
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for it in tl.range(0, K_BLOCKS, num_stages=STAGES):
        ks = tl.max_contiguous(tl.multiple_of(it * BLOCK_K + offs_k, BLOCK_K), BLOCK_K)
        a_ptrs = y_ptr + n * YN + dy_pixels[:, None] + (ks * YC)[None, :]
        b_ptrs = w_ptr + (ks * WK)[:, None] + (cols * WC)[None, :]
        a = tl.load(a_ptrs, mask=row_ok[:, None], other=0.0)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    # dx rows: element j of a spread row belongs to dy pixel first + j // SW, column j % SW
    # of its block
    row = _spread_row(tl.trans(acc.to(x_ptr.dtype.element_ty)), SW)
    j = tl.arange(0, BLOCK_M * SW)
    src = first + j // SW
    h = (src // Q) * SH
    w = (src % Q) * SW + j % SW
    ok = (src < P * Q) & (w < W)
    chan_ok = offs_n < C
    base = x_ptr + n * XN + (offs_n * XC)[:, None]
    mask = chan_ok[:, None] & (ok & (h < H))[None, :]
    tl.store(base + (h * XH + w * XW)[None, :], row, mask=mask)
    zeros = tl.zeros_like(row)
    for i in tl.static_range(1, SH):
        mask = chan_ok[:, None] & (ok & (h + i < H))[None, :]
        tl.store(base + ((h + i) * XH + w * XW)[None, :], zeros, mask=mask)
