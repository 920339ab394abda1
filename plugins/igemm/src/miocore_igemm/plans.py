"""Implicit GEMM on the CPU, part one: a problem's geometry and the workspace plans.

:class:`Geometry` is the GEMM view of a problem (groups, channels, taps, the padded grid);
a :class:`Plan` lists every scratch buffer one strategy carves from the caller's workspace,
so the workspace size is exactly what the invoker uses. ``engine.py`` runs the plans (the
strategies are described there).
"""

from __future__ import annotations

import itertools
import math

from miocore import ConvProblem, DataType, Direction
from miocore.values import frozen

TAP = "tap"
BLOCK = "block"
STRATEGIES = (TAP, BLOCK)
#: Every workspace buffer starts on a 64-byte boundary (a cache line) relative to the base.
ALIGN = 64


def round_up(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


@frozen(kw_only=True)
class Geometry:
    """Everything the kernels need to know about a canonical problem, in plain integers."""

    direction: Direction
    channels_last: bool
    dtype: DataType
    n: int
    c: int
    k: int
    g: int
    in_sp: tuple[int, ...]
    out_sp: tuple[int, ...]
    filt: tuple[int, ...]
    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dils: tuple[int, ...]
    #: x / y / w packed in the layout of x (the path's layout), so that views may alias them.
    x_packed: bool
    y_packed: bool
    w_packed: bool
    #: w packed and in the path's memory order (needed to use it as a block GEMM operand).
    w_native: bool

    @classmethod
    def of(cls, p: ConvProblem) -> Geometry:
        """Geometry of a canonical problem; the path (NHWC or NCHW) follows x's layout."""
        layout = p.x.layout
        return cls(
            direction=p.direction,
            channels_last=layout in ("NHWC", "NDHWC"),
            dtype=p.dtype,
            n=p.n,
            c=p.c,
            k=p.k,
            g=p.groups,
            in_sp=tuple(p.in_spatial),
            out_sp=tuple(p.out_spatial),
            filt=tuple(p.filter_spatial),
            pads=tuple(p.conv.pads),
            strides=tuple(p.conv.strides),
            dils=tuple(p.conv.dilations),
            x_packed=p.x.is_packed,
            y_packed=p.y.is_packed and p.y.layout == layout,
            w_packed=p.w.is_packed,
            w_native=p.w.is_packed and p.w.layout == layout,
        )

    # -- derived sizes -----------------------------------------------------------------------

    @property
    def cg(self) -> int:
        """Input channels per group."""
        return self.c // self.g

    @property
    def kg(self) -> int:
        """Output channels per group."""
        return self.k // self.g

    @property
    def taps(self) -> int:
        """Filter taps (``Y * X`` or ``Z * Y * X``)."""
        return math.prod(self.filt)

    @property
    def padded(self) -> tuple[int, ...]:
        """Spatial sizes of the zero-padded input."""
        return tuple(s + 2 * q for s, q in zip(self.in_sp, self.pads, strict=True))

    @property
    def grid(self) -> int:
        """Pixels of one padded image: the tap strategy's GEMM rows per image."""
        return math.prod(self.padded)

    @property
    def out_pix(self) -> int:
        """Output pixels of one image."""
        return math.prod(self.out_sp)

    @property
    def offsets(self) -> tuple[int, ...]:
        """Grid offset of each tap, in the order of w's flattened filter dimensions."""
        steps = [math.prod(self.padded[i + 1 :]) for i in range(len(self.padded))]
        return tuple(
            sum(t * d * st for t, d, st in zip(tap, self.dils, steps, strict=True))
            for tap in itertools.product(*(range(f) for f in self.filt))
        )

    @property
    def max_offset(self) -> int:
        """Offset of the last tap: the slack the grid needs past its last image."""
        return self.offsets[-1]

    @property
    def fp32(self) -> bool:
        """Float32 data may be used by BLAS in place; other types are staged as float32."""
        return self.dtype is DataType.FLOAT32

    @property
    def unpadded(self) -> bool:
        """No padding in any dimension."""
        return not any(self.pads)

    @property
    def unit_strides(self) -> bool:
        """All strides 1: the tap strategy's requirement."""
        return all(s == 1 for s in self.strides)

    @property
    def depthwise(self) -> bool:
        """One input and one output channel per group."""
        return self.g > 1 and self.cg == 1 and self.kg == 1


# ---------------------------------------------------------------------------------------------
# Plans: which scratch buffers a configuration needs (and which it can alias to the caller's).


@frozen(kw_only=True)
class Plan:
    """Strategy, blocking and the float32 buffers it carves from the workspace, in order."""

    strategy: str
    block: int
    buffers: tuple[tuple[str, tuple[int, ...]], ...]

    @property
    def workspace_size(self) -> int:
        """Bytes of workspace: every buffer rounded up to :data:`ALIGN`."""
        return sum(round_up(4 * math.prod(shape)) for _, shape in self.buffers)

    def has(self, name: str) -> bool:
        """Whether the plan stages ``name`` (otherwise it aliases the caller's array)."""
        return any(n == name for n, _ in self.buffers)


def tap_aliases(geo: Geometry, images: int) -> dict[str, bool]:
    """Which tap-strategy operands can be the caller's arrays themselves (no copy).

    The grid of an unpadded 1x1 problem is the tensor itself, when it is float32, packed and
    (NHWC) has one group, or (NCHW) one image per chunk.
    """
    layout_ok = geo.g == 1 if geo.channels_last else images == 1
    same_grid = geo.fp32 and geo.unpadded and geo.max_offset == 0 and layout_ok
    return {
        "x": same_grid and geo.x_packed,
        "y": same_grid and geo.y_packed and geo.out_pix == geo.grid,
        "w": geo.fp32 and geo.taps == 1 and geo.w_packed,
    }


def tap_plan(geo: Geometry, images: int) -> Plan:
    """Buffers of the tap strategy with ``images`` images per chunk."""
    nbp = images * geo.grid
    slack = geo.max_offset
    alias = tap_aliases(geo, images)
    g, cg, kg = geo.g, geo.cg, geo.kg
    if geo.channels_last:
        in_grid = (g, nbp + slack, cg)
        out_grid = (g, nbp, kg)
    else:
        in_grid = (g * cg * nbp + slack,)
        out_grid = (g, kg, nbp)
    bufs: list[tuple[str, tuple[int, ...]]] = []
    d = geo.direction
    if not alias["w"]:
        bufs.append(("w", (g, geo.taps, kg, cg)))
    if d is Direction.FORWARD:
        if not alias["x"]:
            bufs.append(("x", in_grid))
        if not alias["y"]:
            bufs.append(("y", out_grid))
    elif d is Direction.BACKWARD_DATA:
        if not alias["y"]:
            bufs.append(("y", out_grid))
        if not alias["x"]:
            bufs.append(("x", in_grid))
    else:
        if not alias["x"]:
            bufs.append(("x", in_grid))
        if not alias["y"]:
            bufs.append(("y", out_grid))
    return Plan(strategy=TAP, block=images, buffers=tuple(bufs))


def pixel_blocks(geo: Geometry, target: int) -> tuple[list[tuple[int, int, int, int]], int]:
    """Blocks ``(n0, n1, r0, r1)`` of about ``target`` output pixels and the largest size.

    A block is whole images ``n0:n1`` when one image has at most ``target`` pixels, else rows
    ``r0:r1`` of the outermost output dimension of one image.
    """
    img = geo.out_pix
    rows = geo.out_sp[0]
    if img <= target:
        nb = max(1, min(geo.n, target // img))
        blocks = [(n0, min(n0 + nb, geo.n), 0, rows) for n0 in range(0, geo.n, nb)]
        return blocks, nb * img
    row = img // rows
    r = max(1, min(rows, target // row))
    blocks = [(n, n + 1, r0, min(r0 + r, rows)) for n in range(geo.n) for r0 in range(0, rows, r)]
    return blocks, r * row


def block_aliases(geo: Geometry, target: int) -> dict[str, bool]:
    """Which block-strategy operands can be the caller's arrays themselves.

    The output block is y itself when float32 and packed, and (NHWC) one group, or (NCHW)
    every block is exactly one image. Weights are used in place when float32 and packed in
    the path's memory order. An unpadded backward-data scatter goes straight into dx.
    """
    blocks, _ = pixel_blocks(geo, target)
    whole_single = all(
        n1 - n0 == 1 and r0 == 0 and r1 == geo.out_sp[0] for n0, n1, r0, r1 in blocks
    )
    layout_ok = geo.g == 1 if geo.channels_last else whole_single
    return {
        "y": geo.fp32 and geo.y_packed and layout_ok,
        "w": geo.fp32 and geo.w_native,
        "dx": geo.fp32 and geo.unpadded,
    }


def block_plan(geo: Geometry, target: int) -> Plan:
    """Buffers of the block strategy with column blocks of about ``target`` output pixels."""
    _, bmax = pixel_blocks(geo, target)
    alias = block_aliases(geo, target)
    g, cg, kg, t = geo.g, geo.cg, geo.kg, geo.taps
    layout = (geo.n, *geo.padded, geo.c) if geo.channels_last else (geo.n, geo.c, *geo.padded)
    bufs: list[tuple[str, tuple[int, ...]]] = []
    if not alias["w"]:
        bufs.append(("w", (g, kg, t * cg)))
    d = geo.direction
    if d is Direction.FORWARD:
        if not geo.unpadded:
            bufs.append(("xp", layout))
        bufs.append(("col", (g * bmax * t * cg,)))
        if not alias["y"]:
            bufs.append(("out", (g * bmax * kg,)))
    elif d is Direction.BACKWARD_DATA:
        if not alias["y"]:
            bufs.append(("dy", (g * bmax * kg,)))
        bufs.append(("col", (g * bmax * t * cg,)))
        if not alias["dx"]:
            bufs.append(("xp", layout))
    else:
        if not geo.unpadded:
            bufs.append(("xp", layout))
        bufs.append(("col", (g * bmax * t * cg,)))
        if not alias["y"]:
            bufs.append(("dy", (g * bmax * kg,)))
        if not alias["w"]:
            bufs.append(("dw", (g, kg, t * cg)))
        if g > 1:
            bufs.append(("tmp", (g, kg, t * cg)))
    return Plan(strategy=BLOCK, block=target, buffers=tuple(bufs))


def make_plan(geo: Geometry, strategy: str, block: int) -> Plan:
    """The plan of one performance configuration."""
    return tap_plan(geo, block) if strategy == TAP else block_plan(geo, block)
