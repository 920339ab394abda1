"""The stride phases of a backward-data pass of ``direct.grouped``'s vector path
(:class:`Phase`: the dx pixels ``(r + a*sh, c + b*sw)`` of one ``(r, c)``, from that phase's
taps only), and a self-staging kernel for groups of 16 channels that runs every phase of one
image and one group in one task, from a block of dy staged once
(:func:`miocore_direct.grouped_fused.stage`) into a block of dx written back once
(:func:`miocore_direct.grouped_fused.unstage`).

One kernel call per phase reads the whole staged dy and writes every ``s``-th pixel of dx
each time; with NCHW tensors dy and dx were also transposed by passes of their own (512x28x28
stride 2, batch 8: 2.7 ms against oneDNN's 2.1). A phase of two column taps one apart runs
the sliding-window tile (:mod:`miocore_direct.grouped_slide`), one of one column tap a tile
of broadcasts, both over rows of at least :data:`TILE` pixels (the last tile overlapping);
narrower rows and other phases go one pixel at a time.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING, Any, NamedTuple

from miocore_direct.grouped_fused import SLACK, stage_source_header
from miocore_direct.grouped_slide import LANES, TILE, slide_taps
from miocore_direct.grouped_wide import pass_shape

if TYPE_CHECKING:
    import numpy as np

    from miocore_direct.grouped_vector import VectorPlan

#: Integers per phase in the kernel's table: taps (rows, columns), tap steps, output counts,
#: the block position of its first read, its weights' offset and its first dx pixel.
FIELDS = 11


def _tile(add: Any, taps: int, ind: str) -> None:
    """Emit one tile of ``taps`` column taps one pixel apart at ``ow`` of output row ``a``."""
    block = LANES * LANES
    for p in range(TILE):
        add(f"{ind}a{p} = zero()")
    add(f"{ind}for fy in range(nrt):")
    add(f"{ind}    rb = ((brow + a + fy * rstep) * wp + bcol + ow) * {LANES}")
    add(f"{ind}    wr = woff + (kb * nrt * nct + fy * nct) * {block}")
    for line in slide_taps(ind + "    ", taps, 1, 1, TILE, lambda q: f"buf, xb + {q * LANES}"):
        add(line)
    for p in range(TILE):
        add(f"{ind}store(buf, yr + (ow + {p}) * sw * {LANES}, a{p})")


#: Output pixels of a tile of :func:`phases_source` at group widths under 16 (as
#: :mod:`miocore_direct.grouped_simd`'s forward tiles there).
LANE_TILE = 7


def _lane_tile(add: Any, width: int, ind: str, tile: int) -> None:
    """Emit one tile (``tile`` pixels at ``ow`` of output row ``a``; one pixel: ``ow``
    itself) of a phase for groups of ``width < 16`` channels: for each tap and input channel
    ``i``, the lanes of each group get channel ``i`` of their group's input by one load and a
    shuffle (:func:`miocore_direct.simd.ops` ``fma_lane``)."""
    for p in range(tile):
        add(f"{ind}a{p} = zero()")
    add(f"{ind}for fy in range(nrt):")
    add(f"{ind}    for fx in range(nct):")
    add(f"{ind}        rb = ((brow + a + fy * rstep) * wp + bcol + ow + fx * cstep) * {LANES}")
    add(f"{ind}        wb = woff + (kb * nrt * nct + fy * nct + fx) * {width * LANES}")
    for i in range(width):
        add(f"{ind}        wv = load(wa, wb + {i * LANES})")
        for p in range(tile):
            add(f"{ind}        a{p} = lane{i}(a{p}, buf, rb + {p * LANES}, wv)")
    for p in range(tile):
        add(f"{ind}store(buf, yr + (ow + {p}) * sw * {LANES}, a{p})")


def _lane_phases(add: Any, width: int) -> None:
    """The phases of one output row of :func:`phases_source` for groups of ``width < 16``:
    tiles of :data:`LANE_TILE` pixels (the last overlapping the one before), narrower rows one
    pixel at a time."""
    add(f"                elif ccount >= {LANE_TILE}:")
    add("                    ow = 0")
    add("                    while ow < ccount:")
    add(f"                        ow = min(ow, ccount - {LANE_TILE})")
    _lane_tile(add, width, " " * 24, LANE_TILE)
    add(f"                        ow += {LANE_TILE}")
    add("                else:")
    add("                    for ow in range(ccount):")
    _lane_tile(add, width, " " * 24, 1)


def phases_source(width: int = LANES) -> str:
    """``kernel(src, wa, dst, dims, table, bufs, nchw)``: dx (``dst``) of dy (``src``), both
    the caller's flat packed float32 tensors (NCHW where ``nchw``, else NHWC), ``dims = (n,
    oh, ow, k, h, w, c, sh, sw, hp, wp, top, left)`` (dy placed at ``(top, left)`` in blocks
    of ``hp x wp`` pixels), ``table`` the phases' rows of :data:`FIELDS` integers, ``wa``
    their weights one after another (:func:`phase_table`), ``bufs`` a float32 ``(threads, >=
    hp*wp*16 + h*w*16 + 2*SLACK)`` scratch array. Groups of ``width`` channels: 16 (one a
    16-channel block), or 8 (two a block; each group's input channels reach its lanes by
    shuffles)."""
    lines = [
        "def kernel(src, wa, dst, dims, table, bufs, nchw):",
        "    n_img, oh, ow_n, kout, h, w, chans, sh, sw, hp, wp, top, left = dims",
        f"    blocks = chans // {LANES}",
        f"    ob = hp * wp * {LANES} + {SLACK}",
        "    z = zero()",
        "    for task in prange(n_img * blocks):",
        "        n = task // blocks",
        "        kb = task % blocks",
        f"        k0 = kb * {LANES}",
        "        buf = bufs[numba.get_thread_id()]",
        "        stage(src, buf, 0, n, k0, (oh, ow_n, kout), (hp, wp, top, left), nchw)",
        "        for j in range(table.shape[0]):",
        "            nrt, nct, rstep, cstep, rcount, ccount, brow, bcol, woff, r, c = table[j]",
        "            for a in range(rcount):",
        f"                yr = ob + ((r + a * sh) * w + c) * {LANES}",
        "                if nrt * nct == 0:  # no tap reaches these pixels",
        "                    for b in range(ccount):",
        f"                        store(buf, yr + b * sw * {LANES}, z)",
    ]
    add = lines.append
    if width < LANES:
        _lane_phases(add, width)
        add("        unstage(buf, ob, dst, n, k0, h * w, chans, nchw)")
        lanes = "\n".join(f"lane{i} = _OPS.fma_lane({width}, {i})" for i in range(width))
        header = stage_source_header().replace("\n\n\n@numba", f"\n{lanes}\n\n\n@numba", 1)
        return header + "\n".join(lines) + "\n"
    lines += [
        f"                elif ccount >= {TILE} and (nct == 1 or (nct == 2 and cstep == 1)):",
        "                    ow = 0",
        "                    while ow < ccount:",
        f"                        ow = min(ow, ccount - {TILE})",
        "                        if nct == 2:",
    ]
    _tile(add, 2, "                            ")
    add("                        else:")
    _tile(add, 1, "                            ")
    add(f"                        ow += {TILE}")
    add("                else:")
    ind = " " * 32  # one pixel at a time
    add("                    for ow in range(ccount):")
    add("                        a0 = zero()")
    add("                        for fy in range(nrt):")
    add("                            for fx in range(nct):")
    add(ind + "rb = (brow + a + fy * rstep) * wp + bcol + ow + fx * cstep")
    add(ind + f"wb = woff + (kb * nrt * nct + fy * nct + fx) * {LANES * LANES}")
    add(ind + f"for i in range({LANES}):")
    add(ind + f"    wv = load(wa, wb + i * {LANES})")
    add(ind + f"    a0 = fma(splat(buf, rb * {LANES} + i), wv, a0)")
    add(f"                        store(buf, yr + ow * sw * {LANES}, a0)")
    add("        unstage(buf, ob, dst, n, k0, h * w, chans, nchw)")
    return stage_source_header() + "\n".join(lines) + "\n"


def phase_table(phases: list[Phase], pitch: int, wp: int, w: int, kout: int) -> np.ndarray:
    """The kernel's table of a backward-data plan's phases (``pitch``, ``wp``: the staged
    input's of the plan; ``w``: dx columns; ``kout``: channels)."""
    import numpy as np

    rows = []
    for ph in phases:
        _, _, _, _, rcount, ccount, _, nrt, nct, _, _, rstep, cstep = ph.dims
        brow, bcol = divmod(ph.place[0] // pitch, wp)
        r, c = divmod(ph.place[1] // kout, w)
        rows.append((nrt, nct, rstep, cstep, rcount, ccount, brow, bcol, ph.weights, r, c))
    return np.array(rows, np.int64).reshape(-1, FIELDS)


def phases_spec(width: int = LANES) -> tuple[str, str]:
    """The name prefix and source of :func:`phases_kernel`."""
    if width == LANES:
        return "miocore_gv_phases", phases_source()
    return f"miocore_gv_phases_{width}", phases_source(width)


@functools.cache
def phases_kernel(width: int = LANES) -> Any:
    """The compiled self-staging strided backward-data kernel of a group width."""
    from miocore_direct.depthwise_blocked import load_generated

    return load_generated(*phases_spec(width))


class Phase(NamedTuple):
    """One pass of a backward-data plan: the output pixels ``(r + a*sh, c + b*sw)``, from the
    taps ``rows x cols`` (filter indices, in the order the kernel reads them), at flat weight
    offset ``weights`` of the phase weights."""

    rows: tuple[int, ...]
    cols: tuple[int, ...]
    weights: int
    dims: tuple[int, ...]
    place: tuple[int, int, int, int, int]
    shape: tuple[int, int, int] | None  # of its sliding-window kernel, None for the plain one


def _phase(
    size: int, filt: int, stride: int, pad: int, dil: int, r: int
) -> tuple[tuple[int, ...], int, int, int]:
    """Along one axis, dx positions ``r + a*stride`` (``a < count``) gather ``dy[a + c0 +
    t*step] * w[taps[t]]``: the answer ``(taps, c0, step, count)``. A tap ``f`` reaches
    ``r`` when ``(r + pad - f*dil) / stride`` is a whole dy offset; taps in falling order of
    ``f`` have offsets rising by one ``step``."""
    taps = tuple(f for f in range(filt - 1, -1, -1) if (r + pad - f * dil) % stride == 0)
    count = -(-(size - r) // stride)
    if not taps:
        return taps, 0, 1, count
    first = (r + pad - taps[0] * dil) // stride
    step = (r + pad - taps[1] * dil) // stride - first if len(taps) > 1 else 1
    return taps, first, step, count


def _margins(phases: list[tuple[tuple[int, ...], int, int, int]], out: int) -> tuple[int, int]:
    """The dy margin before the first row (column) and the padded extent that every phase's
    reads fit in."""
    reads = [(c0, c0 + (count - 1) + (len(taps) - 1) * step) for taps, c0, step, count in phases]
    before = max([0] + [-lo for lo, _ in reads])
    return before, before + max([out] + [hi + 1 for _, hi in reads])


def _phases(
    plan: VectorPlan,
    axes: tuple[list[tuple[tuple[int, ...], int, int, int]], ...],
    margins: tuple[int, int],
    w: int,
    strides: tuple[int, int],
) -> list[Phase]:
    """Every (row, column) phase of a backward-data plan of ``w`` columns (``plan.dims`` and
    ``place`` already those of a stride-1 pass: the kernel's own strides are 1)."""
    n, hp, wp, pitch, _, _, kout = plan.dims[:7]
    (top, left), (row_phases, col_phases), (stride_h, stride_w) = margins, axes, strides
    phases, weights = [], 0
    for r, (rtaps, r0, rstep, rcount) in enumerate(row_phases):
        for c, (ctaps, c0, cstep, ccount) in enumerate(col_phases):
            dims = (n, hp, wp, pitch, rcount, ccount, kout, len(rtaps), len(ctaps), 1, 1)
            dims += (rstep, cstep)
            x0 = ((top + r0) * wp + left + c0) * pitch
            place = (x0, (r * w + c) * kout, plan.place[2], stride_h * w * kout, stride_w * kout)
            shape = pass_shape(plan.width, len(ctaps), 1, cstep, ccount)
            phases.append(Phase(rtaps, ctaps, weights, dims, place, shape))
            weights += len(rtaps) * len(ctaps) * plan.width * kout
    return phases


def _progression(taps: list[int]) -> slice | list[int]:
    """Rising filter indices as a slice where they are evenly spaced (a phase's always are:
    basic indexing copies the phase weights without temporaries, 0.06 ms faster per stride-2
    backward-data call of 512 channels), else the list."""
    if len(taps) < 2:
        return slice(taps[0], taps[0] + 1) if taps else slice(0, 0)
    step = taps[1] - taps[0]
    if step > 0 and all(b - a == step for a, b in itertools.pairwise(taps)):
        return slice(taps[0], taps[-1] + 1, step)
    return taps
