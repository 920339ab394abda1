"""Staging of the shifted-diagonal path of ``direct.grouped``
(:mod:`miocore_direct.grouped_shift`): zero-padded channels-last float32 inputs and the
shifted-diagonal weight layouts.

A padded buffer ``(N, Hp, Wp, Cp)`` holds ``src[n, h, w, c]`` at ``(n, off_h + h*step_h,
off_w + w*step_w, off_c + c)`` and zeros elsewhere (``step > 1`` is the zero insertion of a
strided backward-data pass). Float32 NCHW and NHWC sources go through a compiled copy that
writes every row once (zeros included), so the workspace needs no clearing; other dtypes and
strided tensors take numpy's casting copy after a fill.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numba
from numba import prange

if TYPE_CHECKING:
    import numpy as np

_jit = numba.njit(parallel=True, cache=True, nogil=True)


@_jit
def _pad_rows(src, dst, channels_first, off_h, off_w, off_c, step_h, step_w):
    """``dst`` rows from ``src`` (``(N, C, H, W)`` when ``channels_first`` else
    ``(N, H, W, C)``), zero outside the placed pixels and channels."""
    n_img, rows, cols, width = dst.shape
    if channels_first:
        chans, height, src_w = src.shape[1], src.shape[2], src.shape[3]
    else:
        height, src_w, chans = src.shape[1], src.shape[2], src.shape[3]
    for task in prange(n_img * rows):
        n = task // rows
        b = task % rows
        for q in range(cols):
            for c in range(width):
                dst[n, b, q, c] = 0.0
        t = b - off_h
        if t < 0 or t % step_h != 0 or t // step_h >= height:
            continue
        h = t // step_h
        w_lo = max(0, -((off_w) // step_w)) if off_w < 0 else 0
        w_hi = min(src_w, (cols - 1 - off_w) // step_w + 1)
        if channels_first:
            for c in range(chans):
                for w in range(w_lo, w_hi):
                    dst[n, b, off_w + w * step_w, off_c + c] = src[n, c, h, w]
        else:
            for w in range(w_lo, w_hi):
                for c in range(chans):
                    dst[n, b, off_w + w * step_w, off_c + c] = src[n, h, w, c]


def _placed(size: int, offset: int, step: int, room: int) -> tuple[int, int]:
    """Source indices ``[lo, hi)`` whose ``offset + i*step`` falls in ``[0, room)``."""
    lo = max(0, -(offset // step)) if offset < 0 else 0
    hi = min(size, (room - 1 - offset) // step + 1)
    return lo, max(lo, hi)


def pad(
    array: np.ndarray,
    dst: np.ndarray,
    offsets: tuple[int, int, int],
    steps: tuple[int, int] = (1, 1),
) -> None:
    """Write the logical ``(N, C, H, W)`` caller tensor ``array`` into the padded float32
    buffer ``dst`` at ``offsets`` (rows, columns, channels) with ``steps`` between pixels."""
    import numpy as np

    off_h, off_w, off_c = offsets
    if array.dtype == np.float32 and array.flags.c_contiguous:  # packed NCHW
        _pad_rows(array, dst, True, off_h, off_w, off_c, *steps)
        return
    nhwc = array.transpose(0, 2, 3, 1)
    if array.dtype == np.float32 and nhwc.flags.c_contiguous:  # packed NHWC
        _pad_rows(nhwc, dst, False, off_h, off_w, off_c, *steps)
        return
    dst.fill(0.0)
    (h0, h1), (w0, w1) = (
        _placed(nhwc.shape[1], off_h, steps[0], dst.shape[1]),
        _placed(nhwc.shape[2], off_w, steps[1], dst.shape[2]),
    )
    if h0 < h1 and w0 < w1:
        rows = slice(off_h + h0 * steps[0], off_h + (h1 - 1) * steps[0] + 1, steps[0])
        cols = slice(off_w + w0 * steps[1], off_w + (w1 - 1) * steps[1] + 1, steps[1])
        target = dst[:, rows, cols, off_c : off_c + nhwc.shape[3]]
        np.copyto(target, nhwc[:, h0:h1, w0:w1], casting="unsafe")


def diagonal_index(channels: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For channel ``k`` (group lane ``j = k % width``) and shift slot ``s`` (shift
    ``s - (width - 1)``): the lane ``i = s + j - (width - 1)`` of the other side, clipped, and
    whether it lies in the group. Arrays of shape ``(2*width - 1, channels)``."""
    import numpy as np

    slots = np.arange(2 * width - 1)[:, None]
    lane = np.arange(channels)[None, :] % width
    other = slots + lane - (width - 1)
    inside = (other >= 0) & (other < width)
    return np.broadcast_to(np.arange(channels), other.shape), np.clip(other, 0, width - 1), inside


def diagonal_weights(w: np.ndarray, width: int, dst: np.ndarray, transpose: bool) -> None:
    """``dst[fy, fx, s, k]`` from ``w`` (K, W, FY, FX): forward ``w[k, i, fy, fx]`` with
    ``i - j = s - (W-1)``; ``transpose`` (backward data, k is then an input channel
    ``g*W + i``) ``w[g*W + j, i, FY-1-fy, FX-1-fx]`` with ``j - i = s - (W-1)``."""
    import numpy as np

    k, _, fy, fx = w.shape
    chans, other, inside = diagonal_index(k, width)
    taps = w.reshape(k, width, fy * fx)
    if transpose:
        rows = chans - chans % width + other  # output channel g*W + j of input lane i = k % W
        picked = taps[rows, chans % width, ::-1]  # (S, K, taps), taps reversed = flipped
    else:
        picked = taps[chans, other, :]
    picked = np.where(inside[..., None], picked, 0)
    np.copyto(dst, picked.transpose(2, 0, 1).reshape(dst.shape), casting="unsafe")


def undiagonal_weights(dwd: np.ndarray, width: int, w: np.ndarray) -> None:
    """``w[k, i, fy, fx] = dwd[fy, fx, i - j + W - 1, k]`` (the inverse of the forward
    :func:`diagonal_weights`) into the caller's weights."""
    import numpy as np

    k, _, fy, fx = w.shape
    lanes = np.arange(width)[None, :]
    chans = np.arange(k)[:, None]
    slots = lanes - chans % width + width - 1  # (K, W)
    flat = dwd.reshape(fy * fx, 2 * width - 1, k)
    picked = flat[:, slots, np.broadcast_to(chans, slots.shape)]  # (taps, K, W)
    np.copyto(w, picked.transpose(1, 2, 0).reshape(w.shape), casting="unsafe")
