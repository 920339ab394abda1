"""``direct.naive``: the universal last resort, as MIOpen's naive convolution kernels are.

It solves every consistent problem (every direction, 2-D and 3-D, groups, dilation, any stride
and padding, any layout and strides, every dtype) with no workspace. It walks groups, blocks of
images and slabs of the output's outermost spatial dimension, and inside a block walks the
filter taps: for each tap it works out, with explicit index arithmetic, which outputs read an
in-bounds input (``u = o * stride - pad + tap * dilation``), and contracts that strided input
region with the tap's weights over the group's channels. Padding is never materialised, so no
padded copy is needed; the transient float32 blocks it allocates are bounded by
:data:`BLOCK_ELEMENTS` (times a small constant), whatever the problem size.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from miocore import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvalidArgumentError,
    InvokeParams,
    PerfConfig,
    Solver,
    not_applicable,
)

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Float32 elements of one transient block (4 MiB): the bound on the solver's scratch memory.
BLOCK_ELEMENTS = 1 << 20

# Measured on the 2-core development machine (see README): the per-tap matmuls reach about a
# tenth of the BLAS ceiling once the float32 gathers are paid for, and every (group, block,
# tap) step costs some 25 us of Python and numpy call overhead.
_EFFICIENCY = 0.1
_STEP_MS = 0.025


def _valid_range(lo: int, hi: int, limit: int, shift: int, stride: int) -> tuple[int, int]:
    """Indices ``o`` in ``[lo, hi)`` whose source ``o * stride + shift`` lies in ``[0, limit)``."""
    first = max(lo, -(shift // stride))  # ceil(-shift / stride)
    last = min(hi, (limit - 1 - shift) // stride + 1)
    return first, last


def _scatter_range(lo: int, hi: int, count: int, shift: int, stride: int) -> tuple[int, int]:
    """Indices ``o`` in ``[0, count)`` whose target ``o * stride + shift`` lies in ``[lo, hi)``."""
    first = max(0, -((shift - lo) // stride))  # ceil((lo - shift) / stride)
    last = min(count, (hi - 1 - shift) // stride + 1)
    return first, last


Ranges = tuple[tuple[int, int], ...]


class _Blocks:
    """How the naive solver splits a problem so that no transient exceeds the block bound.

    A block is groups [g0, g1), images [n0, n1) and a box of the written tensor's spatial
    positions: single indices of the dimensions before ``axis``, ``rows`` indices of ``axis``
    and everything after it, where ``axis`` is the outermost dimension whose rows fit the
    bound. Groups and images are batched only once whole images fit.
    """

    def __init__(self, p: ConvProblem) -> None:
        self.n, self.g = p.n, p.groups
        self.cg, self.kg = p.c // p.groups, p.k // p.groups
        self.ins, self.outs = p.in_spatial, p.out_spatial
        self.filt = p.filter_spatial
        self.pads, self.strides, self.dils = p.conv.pads, p.conv.strides, p.conv.dilations
        self.written = self.ins if p.direction is Direction.BACKWARD_DATA else self.outs
        # The read tensor's matching region is at most as large per dimension as the larger
        # of the two extents, so that bounds every transient of a block.
        extents = [max(i, o) for i, o in zip(self.ins, self.outs, strict=True)]
        unit = max(self.cg, self.kg)
        rank = len(extents)
        self.axis = next(
            (i for i in range(rank) if unit * math.prod(extents[i + 1 :]) <= BLOCK_ELEMENTS),
            rank - 1,
        )
        row = unit * math.prod(extents[self.axis + 1 :])
        self.rows = max(1, min(self.written[self.axis], BLOCK_ELEMENTS // row))
        self.group_block, self.batch = 1, 1
        if self.axis == 0 and self.rows == self.written[0]:
            image = row * self.written[0]
            self.group_block = max(1, min(self.g, BLOCK_ELEMENTS // image))
            if self.group_block == self.g:
                self.batch = max(1, min(self.n, BLOCK_ELEMENTS // (image * self.g)))
        self.largest = self.batch * self.group_block * self.rows * row

    def steps(self) -> int:
        """How many (block, tap) steps a run takes (for the cost model)."""
        return (
            math.ceil(self.g / self.group_block)
            * math.ceil(self.n / self.batch)
            * math.prod(self.written[: self.axis])
            * math.ceil(self.written[self.axis] / self.rows)
            * math.prod(self.filt)
        )

    def boxes(self, extent: Sequence[int]) -> Iterator[Ranges]:
        """The spatial boxes of a tensor with ``extent`` (the written one, or y for dw)."""
        axis = self.axis
        ranges = [
            [(i, i + 1) for i in range(e)]
            if d < axis
            else [(r, min(e, r + self.rows)) for r in range(0, e, self.rows)]
            if d == axis
            else [(0, e)]
            for d, e in enumerate(extent)
        ]
        yield from itertools.product(*ranges)

    def tiles(self) -> Iterator[tuple[slice, slice, Ranges]]:
        """(groups, images, spatial box) of every block of the written tensor."""
        for g0, n0, box in itertools.product(
            range(0, self.g, self.group_block),
            range(0, self.n, self.batch),
            self.boxes(self.written),
        ):
            yield (
                slice(g0, min(self.g, g0 + self.group_block)),
                slice(n0, min(self.n, n0 + self.batch)),
                box,
            )


def _f32(a: np.ndarray) -> np.ndarray:
    import numpy as np

    return a.astype(np.float32, copy=False)


def _tap_weights(wr: np.ndarray, gs: slice, tap: Sequence[int]) -> np.ndarray:
    """(groups, K/g, C/g) float32 weights of one tap."""
    return _f32(wr[(gs, slice(None), slice(None), *tap)])


def _box(box: Ranges) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in box)


def _gather_tap(
    b: _Blocks, tap: Sequence[int], box: Ranges
) -> tuple[list[slice], list[slice]] | None:
    """For outputs in ``box``: the input slices one tap reads, and where they land in the box.

    Output ``o`` reads input ``u = o * stride - pad + tap * dilation``; only in-bounds ``u``.
    """
    src, dst = [], []
    for i, (t, (lo, hi)) in enumerate(zip(tap, box, strict=True)):
        shift, s = t * b.dils[i] - b.pads[i], b.strides[i]
        first, last = _valid_range(lo, hi, b.ins[i], shift, s)
        if first >= last:
            return None
        u0 = first * s + shift
        src.append(slice(u0, u0 + (last - first - 1) * s + 1, s))
        dst.append(slice(first - lo, last - lo))
    return src, dst


def _scatter_tap(
    b: _Blocks, tap: Sequence[int], box: Ranges
) -> tuple[list[slice], list[slice]] | None:
    """For inputs in ``box``: the outputs one tap scatters from, and where they land."""
    src, dst = [], []
    for i, (t, (lo, hi)) in enumerate(zip(tap, box, strict=True)):
        shift, s = t * b.dils[i] - b.pads[i], b.strides[i]
        first, last = _scatter_range(lo, hi, b.outs[i], shift, s)
        if first >= last:
            return None
        u0 = first * s + shift - lo
        src.append(slice(first, last))
        dst.append(slice(u0, u0 + (last - first - 1) * s + 1, s))
    return src, dst


def _taps(b: _Blocks) -> itertools.product[tuple[int, ...]]:
    return itertools.product(*(range(f) for f in b.filt))


def _forward(b: _Blocks, x: np.ndarray, w: np.ndarray, y: np.ndarray) -> None:
    import numpy as np

    xr = x.reshape(b.n, b.g, b.cg, *b.ins)  # splitting the channel axis is always a view
    wr = w.reshape(b.g, b.kg, b.cg, *b.filt)
    yr = y.reshape(b.n, b.g, b.kg, *b.outs)
    lead = (slice(None),) * 3
    for gs, ns, box in b.tiles():
        target = yr[(ns, gs, slice(None), *_box(box))]
        acc = np.zeros(target.shape, np.float32)
        nb, gb = acc.shape[:2]
        for tap in _taps(b):
            found = _gather_tap(b, tap, box)
            if found is None:
                continue
            src, dst = found
            part = _f32(xr[(ns, gs, slice(None), *src)])
            contrib = np.matmul(_tap_weights(wr, gs, tap), part.reshape(nb, gb, b.cg, -1))
            acc[(*lead, *dst)] += contrib.reshape(nb, gb, b.kg, *part.shape[3:])
        np.copyto(target, acc, casting="unsafe")


def _backward_data(b: _Blocks, w: np.ndarray, dy: np.ndarray, dx: np.ndarray) -> None:
    import numpy as np

    dxr = dx.reshape(b.n, b.g, b.cg, *b.ins)
    wr = w.reshape(b.g, b.kg, b.cg, *b.filt)
    dyr = dy.reshape(b.n, b.g, b.kg, *b.outs)
    lead = (slice(None),) * 3
    for gs, ns, box in b.tiles():
        target = dxr[(ns, gs, slice(None), *_box(box))]
        acc = np.zeros(target.shape, np.float32)
        nb, gb = acc.shape[:2]
        for tap in _taps(b):
            found = _scatter_tap(b, tap, box)
            if found is None:
                continue
            src, dst = found
            part = _f32(dyr[(ns, gs, slice(None), *src)])
            tap_w = _tap_weights(wr, gs, tap).transpose(0, 2, 1)
            contrib = np.matmul(tap_w, part.reshape(nb, gb, b.kg, -1))
            acc[(*lead, *dst)] += contrib.reshape(nb, gb, b.cg, *part.shape[3:])
        np.copyto(target, acc, casting="unsafe")


def _backward_weights(b: _Blocks, x: np.ndarray, dy: np.ndarray, dw: np.ndarray) -> None:
    import numpy as np

    xr = x.reshape(b.n, b.g, b.cg, *b.ins)
    dwr = dw.reshape(b.g, b.kg, b.cg, *b.filt)
    dyr = dy.reshape(b.n, b.g, b.kg, *b.outs)
    for g0 in range(0, b.g, b.group_block):
        gs = slice(g0, min(b.g, g0 + b.group_block))
        for tap in _taps(b):
            acc = np.zeros((gs.stop - g0, b.kg, b.cg), np.float32)
            for n0, box in itertools.product(range(0, b.n, b.batch), b.boxes(b.outs)):
                found = _gather_tap(b, tap, box)
                if found is None:
                    continue
                src, dst = found
                ns = slice(n0, min(b.n, n0 + b.batch))
                dst = [
                    slice(d.start + lo, d.stop + lo) for d, (lo, _) in zip(dst, box, strict=True)
                ]
                part_x = _f32(xr[(ns, gs, slice(None), *src)])
                part_dy = _f32(dyr[(ns, gs, slice(None), *dst)])
                nb, gb = part_x.shape[:2]
                flat_x = part_x.reshape(nb, gb, b.cg, -1).transpose(0, 1, 3, 2)
                acc += np.matmul(part_dy.reshape(nb, gb, b.kg, -1), flat_x).sum(axis=0)
            np.copyto(dwr[(gs, slice(None), slice(None), *tap)], acc, casting="unsafe")


class _NaiveInvoker:
    """Runs the naive convolution of one problem on the caller's arrays."""

    def __init__(self, problem: ConvProblem) -> None:
        self.problem = problem
        self.blocks = _Blocks(problem)

    def __call__(self, handle: Any, params: InvokeParams) -> None:
        d = self.problem.direction
        if d is Direction.FORWARD:
            _forward(self.blocks, params.x, params.w, params.y)
        elif d is Direction.BACKWARD_DATA:
            _backward_data(self.blocks, params.w, params.y, params.x)
        else:
            _backward_weights(self.blocks, params.x, params.y, params.w)


