"""Numba kernels of ``direct.depthwise``: float32 in, float32 out, float32 accumulation.

Every kernel takes arrays in *memory* order (NHWC buffers as ``(N, H, W, C)``, NCHW as
``(N, C, H, W)``), weights staged by the solver, and the geometry as plain integers. Padding is
never materialised: each loop works out the in-bounds range of the tap it applies. ``M`` is the
channel multiplier (output channel ``k = c * M + m`` reads input channel ``c``).

* channels-last kernels run their innermost loop over channels (contiguous, vectorised by
  LLVM) and split the output rows ``(n, oh)`` (or input rows) over threads;
* channels-first kernels run their innermost loop along an image row and split the
  ``(n, channel)`` planes over threads.

Compiled functions are cached on disk (``cache=True``): a process pays the JIT cost (about a
second per kernel and array layout) once per machine, not once per run.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

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


# -- channels last ----------------------------------------------------------------------------


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


# -- channels first ---------------------------------------------------------------------------


@_jit
def forward_nchw(x, w, y, mult, sh, sw, ph, pw, dh, dw):
    """``y[n, k] = sum_taps w[k, fy, fx] * shifted x[n, k // M]`` (w is (K, FY, FX))."""
    n_img, _, height, width = x.shape
    channels, fy_n, fx_n = w.shape
    _, _, out_h, out_w = y.shape
    for plane in prange(n_img * channels):
        n, k = plane // channels, plane % channels
        src = x[n, k // mult]
        out = y[n, k]
        out[:, :] = 0.0
        for fy in range(fy_n):
            oh0 = _first(fy * dh - ph, sh)
            oh1 = _stop(fy * dh - ph, sh, height, out_h)
            for fx in range(fx_n):
                ow0 = _first(fx * dw - pw, sw)
                ow1 = _stop(fx * dw - pw, sw, width, out_w)
                weight = w[k, fy, fx]
                shift = fx * dw - pw
                for oh in range(oh0, oh1):
                    line = src[oh * sh - ph + fy * dh]
                    target = out[oh]
                    for ow in range(ow0, ow1):
                        target[ow] += weight * line[ow * sw + shift]


@_jit
def backward_data_nchw(dy, w, dx, mult, sh, sw, ph, pw, dh, dw):
    """``dx[n, c] = sum_m,taps w[c*M + m, fy, fx] * dy[n, c*M + m]`` scattered back."""
    n_img, chans, height, width = dx.shape
    _, fy_n, fx_n = w.shape
    _, _, out_h, out_w = dy.shape
    for plane in prange(n_img * chans):
        n, c = plane // chans, plane % chans
        out = dx[n, c]
        out[:, :] = 0.0
        for m in range(mult):
            k = c * mult + m
            grad = dy[n, k]
            for fy in range(fy_n):
                oh0 = _first(fy * dh - ph, sh)
                oh1 = _stop(fy * dh - ph, sh, height, out_h)
                for fx in range(fx_n):
                    ow0 = _first(fx * dw - pw, sw)
                    ow1 = _stop(fx * dw - pw, sw, width, out_w)
                    weight = w[k, fy, fx]
                    shift = fx * dw - pw
                    for oh in range(oh0, oh1):
                        target = out[oh * sh - ph + fy * dh]
                        line = grad[oh]
                        for ow in range(ow0, ow1):
                            target[ow * sw + shift] += weight * line[ow]


@_jit
def backward_weights_nchw(x, dy, dw_out, mult, sh, sw, ph, pw, dh, dw):
    """``dw_out[k, fy, fx] = sum_n,oh,ow dy[n, k, oh, ow] * x[n, k // M, ih, iw]``."""
    n_img, _, height, width = x.shape
    channels, fy_n, fx_n = dw_out.shape
    _, _, out_h, out_w = dy.shape
    for k in prange(channels):
        for fy in range(fy_n):
            oh0 = _first(fy * dh - ph, sh)
            oh1 = _stop(fy * dh - ph, sh, height, out_h)
            for fx in range(fx_n):
                ow0 = _first(fx * dw - pw, sw)
                ow1 = _stop(fx * dw - pw, sw, width, out_w)
                shift = fx * dw - pw
                acc = np.float32(0.0)
                for n in range(n_img):
                    src = x[n, k // mult]
                    grad = dy[n, k]
                    for oh in range(oh0, oh1):
                        line = src[oh * sh - ph + fy * dh]
                        g_line = grad[oh]
                        for ow in range(ow0, ow1):
                            acc += g_line[ow] * line[ow * sw + shift]
                dw_out[k, fy, fx] = acc
