"""Register tiles for channels-last depthwise backward weights (multiplier 1), generated per
(filter width, column stride, column dilation, channel count).

``dw[fy, fx, k] = sum over n, oh, ow of dy[n, oh, ow, k] * x[n, oh*sh - ph + fy*dh,
ow*sw - pw + fx*dw, k]``. The generic kernel (``depthwise_kernels.backward_weights_nhwc``)
walks taps, then pixels, then channels, loading and storing a tap's accumulator row for every
pixel: three loads and a store per multiply-add, 12-16 GFLOP/s on one thread, a quarter of
oneDNN on 3x3 layers. Here the channel loop is the innermost and only loop of a tile of
:data:`TILE` output columns of one filter row: its body loads the filter row's ``FW``
accumulators once, the tile's ``TILE`` gradients once, the ``(TILE - 1) * SW + (FW - 1) * DW
+ 1`` inputs once, does every multiply-add of the tile and stores the accumulators once
(3x3 at stride 1: 21 loads, 3 stores, 24 multiply-adds a channel vector). As in
:mod:`miocore_direct.depthwise_tiles`, the channel count is a literal of the source and the
indices are flat and unsigned, so each operand is a base register plus a constant offset and
LLVM vectorises the channel loop. Columns outside the tiles (the padding's reach, the
remainder) take a per-pixel loop with the bounds checked.

The rows are split into parts (threads) whose partial sums the caller adds, as for the
generic kernel; each part's sum is in a fixed order, so results do not depend on the thread
count.
"""

from __future__ import annotations

import functools
from typing import Any

from miocore_direct.depthwise_blocked import _HEADER, load_generated
from miocore_direct.depthwise_tile_shapes import interior_columns
from miocore_direct.depthwise_tiles import _u

#: Output columns per tile.
TILE = 8
#: Widest filter, largest column stride and dilation the kernels are generated for.
MAX_WIDTH = 7
MAX_STEP = 2


def applies(mult: int, filter_width: int, stride_w: int, dilation_w: int) -> bool:
    """Whether a generated kernel exists for this geometry."""
    return (
        mult == 1 and filter_width <= MAX_WIDTH and stride_w <= MAX_STEP and dilation_w <= MAX_STEP
    )


def source(
    fw: int, sw: int, dw: int, chans: int, tile: int = TILE, rest: int = 0, edge: tuple = ()
) -> str:
    """The kernel module: ``kernel(x, dy, part_acc, xf, dyf, accf, sh, ph, dh, pw)`` with x and
    dy packed channels-last, ``part_acc`` ``(parts, fh, fw, chans)`` (``accf`` flat): part
    ``p`` gets the sum over its share of the ``n * out_h`` output rows.

    The columns whose taps are all in bounds go in tiles of ``tile``; where ``rest`` columns
    remain after them (a call's geometry, :func:`rest_for`) they are one more tile, else the
    remainder takes the per-pixel loop with the edge columns.

    With ``edge = (width, pw)`` a call of that input width and column padding computes its
    edge columns (those whose taps reach into the padding) as one body per side, each
    column's in-bounds taps written out (known here), instead of the per-pixel loop."""
    c = chans
    sides = _edge_sides(fw, sw, dw, *edge) if edge else None
    lines = [
        "def kernel(x, dy, part_acc, xf, dyf, accf, sh, ph, dh, pw):",
        "    n_img, height, width, _ = x.shape",
        "    _, out_h, out_w, _ = dy.shape",
        "    parts, fh, _, _ = part_acc.shape",
        "    rows = n_img * out_h",
        f"    lo = min(out_w, max(0, -((-pw) // {sw})))",
        f"    hi = max(lo, min(out_w, (width - 1 - {(fw - 1) * dw} + pw) // {sw} + 1))",
        f"    tiles = (hi - lo) // {tile}",
        f"    done = lo + tiles * {tile}",
    ]
    if rest:
        lines += [
            f"    last = hi - done == {rest}",
            "    if last:",
            f"        done += {rest}",
        ]
    if sides is not None:
        width, pw, out_w = edge[0], edge[1], sides[2]
        lines.append(
            f"    edges = (width == {width}) & (pw == {pw}) & (out_w == {out_w}) & (done == hi)"
        )
    else:
        lines.append("    edges = False")
    lines += [
        "    for part in prange(parts):",
        f"        pbase = np.uint64(part) * np.uint64(fh) * {_u(fw * c)}",
        f"        for i in range(np.uint64(fh) * {_u(fw * c)}):",
        "            accf[pbase + i] = ZERO",
        "        for row in range(part * rows // parts, (part + 1) * rows // parts):",
        "            n = row // out_h",
        "            oh = row % out_h",
        "            grow = np.uint64((n * out_h + oh) * out_w)",
        "            for fy in range(fh):",
        "                ih = oh * sh - ph + fy * dh",
        "                if ih < 0 or ih >= height:",
        "                    continue",
        "                xrow = np.uint64((n * height + ih) * width)",
        f"                ab = pbase + np.uint64(fy) * {_u(fw * c)}",
        "                for t in range(tiles):",
        f"                    ow0 = lo + t * {tile}",
    ]

    def body(ind: str, width: int) -> None:
        """Every multiply-add of ``width`` columns from ``ow0`` (a variable of the source)."""
        span = (width - 1) * sw + (fw - 1) * dw + 1  # input columns the tile reads
        lines.append(f"{ind}xb = (xrow + np.uint64(ow0 * {sw} - pw)) * {_u(c)}")
        lines.append(f"{ind}gb = (grow + np.uint64(ow0)) * {_u(c)}")
        lines.append(f"{ind}for k in range({_u(c)}):")
        inner = ind + "    "
        for q in range(width):
            lines.append(f"{inner}g{q} = dyf[gb + {_u(q * c)} + k]")
        for col in range(span):
            lines.append(f"{inner}x{col} = xf[xb + {_u(col * c)} + k]")
        for fx in range(fw):
            terms = " + ".join(f"g{q} * x{q * sw + fx * dw}" for q in range(width))
            lines.append(f"{inner}accf[ab + {_u(fx * c)} + k] += {terms}")

    body(" " * 20, tile)
    if rest:
        lines += ["                if last:", f"                    ow0 = lo + tiles * {tile}"]
        body(" " * 20, rest)
    if sides is not None:
        lines.append("                if edges:")
        for cols in sides[:2]:
            if cols:
                _edge_body(lines, " " * 20, cols, fw, sw, dw, c, edge[1])
        lines.append("                    continue")
    # Columns outside the tiles: each pixel's in-bounds taps, bounds checked.
    lines += [
        "                for ow in range(out_w):",
        "                    if ow >= lo and ow < done:",
        "                        continue",
        f"                    gb = (grow + np.uint64(ow)) * {_u(c)}",
        f"                    for fx in range({fw}):",
        f"                        iw = ow * {sw} - pw + fx * {dw}",
        "                        if iw < 0 or iw >= width:",
        "                            continue",
        f"                        xb = (xrow + np.uint64(iw)) * {_u(c)}",
        f"                        tb = ab + np.uint64(fx) * {_u(c)}",
        f"                        for k in range({_u(c)}):",
        "                            accf[tb + k] += dyf[gb + k] * xf[xb + k]",
    ]
    return _HEADER.replace("depthwise_blocked", "depthwise_wrw_tiles") + "\n".join(lines) + "\n"


