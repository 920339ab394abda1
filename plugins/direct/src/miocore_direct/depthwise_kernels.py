"""Numba kernels of ``direct.depthwise``: float32 in, float32 out, float32 accumulation.

Every kernel takes channels-last arrays in memory order (``(N, H, W, C)``), weights staged by
the solver, and the geometry as plain integers. Padding is never materialised: each loop
works out the in-bounds range of the tap it applies. ``M`` is the channel multiplier (output
channel ``k = c * M + m`` reads input channel ``c``).

The innermost loop runs over channels (contiguous, vectorised by LLVM) and threads split the
output rows ``(n, oh)`` (input rows for backward data). Channels-first tensors are staged in
channels-last order by the solver: kernels that walked NCHW image rows (vectorised along a row
of 7-112 pixels, one short row per tap) measured 15-25x slower than a transpose plus these
(38 ms against 1.9 ms on ConvNeXt's 7x7 layer, one thread).

Compiled functions are cached on disk (``cache=True``): a process pays the JIT cost (about a
second per kernel and array layout) once per machine, not once per run.
"""

from __future__ import annotations

import numba
from numba import prange

from miocore_direct.openmp import choose_wait_policy

choose_wait_policy()  # OpenMP reads it when the first kernel starts its threads

# Reassociation lets LLVM vectorise the reductions; no flag that changes NaN/Inf semantics.
_FLAGS = {"reassoc", "contract"}
_jit = numba.njit(parallel=True, cache=True, fastmath=_FLAGS, nogil=True)


