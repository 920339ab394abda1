"""Numba kernels of ``direct.grouped``: float32, vectorised over the groups.

Tensors are staged group-innermost: x as ``(N, H, W, C/g, G)``, y as ``(N, OH, OW, K/g, G)``,
weights as ``(FY, FX, C/g, K/g, G)``. Each (input channel, output channel) pair of a group is
then one multiply-add over a contiguous run of ``G`` lanes, so 32 groups of 4 channels cost one
vector loop per pair instead of 32 tiny matrix products. Threads split the output rows (input
rows for backward data, which gathers so that no two threads write one row); backward weights
sums per-part partials. Compiled functions are cached on disk (``cache=True``).
"""

from __future__ import annotations

import numba
from numba import prange

from miocore_direct.openmp import choose_wait_policy

choose_wait_policy()  # OpenMP reads it when the first kernel starts its threads

_FLAGS = {"reassoc", "contract"}
_jit = numba.njit(parallel=True, cache=True, fastmath=_FLAGS, nogil=True)


@_jit
def forward(x, wt, y, sh, sw, ph, pw, dh, dw):
    """``y[n, oh, ow, j, g] = sum x[n, ih, iw, i, g] * wt[fy, fx, i, j, g]``."""
    n_img, height, width, cg, groups = x.shape
    fy_n, fx_n, _, kg, _ = wt.shape
    _, out_h, out_w, _, _ = y.shape
    for row in prange(n_img * out_h):
        n, oh = row // out_h, row % out_h
        for ow in range(out_w):
            out = y[n, oh, ow]
            out[:, :] = 0.0
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
                    for i in range(cg):
                        for j in range(kg):
                            for g in range(groups):
                                out[j, g] += src[i, g] * tap[i, j, g]


@_jit
def backward_data(dy, wt, dx, sh, sw, ph, pw, dh, dw):
    """``dx[n, ih, iw, i, g] = sum dy[n, oh, ow, j, g] * wt[fy, fx, i, j, g]`` (a gather)."""
    n_img, height, width, cg, groups = dx.shape
    fy_n, fx_n, _, kg, _ = wt.shape
    _, out_h, out_w, _, _ = dy.shape
    for row in prange(n_img * height):
        n, ih = row // height, row % height
        for iw in range(width):
            out = dx[n, ih, iw]
            out[:, :] = 0.0
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
                    for i in range(cg):
                        for j in range(kg):
                            for g in range(groups):
                                out[i, g] += src[j, g] * tap[i, j, g]


@_jit
def backward_weights(x, dy, partial, sh, sw, ph, pw, dh, dw):
    """``partial[part, fy, fx, i, j, g]``: part ``part``'s rows of
    ``sum dy[n, oh, ow, j, g] * x[n, ih, iw, i, g]``; the caller sums the parts."""
    n_img, height, width, cg, groups = x.shape
    parts, fy_n, fx_n, _, kg, _ = partial.shape
    _, out_h, out_w, _, _ = dy.shape
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
                    tap = acc[fy, fx]
                    for ow in range(out_w):
                        iw = ow * sw - pw + fx * dw
                        if iw < 0 or iw >= width:
                            continue
                        src = x[n, ih, iw]
                        grad = dy[n, oh, ow]
                        for i in range(cg):
                            for j in range(kg):
                                for g in range(groups):
                                    tap[i, j, g] += grad[j, g] * src[i, g]