def _edge_sides(fw: int, sw: int, dw: int, width: int, pw: int) -> tuple | None:
    """(left, right, out_w) of a call of this width and column padding: each side's columns
    as ``(ow, in-bounds taps)``; None where some edge tap would read past the other side of
    the image (a width too small for the filter) or a side is wider than a tile."""
    out_w = (width + 2 * pw - (fw - 1) * dw - 1) // sw + 1
    lo, hi = interior_columns(width, out_w, fw, sw, dw, pw)
    if out_w <= 0 or lo > TILE or out_w - hi > TILE:
        return None
    left, right = [], []
    for ow in [*range(lo), *range(hi, out_w)]:
        taps = [fx for fx in range(fw) if 0 <= ow * sw - pw + fx * dw < width]
        (left if ow < lo else right).append((ow, taps))
    return left, right, out_w


def _edge_body(
    lines: list[str], ind: str, cols: list, fw: int, sw: int, dw: int, c: int, pw: int
) -> None:
    """One side's edge columns in one channel loop: every in-bounds multiply-add, each
    accumulator loaded and stored once."""
    lines.append(f"{ind}for k in range({_u(c)}):")
    inner = ind + "    "
    for ow, _ in cols:
        lines.append(f"{inner}e{ow} = dyf[(grow + {_u(ow)}) * {_u(c)} + k]")
    for fx in range(fw):
        terms = [
            f"e{ow} * xf[(xrow + {_u(ow * sw - pw + fx * dw)}) * {_u(c)} + k]"
            for ow, taps in cols
            if fx in taps
        ]
        if terms:
            lines.append(f"{inner}accf[ab + {_u(fx * c)} + k] += {' + '.join(terms)}")


def rest_for(fw: int, sw: int, dw: int, pw: int, width: int, out_w: int) -> int:
    """The columns left after the full tiles of a call's in-bounds columns (0: none)."""
    lo, hi = interior_columns(width, out_w, fw, sw, dw, pw)
    return (hi - lo) % TILE


def wrw_spec(
    fw: int, sw: int, dw: int, chans: int, width: int, pw: int, out_w: int
) -> tuple[str, str]:
    """The name prefix and source of the kernel a call of this geometry runs."""
    rest = rest_for(fw, sw, dw, pw, width, out_w)
    edge = (width, pw) if _edge_sides(fw, sw, dw, width, pw) is not None else ()
    name = f"dw_wrw_tiles_f{fw}_s{sw}_d{dw}_c{chans}_r{rest}_w{width}_p{pw}"
    return name, source(fw, sw, dw, chans, rest=rest, edge=edge)


@functools.cache
def wrw_kernel(fw: int, sw: int, dw: int, chans: int, width: int, pw: int, out_w: int) -> Any:
    """The compiled kernel of :func:`wrw_spec` (numba's disk cache across processes)."""
    return load_generated(*wrw_spec(fw, sw, dw, chans, width, pw, out_w))


def run(
    x: Any, dy: Any, partial: Any, sh: int, ph: int, dh: int, pw: int, sw: int, dw: int
) -> None:
    """``partial[part, fy, fx, k]``: part ``part``'s share of the weight gradient (the caller
    sums the parts), from packed channels-last ``x`` and ``dy``."""
    for array in (x, dy, partial):
        if not array.flags.c_contiguous:  # flat indexing needs packed arrays
            raise ValueError("wrw tile kernel arrays must be C-contiguous")
    _, _, fw, chans = partial.shape
    kernel = wrw_kernel(fw, sw, dw, chans, x.shape[2], pw, dy.shape[2])
    kernel(x, dy, partial, x.reshape(-1), dy.reshape(-1), partial.reshape(-1), sh, ph, dh, pw)
