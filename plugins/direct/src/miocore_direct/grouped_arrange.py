"""Data movement of ``direct.grouped``'s vector path (:mod:`miocore_direct.grouped_vector`):
the caller's weights rearranged per block of 16 output lanes (through the register transposes
of :mod:`miocore_direct.grouped_transpose` where the weights are packed float32 and the
groups 16 or 32 wide), or read in place (32-wide backward data, KYXC weights), and the input
staged into the zero-padded, pitched buffer the kernels read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from miocore_direct.grouped_wide import WIDTH as WIDE

if TYPE_CHECKING:
    import numpy as np


def arranged_weights(w: np.ndarray, width: int, dst: np.ndarray, transpose: bool) -> None:
    """``dst[kb, tap, i, l]`` for channel ``k = kb*V + l`` (zero for padding channels ``k >=
    K``): forward ``w[k, i, fy, fx]``; ``transpose`` (backward data, ``k = g*W + i`` an input
    channel and ``i`` standing for an output lane ``j`` of its group) ``w[g*W + j, k % W,
    FY-1-fy, FX-1-fx]``."""
    import numpy as np

    k, _, fy, fx = w.shape
    blocks, taps, _, lanes = dst.shape
    rows = weight_rows(w, width, k == blocks * lanes and (fy * fx <= 16 or not transpose))
    if rows is not None:
        from miocore_direct.grouped_transpose import flipped_into_lanes, rows_into_lanes

        (flipped_into_lanes if transpose else rows_into_lanes)(rows, dst, not w.flags.c_contiguous)
        return
    if k == blocks * lanes and width > lanes:  # a group of several lane blocks: one copy
        parts = width // lanes  # lane blocks per group
        if transpose:  # w[g*W + j, mb*V + l] of input channel (g*W + mb*V + l), lane j
            w6 = w.reshape(k // width, width, parts, lanes, fy, fx)[..., ::-1, ::-1]
            picked = w6.transpose(0, 2, 4, 5, 1, 3)
        else:
            picked = w.reshape(blocks, lanes, width, fy, fx).transpose(0, 3, 4, 2, 1)
        np.copyto(dst.reshape(picked.shape), picked, casting="unsafe")
        return
    if k == blocks * lanes:  # one strided copy (2-3x faster than through a padded array)
        per_block = lanes // width
        w6 = w.reshape(blocks, per_block, width, width, fy, fx)
        if transpose:
            picked = w6[..., ::-1, ::-1].transpose(0, 4, 5, 2, 1, 3)
        else:
            picked = w6.transpose(0, 4, 5, 3, 1, 2)
        np.copyto(dst.reshape(blocks, fy, fx, width, per_block, width), picked, casting="unsafe")
        return
    if transpose:
        split = w.reshape(k // width, width, width, fy, fx)[:, :, :, ::-1, ::-1]
        src = split.transpose(3, 4, 1, 0, 2).reshape(taps, width, k)
    else:
        src = w.transpose(2, 3, 1, 0).reshape(taps, width, k)
    full = np.zeros((taps, width, blocks * lanes), np.float32)
    np.copyto(full[:, :, :k], src, casting="unsafe")
    np.copyto(dst, full.reshape(taps, width, blocks, lanes).transpose(2, 0, 1, 3))


def kyxc_weights(w: np.ndarray) -> np.ndarray:
    """The caller's ``(K, C, FY, FX)`` weights as a flat float32 KYXC array (a view where
    they are one)."""
    import numpy as np

    return np.ascontiguousarray(w.transpose(0, 2, 3, 1), np.float32).reshape(-1)


def weight_rows(w: np.ndarray, width: int, filled: bool) -> np.ndarray | None:
    """The caller's ``(K, W, FY, FX)`` weights as the ``(K, W*FY*FX)`` rows that
    :mod:`miocore_direct.grouped_transpose` rearranges (a view of packed float32 KCYX or KYXC
    weights of 16- or 32-wide groups filling every lane block, ``filled``), else None."""
    import numpy as np

    if not (filled and width in (16, WIDE) and w.dtype == np.float32):
        return None
    for order in ((0, 1, 2, 3), (0, 2, 3, 1)):
        view = w.transpose(order)
        if view.flags.c_contiguous:
            return view.reshape(w.shape[0], -1)
    return None


def fast_nchw(array: np.ndarray) -> bool:
    """Whether :mod:`miocore_direct.grouped_transpose` copies this caller tensor: packed
    float32 NCHW with channels in whole blocks."""
    import numpy as np

    return array.dtype == np.float32 and array.flags.c_contiguous and array.shape[1] % 16 == 0


def pad(
    array: np.ndarray,
    dst: np.ndarray,
    offsets: tuple[int, int, int],
    steps: tuple[int, int] = (1, 1),
) -> None:
    """:func:`miocore_direct.grouped_stage.pad` (channel offset 0), through
    :mod:`miocore_direct.grouped_transpose` where the caller's tensor is packed float32 (NCHW
    or NHWC) with channels in whole blocks and lies whole inside ``dst``."""
    import numpy as np

    from miocore_direct import grouped_stage as stage

    _, c, h, w = array.shape
    top, left, _ = offsets
    inside = top >= 0 and top + h <= dst.shape[1] and left >= 0 and left + w <= dst.shape[2]
    nhwc = array.transpose(0, 2, 3, 1)
    fast_nhwc = array.dtype == np.float32 and nhwc.flags.c_contiguous and c % 16 == 0
    if not (steps == (1, 1) and inside and (fast_nhwc or fast_nchw(array))):
        stage.pad(array, dst, offsets, steps)
        return
    from miocore_direct.grouped_transpose import nchw_into_padded, nhwc_into_padded

    dst[:, :top] = 0.0  # the margins; the copy below writes the rest
    dst[:, top + h :] = 0.0
    band = dst[:, top : top + h]
    band[:, :, :left] = 0.0
    band[:, :, left + w :] = 0.0
    band[:, :, left : left + w, c:] = 0.0
    if fast_nhwc:
        nhwc_into_padded(nhwc, dst, top, left)
    else:
        nchw_into_padded(array, dst, top, left)
