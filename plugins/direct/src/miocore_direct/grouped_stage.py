"""Staging of the shifted-diagonal path of ``direct.grouped``
(:mod:`miocore_direct.grouped_shift`): zero-padded channels-last float32 inputs and the
shifted-diagonal weight layouts.

A padded buffer ``(N, Hp, Wp, Cp)`` holds ``src[n, h, w, c]`` at ``(n, off_h + h*step_h,
off_w + w*step_w, off_c + c)`` and zeros elsewhere (``step > 1`` is the zero insertion of a
strided backward-data pass). numpy's casting copy does the placing (one transposing copy for
NCHW, measured 3x faster here than a compiled row loop: 0.23 against 0.66 ms for 128x56x56)
and only the margins are zeroed, so the workspace needs no clearing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


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
    nhwc = array.transpose(0, 2, 3, 1)
    (h0, h1), (w0, w1) = (
        _placed(nhwc.shape[1], off_h, steps[0], dst.shape[1]),
        _placed(nhwc.shape[2], off_w, steps[1], dst.shape[2]),
    )
    if h0 >= h1 or w0 >= w1:
        dst.fill(0.0)
        return
    rows = slice(off_h + h0 * steps[0], off_h + (h1 - 1) * steps[0] + 1, steps[0])
    cols = slice(off_w + w0 * steps[1], off_w + (w1 - 1) * steps[1] + 1, steps[1])
    chans = slice(off_c, off_c + nhwc.shape[3])
    if steps == (1, 1):  # zero the margins only (numpy's contiguous fills and copies run
        # at memory speed; a compiled per-row loop measured 4x slower here)
        dst[:, : rows.start] = 0.0
        dst[:, rows.stop :] = 0.0
        band = dst[:, rows]
        band[:, :, : cols.start] = 0.0
        band[:, :, cols.stop :] = 0.0
        band[:, :, cols, : chans.start] = 0.0
        band[:, :, cols, chans.stop :] = 0.0
    else:
        dst.fill(0.0)
    np.copyto(dst[:, rows, cols, chans], nhwc[:, h0:h1, w0:w1], casting="unsafe")


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


def diagonal_gather(shape: tuple[int, ...], width: int, transpose: bool) -> np.ndarray:
    """Flat indices into weights of ``shape`` (K, W, FY, FX) of every ``(fy, fx, s, k)`` entry
    of the diagonal layout (see :func:`diagonal_weights`), -1 where the weight is zero."""
    import numpy as np

    k, _, fy, fx = shape
    chans, other, inside = diagonal_index(k, width)
    taps = np.arange(k * width * fy * fx).reshape(k, width, fy * fx)
    if transpose:
        rows = chans - chans % width + other  # output channel g*W + j of input lane i = k % W
        picked = taps[rows, chans % width, ::-1]  # (S, K, taps), taps reversed = flipped
    else:
        picked = taps[chans, other, :]
    picked = np.where(inside[..., None], picked, -1)
    return np.ascontiguousarray(picked.transpose(2, 0, 1)).reshape(fy, fx, 2 * width - 1, k)


def diagonal_weights(
    w: np.ndarray, width: int, dst: np.ndarray, transpose: bool, index: np.ndarray | None = None
) -> None:
    """``dst[fy, fx, s, k]`` from ``w`` (K, W, FY, FX): forward ``w[k, i, fy, fx]`` with
    ``i - j = s - (W-1)``; ``transpose`` (backward data, k is then an input channel
    ``g*W + i``) ``w[g*W + j, i, FY-1-fy, FX-1-fx]`` with ``j - i = s - (W-1)``. ``index``
    is :func:`diagonal_gather`'s answer, when the caller keeps it."""
    import numpy as np

    if index is None:
        index = diagonal_gather(w.shape, width, transpose)
    flat = np.ravel(w)  # a view for packed weights
    np.copyto(dst, flat.take(np.maximum(index, 0)), casting="unsafe")
    np.copyto(dst, 0.0, where=index < 0)


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