@numba.njit(inline="always")
def _first(shift: int, stride: int) -> int:
    """Smallest ``o >= 0`` with ``o * stride + shift >= 0``."""
    return max(0, -(shift // stride))


@numba.njit(inline="always")
def _stop(shift: int, stride: int, limit: int, count: int) -> int:
    """One past the largest ``o < count`` with ``o * stride + shift < limit``."""
    return min(count, (limit - 1 - shift) // stride + 1)


@_jit
def forward_nhwc(x, wt, y, mult, sh, sw, ph, pw, dh, dw):
    """``y[n, oh, ow, k] = sum x[n, ih, iw, k // M] * wt[fy, fx, k]`` (wt is (FY, FX, K))."""
    n_img, height, width, _ = x.shape
    fy_n, fx_n, channels = wt.shape
    _, out_h, out_w, _ = y.shape
    for row in prange(n_img * out_h):
        n, oh = row // out_h, row % out_h
        for ow in range(out_w):
            out = y[n, oh, ow]
            out[:] = 0.0
            for fy in range(fy_n):
                ih = oh * sh - ph + fy * dh
                if ih < 0 or ih >= height:
                    continue
                for fx in range(fx_n):
                    iw = ow * sw - pw + fx * dw
                    if iw < 0 or iw >= width:
                        continue
                    src = x[n, ih, iw]
                    tap = wt[fy, fx]
                    if mult == 1:
                        for k in range(channels):
                            out[k] += src[k] * tap[k]
                    else:
                        for k in range(channels):
                            out[k] += src[k // mult] * tap[k]


@_jit
def backward_data_nhwc(dy, wt, dx, mult, sh, sw, ph, pw, dh, dw):
    """``dx[n, ih, iw, c] = sum_m,taps dy[n, oh, ow, c*M + m] * wt[fy, fx, c*M + m]`` (gather)."""
    n_img, height, width, chans = dx.shape
    fy_n, fx_n, _ = wt.shape
    _, out_h, out_w, _ = dy.shape
    for row in prange(n_img * height):
        n, ih = row // height, row % height
        for iw in range(width):
            out = dx[n, ih, iw]
            out[:] = 0.0
            for fy in range(fy_n):
                t = ih + ph - fy * dh
                if t < 0 or t % sh:
                    continue
                oh = t // sh
                if oh >= out_h:
                    continue
                for fx in range(fx_n):
                    u = iw + pw - fx * dw
                    if u < 0 or u % sw:
                        continue
                    ow = u // sw
                    if ow >= out_w:
                        continue
                    src = dy[n, oh, ow]
                    tap = wt[fy, fx]
                    if mult == 1:
                        for c in range(chans):
                            out[c] += src[c] * tap[c]
                    else:
                        for c in range(chans):
                            for m in range(mult):
                                out[c] += src[c * mult + m] * tap[c * mult + m]


@_jit
def backward_weights_nhwc(x, dy, partial, mult, sh, sw, ph, pw, dh, dw):
    """``partial[part, fy, fx, k]``: the sum over part ``part``'s output rows of
    ``dy[n, oh, ow, k] * x[n, ih, iw, k // M]``; the caller sums the parts."""
    n_img, height, width, _ = x.shape
    parts, fy_n, fx_n, channels = partial.shape
    _, out_h, out_w, _ = dy.shape
    rows = n_img * out_h
    for part in prange(parts):
        acc = partial[part]
        acc[:] = 0.0
        for row in range(part * rows // parts, (part + 1) * rows // parts):
            n, oh = row // out_h, row % out_h
            for fy in range(fy_n):
                ih = oh * sh - ph + fy * dh
                if ih < 0 or ih >= height:
                    continue
                for fx in range(fx_n):
                    first = _first(fx * dw - pw, sw)
                    stop = _stop(fx * dw - pw, sw, width, out_w)
                    tap = acc[fy, fx]
                    for ow in range(first, stop):
                        src = x[n, ih, ow * sw - pw + fx * dw]
                        grad = dy[n, oh, ow]
                        if mult == 1:
                            for k in range(channels):
                                tap[k] += grad[k] * src[k]
                        else:
                            for k in range(channels):
                                tap[k] += grad[k] * src[k // mult]


#: Channels :func:`nchw_to_nhwc` moves together: eight rows of the NCHW side at once, so every
#: pixel's write on the NHWC side is 32 contiguous bytes (one row at a time wrote 4 bytes to
#: each of W lines: 1.3-1.5x slower on EfficientNet's staged layers, one thread).
_TRANSPOSE_ROWS = 8  # as many rows as the unrolled code below names


@_jit
def nchw_to_nhwc(src, dst):
    """``dst[n, h, w, c] = src[n, c, h, w]`` for packed arrays: each image a (C, H*W) to
    (H*W, C) transpose, one task per image and block of eight channels."""
    n_img, chans, height, width = src.shape
    pix = height * width
    s3 = src.reshape((n_img, chans, pix))
    d3 = dst.reshape((n_img, pix, chans))
    blocks = (chans + _TRANSPOSE_ROWS - 1) // _TRANSPOSE_ROWS
    for task in prange(n_img * blocks):
        n, c0 = task // blocks, (task % blocks) * _TRANSPOSE_ROWS
        if c0 + _TRANSPOSE_ROWS <= chans:
            r0, r1, r2, r3 = s3[n, c0], s3[n, c0 + 1], s3[n, c0 + 2], s3[n, c0 + 3]
            r4, r5, r6, r7 = s3[n, c0 + 4], s3[n, c0 + 5], s3[n, c0 + 6], s3[n, c0 + 7]
            for q in range(pix):
                out = d3[n, q]
                out[c0], out[c0 + 1], out[c0 + 2], out[c0 + 3] = r0[q], r1[q], r2[q], r3[q]
                out[c0 + 4], out[c0 + 5], out[c0 + 6], out[c0 + 7] = r4[q], r5[q], r6[q], r7[q]
        else:
            for q in range(pix):
                for c in range(c0, chans):
                    d3[n, q, c] = s3[n, c, q]


@_jit
def nhwc_to_nchw(src, dst):
    """``dst[n, c, h, w] = src[n, h, w, c]``: the inverse of :func:`nchw_to_nhwc`, one (n, h)
    row per task, each channel's W outputs written in a run (eight channels' rows at once
    wrote 2-2.5x slower here: eight write streams per pixel)."""
    n_img, chans, height, width = dst.shape
    for row in prange(n_img * height):
        n, h = row // height, row % height
        block = src[n, h]
        for c in range(chans):
            line = dst[n, c, h]
            for w in range(width):
                line[w] = block[w, c]
