"""How ``igemm.gpu_wgmma`` takes its operands: which tensors its TMA loads and paired stores
take as they lie, which are copied through packed channels-last buffers (:func:`staged`),
when backward data flips the filter into the workspace (:func:`flips_filter`), why a
problem's channels do not suit the kernel (:func:`layout_reason`), and the workspace all of
that takes (:func:`workspace`).
"""

from __future__ import annotations

import math

from miocore import ConvProblem, DataType, Direction
from miocore_igemm.gpu_wgmma_layout import (
    end_of,
    reads_as_is,
    staged_copies,
    writes_as_is,
)
from miocore_igemm.gpu_wgmma_plan import _DTYPE_OPTIONS, _cdiv, _partial_bytes, gemm_view


def staged(p: ConvProblem) -> tuple[str, ...]:
    """The tensors of ``p`` copied through the workspace as packed channels-last copies:
    the read activation where TMA cannot read it as it lies, the written one where the
    paired stores cannot write it, and forward's filter where its taps and channels do not
    make TMA boxes (backward data's filter is read as it is or flipped: any layout)."""
    read, written = ("y", "x") if p.direction is Direction.BACKWARD_DATA else ("x", "y")
    names = []
    if not reads_as_is(getattr(p, read)):
        names.append(read)
    if p.direction is Direction.FORWARD and (p.w.strides[1] != 1 or filter_reason(p)):
        names.append("w")
    if not writes_as_is(getattr(p, written)):
        names.append(written)
    return tuple(names)


def workspace(p: ConvProblem, cluster: int, split: int) -> tuple[list, int, int]:
    """The workspace of ``p``'s solution: (the staged copies, where split-K's partial sums
    start, the size). In order: the flipped filter (backward data, see :func:`flips_filter`),
    the packed copies of the tensors :func:`staged` names, the partial sums."""
    names = staged(p)
    # backward data's filter is never copied: the flip reads it as the caller gave it
    start = flip_room(p) if flips_filter(p, cluster) else 0
    written = "x" if p.direction is Direction.BACKWARD_DATA else "y"
    copies = staged_copies(p, names, written, start, _DTYPE_OPTIONS[p.dtype]) if names else []
    part_at = end_of(copies, start)
    return copies, part_at, part_at + _partial_bytes(gemm_view(p), split)


def flips_filter(p: ConvProblem, cluster: int) -> bool:
    """Whether backward data first writes the flipped, transposed filter into the workspace:
    where the filter's memory does not suit TMA boxes of 64 c x 64 k taken as it is
    (channels innermost, the taps one run, 16-byte strides) or clusters share the slice (each
    block loads a share of a K-major slice), and always in TF32 (wgmma reads TF32 operands
    K-major only)."""
    if p.direction is not Direction.BACKWARD_DATA:
        return False
    if p.dtype is DataType.FLOAT32 or cluster > 1:
        return True
    return p.w.strides[1] != 1 or filter_reason(p) is not None


def flip_room(p: ConvProblem) -> int:
    """Workspace bytes before the split-K partials: the flipped filter, 256-byte aligned."""
    return _cdiv(flipped_filter_bytes(p), 256) * 256


def flipped_filter_bytes(p: ConvProblem) -> int:
    """Workspace of backward data: w flipped and transposed to [c][taps][k]."""
    if p.direction is not Direction.BACKWARD_DATA:
        return 0
    return p.k * p.c * math.prod(p.filter_spatial) * p.dtype.itemsize


def layout_reason(p: ConvProblem) -> str | None:
    """Why ``p``'s channel counts do not suit the kernel: TMA rows of the read activation
    (16 bytes: channels a multiple of 8), the epilogue's channel pairs of the written one.
    Its memory always does: what the kernel cannot take as it lies is copied (:func:`staged`)."""
    v = gemm_view(p)
    read, written = ("dy", "dx") if v.flip else ("x", "y")
    item = p.dtype.itemsize
    if v.c * item % 16:
        return (
            f"{v.c} channels of {read}: TMA rows need 16-byte strides (a multiple of {16 // item})"
        )
    if v.k % 2:
        return f"{v.k} channels of {written}: the epilogue stores channel pairs (an even count)"
    return None


def filter_reason(p: ConvProblem) -> str | None:
    """Why a channels-innermost filter does not suit TMA boxes taken as it is (forward's
    slices, backward data's transposed ones): its taps not one run, or strides not multiples
    of 16 bytes."""
    ws = p.w.strides  # (k, c, [t,] r, s)
    step = tap_stride(p)
    run = step
    for length, stride in zip(reversed(p.filter_spatial), reversed(ws[2:]), strict=True):
        if length > 1 and stride != run:
            return "the filter's taps are not one run (a tap stride is not the next's x its length)"
        run *= length
    strides = (ws[0], step)
    if any(x * p.dtype.itemsize % 16 for x in strides):
        return f"w strides {strides}: TMA needs multiples of 16 bytes"
    return None


def tap_stride(p: ConvProblem) -> int:
    """Elements from one filter tap to the next (taps are one run in ([fz,] fy, fx) order):
    the stride of the innermost filter dimension longer than 1; a 1x1 filter's is any
    multiple of 16 bytes."""
    for length, stride in zip(reversed(p.filter_spatial), reversed(p.w.strides[2:]), strict=True):
        if length > 1:
            return stride
    return _cdiv(p.c, 8) * 8
