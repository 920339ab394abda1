"""Channels-first (or any) tensors for the channels-last wgmma kernels: the copies in and out.

``igemm.gpu_wgmma`` and ``igemm.gpu_wgmma_wrw`` read their activations by TMA boxes, which
need channels innermost and 16-byte strides. A tensor in another layout (NCHW, PyTorch's
default) is copied into a packed channels-last buffer in the workspace first
(``kernels/igemm_layout.cu``, a 64 x 64 shared-memory transpose per block), and a written
tensor in another layout is written packed into the workspace and copied out after: the
copies are part of the solution, so their cost is in the solver's measured time. A filter
that forward cannot read as it is (taps not one run, channels not innermost) is the same copy
with k as the images and the taps as the pixels.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from miocore import ConvProblem, DataType, ExecutionContext, KernelInfo
from miocore.problem.descriptors import TensorDescriptor

SOURCE = "igemm/igemm_layout.cu"
KERNEL = "igemm_layout_copy"
_GEOMETRY = struct.Struct("<5i4x4q")  # MioLayoutGeom
_ALIGN = 256  # bytes: each staged buffer starts on such a boundary
_MAX_GRID_Z = 65535  # blocks along z (the images, or a filter's k)
# What a copy costs, fitted on the 64 x 64 copies of eight NCHW backward-weights layers of
# ResNet-50 (fp16, H200, 2026-11-28: the time over the same layer's channels-last run, 13 to
# 129 MB moved): the bytes at two thirds of the memory's peak rate, and 5 µs per copy.
_COPY_RATE = 0.67
_COPY_FIXED_MS = 0.005
_TILE = 64  # channels and pixels of one block's tile


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def reads_as_is(t: TensorDescriptor) -> bool:
    """Whether the kernels' TMA can read (or their stores write) ``t`` as it lies: channels
    innermost and the other strides multiples of 16 bytes."""
    s, item = t.strides, t.dtype.itemsize
    return s[1] == 1 and not any(x * item % 16 for x in (s[0], *s[2:]))


def writes_as_is(t: TensorDescriptor) -> bool:
    """Whether the kernels' paired stores can write ``t`` as it lies: channels innermost and
    the other strides even."""
    s = t.strides
    return s[1] == 1 and not any(x % 2 for x in (s[0], *s[2:]))


def with_packed(p: ConvProblem, names: tuple[str, ...]) -> ConvProblem:
    """``p`` as the kernels see it: the tensors ``names`` replaced by packed channels-last
    copies (the same lengths); ``p`` itself when there are none."""
    if not names:
        return p
    layout = "NDHWC" if p.spatial_dims == 3 else "NHWC"
    packed = {n: TensorDescriptor(p.dtype, getattr(p, n).lengths, layout=layout) for n in names}
    return ConvProblem(
        p.direction,
        x=packed.get("x", p.x),
        w=packed.get("w", p.w),
        y=packed.get("y", p.y),
        conv=p.conv,
    )


def _planes(t: TensorDescriptor) -> tuple[int, int, int, int, tuple[int, ...]] | None:
    """``t`` as the layout kernel's (n, c, rows, w) with strides (n, c, row, w): a 3-D
    tensor's depth and rows folded into one axis where its depth stride is the rows' (None:
    it is not)."""
    if len(t.lengths) == 4:
        n, c, h, w = t.lengths
        return n, c, h, w, tuple(t.strides)
    n, c, d, h, w = t.lengths
    sn, sc, sd, sh, sw = t.strides
    if d > 1 and h > 1 and sd != h * sh:
        return None
    return n, c, d * h, w, (sn, sc, sh if h > 1 else sd, sw)


def copy_reason(t: TensorDescriptor, name: str) -> str | None:
    """Why ``t`` cannot be copied by the layout kernel (None: it can)."""
    planes = _planes(t)
    if planes is None:
        return f"{name}'s depth stride is not its rows' x its height: the layout copy folds them"
    n, c, h, w, _ = planes
    if c * t.dtype.itemsize % 4:
        return f"{name} has {c} channels: the layout copy moves 32-bit words of channels"
    if n > _MAX_GRID_Z:
        return f"{name} has {n} images (or filters): the layout copy takes at most {_MAX_GRID_Z}"
    if max(t.strides) * t.dtype.itemsize >= 1 << 62 or h * w >= 1 << 31:
        return f"{name} is beyond the layout copy's indices"
    return None


def copies_ms(ctx: ExecutionContext, p: ConvProblem, names: tuple[str, ...]) -> float:
    """What copying the tensors ``names`` of ``p`` costs at the memory's rate (each read and
    written once), for the solvers' estimates."""
    if not names:
        return 0.0
    nbytes = sum(2 * getattr(p, n).element_count * p.dtype.itemsize for n in names)
    rate_ms = ctx.roofline_ms(0.0, nbytes, DataType.FLOAT16) / _COPY_RATE
    return rate_ms + _COPY_FIXED_MS * len(names)