class NaiveDirectSolver(Solver):
    """Direct convolution by filter taps with explicit index arithmetic; applies everywhere.

    No workspace; transient float32 blocks bounded by :data:`BLOCK_ELEMENTS` elements (a few
    MiB). Slow: its ``wti`` says so, so that it is only picked when nothing else applies.
    """

    name = "direct.naive"
    numerical_notes = frozenset()
    algorithm = Algorithm.DIRECT
    is_dynamic = True

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Applicability:
        """Every canonical problem on the CPU."""
        if ctx.backend not in self.backends:
            return not_applicable(f"direct.naive runs on the CPU only, not on {ctx.backend!r}")
        if problem.is_transposed:
            return not_applicable("expects the canonical (mode='conv') form of the problem")
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        """Zero: the naive solver never needs a workspace."""
        return 0

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        """A solution whose invoker runs the naive loops on the caller's arrays."""
        if perf_config:
            raise InvalidArgumentError(
                "direct.naive is not tunable and takes no perf config",
                field="perf_config",
                value=dict(perf_config),
            )
        invoker = _NaiveInvoker(problem)
        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=lambda _k: invoker)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        """Roofline at a tenth of BLAS rate, with the input re-read per tap, plus loop overhead."""
        taps = math.prod(problem.filter_spatial)
        nbytes = problem.bytes_moved + taps * 4 * (
            problem.x.element_count + problem.y.element_count
        )
        ms = ctx.roofline_ms(problem.flops, nbytes, problem.dtype, _EFFICIENCY)
        return ctx.wti(problem, ms + _STEP_MS * _Blocks(problem).steps())
