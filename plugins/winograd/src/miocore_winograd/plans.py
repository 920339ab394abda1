"""The Winograd engine, part one: plans (shapes, sub-problems, chunks, workspace layout).

How a problem becomes runs of ``F(m x m, r x r)`` (filter splitting, stride phases, backward
data and weights) is told in ``engine.py``, which executes the plans made here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from miocore import ConvProblem, Direction

if TYPE_CHECKING:  # imported where arrays are touched: declaring a solver, asking it
    # about a problem or a FindDb hit never loads numpy
    import numpy as np

#: Largest filter piece per axis: filters are split into pieces of this many taps.
R_MAX = 3
#: Buffers start on cache-line boundaries.
_ALIGN = 64
_F32 = 4


@dataclass(frozen=True)
class Term:
    """One virtual channel along one axis: where it starts reading and which taps it holds."""

    offset: int  # source row of the sub-image's row 0
    taps: tuple[int, ...]  # filter index of each of the r taps, -1 for a zero tap


@dataclass(frozen=True)
class AxisRun:
    """One axis of one Winograd run: tile ``m``, piece ``r``, sub-image step, outputs and terms."""

    m: int
    r: int
    step: int  # source rows between consecutive sub-image rows (the stride for phases)
    count: int  # outputs this run produces along the axis
    terms: tuple[Term, ...]
    out_start: int = 0  # where output 0 of the run lands in the written tensor
    out_step: int = 1

    @property
    def alpha(self) -> int:
        """Transformed tile size ``m + r - 1``."""
        return self.m + self.r - 1

    @property
    def tiles(self) -> int:
        """Tiles covering ``count`` outputs."""
        return -(-self.count // self.m)

    @property
    def src_extent(self) -> int:
        """Source rows the run reads (one past the last)."""
        if not self.terms:
            return 0
        last = self.m * self.tiles + self.r - 2
        return max(t.offset for t in self.terms) + self.step * last + 1


def _pieces(eff: Sequence[int], r: int) -> list[tuple[int, tuple[int, ...]]]:
    """Cut an effective stride-1 tap list into ``r``-tap pieces: ``(start, taps)``."""
    out = []
    for c in range(0, len(eff), r):
        taps = tuple(eff[c : c + r])
        out.append((c, taps + (-1,) * (r - len(taps))))
    return out


def forward_axis(filt: int, pad: int, stride: int, out: int, m: int) -> tuple[AxisRun, int]:
    """Forward (and backward-weights) axis: every stride phase and piece as virtual channels.

    Returns the run and the left padding of the source buffer.
    """
    phases = [list(range(ph, filt, stride)) for ph in range(stride)]
    phases = [(ph, eff) for ph, eff in enumerate(phases) if eff]
    r = min(R_MAX, max(len(eff) for _, eff in phases))
    terms = tuple(
        Term(offset=ph + stride * c, taps=taps) for ph, eff in phases for c, taps in _pieces(eff, r)
    )
    return AxisRun(m=m, r=r, step=stride, count=out, terms=terms), pad


def backward_data_axis(
    filt: int, pad: int, stride: int, size_in: int, m: int
) -> tuple[list[AxisRun], int]:
    """Backward-data axis: one run per output phase of dx (a full correlation of dy with the
    flipped phase sub-filter). Returns the runs and the left padding of the dy source buffer.

    A phase with no taps (stride > filter) is a run without terms: its dx positions are zero.
    """
    runs = []
    specs = []
    for ph in range(stride):
        eff = list(range(ph, filt, stride))
        u0 = max(0, -(-(pad - ph) // stride))
        u1 = (size_in - 1 + pad - ph) // stride
        if u1 < u0:
            continue
        specs.append((ph, eff[::-1], u0, u1 - u0 + 1))
    left = max([len(eff) - 1 for _, eff, _, _ in specs if eff] + [0])
    for ph, eff, u0, count in specs:
        out_start = stride * u0 + ph - pad
        if not eff:
            runs.append(AxisRun(m, 1, 1, count, (), out_start, stride))
            continue
        r = min(R_MAX, len(eff))
        base = left + u0 - (len(eff) - 1)
        terms = tuple(Term(offset=base + c, taps=taps) for c, taps in _pieces(eff, r))
        runs.append(AxisRun(m, r, 1, count, terms, out_start, stride))
    return runs, left


@dataclass(frozen=True)
class Run:
    """One 2-D Winograd run: a y axis and an x axis."""

    y: AxisRun
    x: AxisRun

    @property
    def virtual(self) -> int:
        """Virtual channels per real channel (pieces x phases on both axes)."""
        return len(self.y.terms) * len(self.x.terms)

    @property
    def empty(self) -> bool:
        """True for a run with no taps: its outputs are zero."""
        return self.virtual == 0


@dataclass(frozen=True)
class Chunk:
    """A rectangle of tiles: images ``n0 .. n0+nb`` and tile rows ``ty0 .. ty0+tyb``."""

    n0: int
    nb: int
    ty0: int
    tyb: int


def chunks(n: int, tiles_y: int, tiles_x: int, block: int) -> Iterator[Chunk]:
    """Split ``n x tiles_y x tiles_x`` tiles into chunks of about ``block`` tiles (whole tile
    rows; whole images once a chunk holds an image)."""
    rows = max(1, block // max(1, tiles_x))
    if rows >= tiles_y:
        nb = max(1, min(n, rows // tiles_y))
        for n0 in range(0, n, nb):
            yield Chunk(n0, min(nb, n - n0), 0, tiles_y)
    else:
        for n0 in range(n):
            for ty0 in range(0, tiles_y, rows):
                yield Chunk(n0, 1, ty0, min(rows, tiles_y - ty0))


def max_chunk_tiles(n: int, tiles_y: int, tiles_x: int, block: int) -> int:
    """Most tiles any chunk of :func:`chunks` holds."""
    return max(c.nb * c.tyb for c in chunks(n, tiles_y, tiles_x, block)) * tiles_x


@dataclass
class Layout:
    """Named float32 buffers inside the workspace, each aligned to 64 bytes."""

    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)
    total: int = 0

    def add(self, name: str, elements: int) -> None:
        """Reserve ``elements`` float32 values under ``name`` (keeps the larger of two asks)."""
        nbytes = elements * _F32
        if name in self.offsets:
            start, old = self.offsets[name]
            if nbytes <= old:
                return
            raise AssertionError(f"buffer {name} grew after layout")  # plans add max sizes
        start = -(-self.total // _ALIGN) * _ALIGN
        self.offsets[name] = (start, nbytes)
        self.total = start + nbytes

    def view(self, workspace: np.ndarray, name: str, shape: Sequence[int]) -> np.ndarray:
        """A float32 view of buffer ``name`` with ``shape`` (at most its reserved size)."""
        import numpy as np

        start, nbytes = self.offsets[name]
        count = math.prod(shape)
        assert count * _F32 <= nbytes, (name, shape, nbytes)
        return workspace[start : start + count * _F32].view(np.float32).reshape(shape)


@dataclass
class Plan:
    """Everything the invoker needs for one problem and perf config, fixed at solution time."""

    direction: Direction
    n: int
    groups: int
    cg: int  # input channels per group
    kg: int  # output channels per group
    filt: tuple[int, int]
    runs: list[Run]
    src_shape: tuple[int, ...]  # padded NHWC source (x, or dy for backward data)
    src_pad: tuple[int, int]
    block: int
    layout: Layout
    dy_shape: tuple[int, ...] = ()  # backward weights: zero-padded dy tiles
    channel_major: bool = False  # NCHW-native path (see ``engine._run_channel_major``)
    flops_gemm: float = 0.0
    flops_transform: float = 0.0  # tile transforms
    flops_filter: float = 0.0  # filter transform (backward weights: the final A^T stage)
    tile_bytes: float = 0.0  # float32 tiles in the transformed domain (inputs and products)
    filter_copy_bytes: float = 0.0  # filter taps copied into the pieces buffer (transposing)
    bytes_moved: float = 0.0


def make_plan(problem: ConvProblem, tile: int, block: int) -> Plan:
    """Plan ``problem`` (canonical, 2-D, dilation 1) with output tile ``tile`` per axis."""
    p = problem
    (hi, wi), (ho, wo), (fy, fx) = p.in_spatial, p.out_spatial, p.filter_spatial
    (py, px), (sy, sx) = p.conv.pads, p.conv.strides
    g = p.groups
    cg, kg = p.c // g, p.k // g
    layout = Layout()
    if p.direction is Direction.BACKWARD_DATA:
        yruns, ly = backward_data_axis(fy, py, sy, hi, tile)
        xruns, lx = backward_data_axis(fx, px, sx, wi, tile)
        runs = [Run(a, b) for a in yruns for b in xruns]
        c_in, c_out = kg, cg
        src_rows = max([ly + ho] + [r.src_extent for r in yruns])
        src_cols = max([lx + wo] + [r.src_extent for r in xruns])
        pads = (ly, lx)
    else:
        ay, pad_y = forward_axis(fy, py, sy, ho, tile)
        ax, pad_x = forward_axis(fx, px, sx, wo, tile)
        runs = [Run(ay, ax)]
        c_in, c_out = cg, kg
        src_rows, src_cols = ay.src_extent, ax.src_extent
        pads = (pad_y, pad_x)
    # The channel-major path reads and writes NCHW rows; for NHWC tensors the channel-last
    # path is faster on large images (its gathers and scatters copy runs of channels), the
    # channel-major one still on small ones (fused filter transform).
    channel_major = (
        p.direction is not Direction.BACKWARD_WEIGHTS
        and g == 1
        and all(r.virtual <= 1 for r in runs)
        and all(r.y.step == 1 and r.x.step == 1 for r in runs)
        and (
            p.x.layout == "NCHW"
            or max(p.n * r.y.tiles * r.x.tiles for r in runs) <= FUSED_MAX_TILES
        )
    )
    if channel_major:
        src_shape: tuple[int, ...] = (p.n, c_in, src_rows, src_cols)
    else:
        src_shape = (p.n, src_rows, src_cols, g, c_in)
    layout.add("src", math.prod(src_shape))
    plan = Plan(
        direction=p.direction,
        n=p.n,
        groups=g,
        cg=cg,
        kg=kg,
        filt=(fy, fx),
        runs=runs,
        src_shape=src_shape,
        src_pad=pads,
        block=block,
        layout=layout,
        channel_major=channel_major,
    )
    live = [r for r in runs if not r.empty]
    if p.direction is Direction.BACKWARD_WEIGHTS:
        run = runs[0]
        dy_shape = (p.n, run.y.tiles * run.y.m, run.x.tiles * run.x.m, g, kg)
        plan.dy_shape = dy_shape
        layout.add("dy", math.prod(dy_shape))
    sizes: dict[str, int] = {}
    for run in live:
        a2 = run.y.alpha * run.x.alpha
        m2 = run.y.m * run.x.m
        r2 = run.y.r * run.x.r
        vc = run.virtual * c_in
        pc = max_chunk_tiles(p.n, run.y.tiles, run.x.tiles, block)
        ptot = p.n * run.y.tiles * run.x.tiles
        need = {
            "a": a2 * g * pc * max(vc, c_out),
            "b": a2 * g * pc * max(vc, c_out),
        }
        if p.direction is Direction.BACKWARD_WEIGHTS:
            need.update(
                dyt=m2 * g * pc * c_out,
                vdy=a2 * g * pc * c_out,
                macc=a2 * g * vc * c_out,
                mtmp=a2 * g * vc * c_out if ptot > pc else 0,
                taps=r2 * g * vc * c_out,
            )
            plan.flops_transform += 2 * ptot * g * (a2 * a2 * vc + a2 * m2 * c_out)
            plan.flops_filter += 2 * r2 * a2 * g * vc * c_out
        elif channel_major:
            todo = list(chunks(p.n, run.y.tiles, run.x.tiles, block))
            kb = fused_block(c_out, vc, todo, run.x.tiles)
            cols = max(pc, min(max(vc, c_out) * pc, TRANSFORM_COLUMNS))  # >= any block
            need.update(pieces=r2 * vc * c_out, u=a2 * vc * kb, t=a2 * cols, t2=m2 * cols)
        else:
            need.update(pieces=r2 * g * vc * c_out, u=a2 * g * vc * c_out)
        if p.direction is not Direction.BACKWARD_WEIGHTS:
            plan.flops_transform += 2 * ptot * g * (a2 * a2 * vc + m2 * a2 * c_out)
            plan.flops_filter += 2 * a2 * r2 * g * vc * c_out
        if p.direction is Direction.BACKWARD_DATA:  # flipped, channel-transposed filter copy
            plan.filter_copy_bytes += _F32 * r2 * g * vc * c_out
        plan.flops_gemm += 2 * a2 * ptot * g * vc * c_out
        plan.tile_bytes += _F32 * ptot * g * a2 * (vc + c_out)
        # gather writes + transform reads/writes + GEMM output + output scatter, in float32
        plan.bytes_moved += _F32 * ptot * g * (4 * a2 * vc + 3 * a2 * c_out + 2 * m2 * c_out)
        for name, value in need.items():
            sizes[name] = max(sizes.get(name, 0), value)
    for name, value in sizes.items():
        if value:
            layout.add(name, value)
    plan.bytes_moved += _F32 * 2 * math.prod(src_shape)
    return plan


#: Filter columns (output channels x input channels) transformed per GEMM when the whole
#: problem is one chunk (see ``engine._run_channel_major``).
FUSED_COLUMNS = 8192
#: Most tiles of a fused chunk.
FUSED_MAX_TILES = 128
#: Columns (channels x tiles) per input/output transform GEMM: its input and output blocks
#: stay in L2 while the chunk (and its batched GEMM) can be larger.
TRANSFORM_COLUMNS = 8192


def fused_block(kout: int, cin: int, todo: list[Chunk], tiles_x: int) -> int:
    """Output channels per fused filter-transform block (``kout``: not fused).

    Fused only for one chunk of few tiles: there the batched GEMM is bound by reading ``U``;
    with many tiles the GEMM of a thin block of output channels runs slower than it saves.
    """
    if len(todo) != 1 or todo[0].nb * todo[0].tyb * tiles_x > FUSED_MAX_TILES:
        return kout
    return max(1, min(kout, FUSED_COLUMNS // cin))