class Staged(NamedTuple):
    """One tensor copied through the workspace: where its packed copy lies and the copy's
    launch (``to_nhwc``: before the convolution, else after it)."""

    name: str  # "x", "w" or "y", as the canonical problem names it
    offset: int  # bytes into the workspace
    nbytes: int
    to_nhwc: bool
    kernel: KernelInfo
    geometry: bytes


def stage(t: TensorDescriptor, name: str, to_nhwc: bool, offset: int, dtype_option: str) -> Staged:
    """The copy of ``t`` (into the workspace at ``offset`` when ``to_nhwc``, out of it
    otherwise), 256-byte aligned."""
    planes = _planes(t)
    assert planes is not None, "copy_reason declines it"
    n, c, h, w, (sn, sc, sh, sw) = planes
    geometry = _GEOMETRY.pack(n, c, h * w, w, int(to_nhwc), sn, sc, sh, sw)
    kernel = KernelInfo(
        source=SOURCE,
        kernel_name=KERNEL,
        options=(dtype_option,),
        grid=(_cdiv(h * w, _TILE), _cdiv(c, _TILE), n),
        block=(32, 8),
    )
    nbytes = n * c * h * w * t.dtype.itemsize
    return Staged(name, _aligned(offset), nbytes, to_nhwc, kernel, geometry)


def staged_copies(
    p: ConvProblem, names: tuple[str, ...], written: str, start: int, dtype_option: str
) -> list[Staged]:
    """The copies of the tensors ``names`` of ``p`` through the workspace from byte ``start``
    on: the ``written`` one out of it after the convolution, the others into it before."""
    out: list[Staged] = []
    offset = start
    for name in names:
        s = stage(getattr(p, name), name, name != written, offset, dtype_option)
        out.append(s)
        offset = s.offset + s.nbytes
    return out


def end_of(staged: list[Staged], start: int) -> int:
    """The first aligned byte after ``start`` and every staged buffer."""
    return _aligned(max([start, *(s.offset + s.nbytes for s in staged)]))


def _aligned(offset: int) -> int:
    return _cdiv(offset, _ALIGN) * _ALIGN


class Copies:
    """The staged copies of one solution, launched by its invoker: ``before`` copies the
    caller's tensors into the workspace, ``after`` copies the results out; ``pointer`` says
    where the kernels read or write each tensor."""

    def __init__(self, staged: list[Staged], compiled: list[Any]) -> None:
        from miocore.backends.gpu_kernels import KernelArgs

        self._runs = [
            (s, kernel, KernelArgs([("ptr", 0), ("ptr", 0), ("bytes", s.geometry)]))
            for s, kernel in zip(staged, compiled, strict=True)
        ]
        self._names = {s.name: s.offset for s in staged}

    def pointer(self, name: str, caller_ptr: int, workspace_ptr: int) -> int:
        """The address the convolution kernels use for tensor ``name``."""
        offset = self._names.get(name)
        return caller_ptr if offset is None else workspace_ptr + offset

    def before(self, tensors: dict[str, int], workspace_ptr: int) -> None:
        """Copy the caller's tensors that need it into their packed buffers."""
        for s, kernel, args in self._runs:
            if s.to_nhwc:
                args.set_pointers(tensors[s.name], workspace_ptr + s.offset)
                kernel.launch(args)

    def after(self, tensors: dict[str, int], workspace_ptr: int) -> None:
        """Copy the packed results out into the caller's tensors."""
        for s, kernel, args in self._runs:
            if not s.to_nhwc:
                args.set_pointers(workspace_ptr + s.offset, tensors[s.name])
                kernel.launch(args)
