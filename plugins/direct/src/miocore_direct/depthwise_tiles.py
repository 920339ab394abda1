"""All-taps register tiles for channels-last depthwise filters of 5x5 to 8x8 (multiplier 1),
generated per (filter size, column stride, column dilation, channel count).

The filter-row kernels of :mod:`miocore_direct.depthwise_blocked` load and store each output
once per filter row; on 5x5 and 7x7 filters that reload, and the spills of their all-taps body,
held them at 0.3-0.7 of oneDNN. Here output rows whose filter rows are all in bounds are
computed in tiles of :data:`TILE` output pixels by one channel vector: the channel loop is the
tile's only loop and its body holds all ``FH * FW * TILE`` multiply-adds, so the tile's
outputs stay in registers over every tap and are stored once; inputs and weights are loaded
as the taps need them. Three things make LLVM keep that body in registers:

- the channel count is a literal of the generated source and the arrays are indexed flat, so
  every input of a filter row is the row's base register plus a constant displacement (with a
  runtime channel stride each of the tile's ``FH * (TILE + FW - 1)`` addresses was hoisted out
  of the channel loop, spilled, and reloaded for every multiply-add);
- indices are unsigned (numba wraps a possibly negative signed index with a select);
- the last tile of a row overlaps the one before instead of leaving a remainder.

Rows reaching into the vertical padding take a filter-row loop over their in-bounds rows on
the same flat indices. The ``ceil(pw / sw)`` columns at each side reaching into the horizontal
padding are, at column stride 1, one tile per side generated for that padding (each column's
in-bounds taps known at generation: no selects, each weight loaded once for every column of
the tile; 384x14x14 7x7 0.141 → 0.089 ms), and otherwise one pixel at a time with a select
per tap.
"""

from __future__ import annotations

import functools
from typing import Any

from miocore_direct.depthwise_blocked import _HEADER, MAX_STEP, MAX_WIDTH, load_generated

#: Most output pixels per all-taps tile (rows with every filter row in bounds).
TILE = 8
#: Output pixels per tile of the filter-row loop (rows reaching into the vertical padding).
ROW_TILE = 8
#: Filters of more taps than this take these kernels (3x3 keeps the blocked kernel's body).
MIN_TAPS = 10
#: Most edge columns per side taken as one tile (their accumulators live in registers).
MAX_EDGE = 8


def applies(mult: int, filter_hw: tuple[int, int], stride_w: int, dilation_w: int) -> bool:
    """Whether a tile kernel exists for this geometry (5x5 to 8x8-sized filters)."""
    fh, fw = filter_hw
    return (
        mult == 1
        and fw <= MAX_WIDTH
        and fh <= MAX_WIDTH
        and fh * fw >= MIN_TAPS
        and stride_w <= MAX_STEP
        and dilation_w <= MAX_STEP
    )


def tile_for(width: int, out_w: int, fw: int, sw: int, dw: int, pw: int) -> int:
    """Output pixels per all-taps tile: the interior columns (those whose taps are all in
    bounds) split into the fewest tiles of at most :data:`TILE` pixels, as even as they go.

    The last tile of a row overlaps the one before, so a fixed 8-pixel tile computed 16
    columns for the 10 interior ones of a 14x14 5x5 layer; 2 tiles of 5 compute 10 (batch 8,
    kernel alone: 672x14x14 0.744 → 0.613 ms). At stride 2 this replaces a fixed 4-pixel
    tile (a 7-column output's 5 interior columns: one tile of 5, 0.359 → 0.269 ms at
    672x14x14 5x5/2; the 26 of a 56x56 5x5/2 layer: 4 tiles of 7, as fast as 7 of 4 within
    the noise). Fewer than 2 interior columns keep the pixel loop (a 1-pixel tile measured
    no better)."""
    lo = min(out_w, max(0, -((-pw) // sw)))
    hi = max(lo, min(out_w, (width - 1 - (fw - 1) * dw + pw) // sw + 1))
    if hi - lo < 2:
        return TILE
    tiles = -(-(hi - lo) // TILE)
    return -(-(hi - lo) // tiles)


def edge_pad_for(fw: int, sw: int, dw: int, pw: int) -> int:
    """The ``edge_pad`` a kernel for column padding ``pw`` is generated with (0: the edge
    columns stay a pixel loop): column stride 1 and at most :data:`MAX_EDGE` columns."""
    return pw if sw == 1 and 0 < pw <= min(MAX_EDGE, (fw - 1) * dw) else 0


def _u(value: int) -> str:
    """An unsigned literal."""
    return f"np.uint64({value})"


def source(
    fh: int,
    fw: int,
    sw: int,
    dw: int,
    chans: int,
    tile: int = TILE,
    out_step: int = 0,
    edge_pad: int = 0,
) -> str:
    """The kernel module for an ``fh x fw`` filter, column stride ``sw``, column dilation
    ``dw`` and ``chans`` channels.

    ``kernel(x, wt, y, xf, wf, yf, sh, ph, dh, pw)``: ``y[n, oh, ow, k] = sum x[n, oh*sh - ph +
    fy*dh, ow*sw - pw + fx*dw, k] * wt[fy, fx, k]`` over in-bounds taps; x, y packed
    channels-last, wt ``(fh, fw, chans)``, and ``xf``, ``wf``, ``yf`` the same arrays flat.

    With ``out_step > 0`` the output is a strided grid of a larger packed array (one phase
    of a strided backward data, :mod:`miocore_direct.depthwise_phases`): ``kernel(x, wt, y,
    xf, wf, yf, sh, ph, dh, pw, out_h, out_w, yoff, yimg, ypitch)`` writes output ``(n, oh,
    ow)`` to pixel ``yoff + n*yimg + oh*ypitch + ow*out_step`` of ``yf``.

    With ``edge_pad`` (column stride 1 only), a call whose column padding is that value takes
    the ``edge_pad`` columns at each side as one tile each, every tap that is in bounds for
    that column written out (known at generation), instead of one pixel at a time with a
    select per tap; other paddings keep the pixel loop."""
    c = chans
    edge = edge_pad if sw == 1 and 0 < edge_pad <= min(MAX_EDGE, (fw - 1) * dw) else 0
    step = max(1, out_step)
    if out_step:
        head = [
            "def kernel(x, wt, y, xf, wf, yf, sh, ph, dh, pw, out_h, out_w, yoff, yimg, ypitch):",
            "    n_img, height, width, _ = x.shape",
        ]
    else:
        head = [
            "def kernel(x, wt, y, xf, wf, yf, sh, ph, dh, pw):",
            "    n_img, height, width, _ = x.shape",
            "    _, out_h, out_w, _ = y.shape",
        ]
    lines = [
        *head,
        f"    lo = min(out_w, max(0, -((-pw) // {sw})))",
        f"    hi = max(lo, min(out_w, (width - 1 - {(fw - 1) * dw} + pw) // {sw} + 1))",
        f"    pitch = np.uint64(dh) * np.uint64(width * {c})",
    ]
    if edge:  # the edge tiles' geometry holds: lo and out_w - hi are the padding, and the
        # right tile's first input column is width - (fw - 1) * dw
        lines.append(
            f"    edges = (pw == {edge}) & (lo == {edge}) & (out_w - hi == {edge})"
            f" & (width > {(fw - 1) * dw}) & (hi == width - {(fw - 1) * dw} + {edge})"
        )
    lines += [
        "    for row in prange(n_img * out_h):",
        "        n = row // out_h",
        "        oh = row % out_h",
        "        ih0 = oh * sh - ph",
        "        fy_lo = max(0, -(ih0 // dh))",
        f"        fy_hi = min({fh}, (height - 1 - ih0) // dh + 1) if ih0 < height else 0",
    ]
    if out_step:  # every row's output base first: the empty rows store through it too
        lines += [
            "        yrow = np.uint64(yoff + n * yimg + oh * ypitch)",
            "        if fy_lo >= fy_hi:",
            "            for ow in range(out_w):",
            f"                yb = (yrow + np.uint64(ow) * {_u(step)}) * {_u(c)}",
            f"                for k in range({_u(c)}):",
            "                    yf[yb + k] = ZERO",
            "            continue",
            "        xrow = np.uint64((n * height + ih0 + fy_lo * dh) * width)",
        ]
    else:
        lines += [
            "        if fy_lo >= fy_hi:",
            "            for ow in range(out_w):",
            f"                for k in range({c}):",
            "                    y[n, oh, ow, k] = ZERO",
            "            continue",
            "        xrow = np.uint64((n * height + ih0 + fy_lo * dh) * width)",
            "        yrow = np.uint64((n * out_h + oh) * out_w)",
        ]
    add = lines.append

    def out_base(ind: str, ow: str) -> None:
        if out_step:
            add(f"{ind}yb = (yrow + np.uint64({ow}) * {_u(step)}) * {_u(c)}")
        else:
            add(f"{ind}yb = (yrow + np.uint64({ow})) * {_u(c)}")

    def bases(ind: str, ow: str) -> None:
        add(f"{ind}xb = (xrow + np.uint64({ow} * {sw} - pw)) * {_u(c)}")
        out_base(ind, ow)

    def taps(ind: str, tiles: int, row: str, weights: str, fy: int | None) -> None:
        """The multiply-adds of one filter row (``fy``: its literal index, or None for the
        runtime row whose weights start at ``weights``)."""
        for fx in range(fw):
            tap = _u((fy * fw + fx) * c) if fy is not None else f"{weights} + {_u(fx * c)}"
            add(f"{ind}w = wf[{tap} + k]")
            for j in range(tiles):
                add(f"{ind}a{j} += xf[{row} + {_u((j * sw + fx * dw) * c)} + k] * w")

    def every_row(ind: str, count: int, row_taps: Any) -> None:
        """``count`` outputs from every filter row in one body (all rows in bounds);
        ``row_taps(ind, row, weights, fy)`` writes one filter row's multiply-adds."""
        for fy in range(fh):
            add(f"{ind}r{fy} = xb + {_u(fy)} * pitch")
        add(f"{ind}for k in range({_u(c)}):")
        add(f"{ind}    " + " = ".join(f"a{j}" for j in range(count)) + " = ZERO")
        for fy in range(fh):
            row_taps(ind + "    ", f"r{fy}", "", fy)
        for j in range(count):
            add(f"{ind}    yf[yb + {_u(j * step * c)} + k] = a{j}")

    def each_row(ind: str, count: int, row_taps: Any) -> None:
        """``count`` outputs by a loop over the in-bounds filter rows, the sums kept in the
        output between rows (rows in the vertical padding)."""
        add(f"{ind}wb = np.uint64(fy_lo * {fw * c})")
        add(f"{ind}for k in range({_u(c)}):")
        add(f"{ind}    " + " = ".join(f"a{j}" for j in range(count)) + " = ZERO")
        row_taps(ind + "    ", "xb", "wb", None)
        for j in range(count):
            add(f"{ind}    yf[yb + {_u(j * step * c)} + k] = a{j}")
        add(f"{ind}for fy in range(fy_lo + 1, fy_hi):")
        add(f"{ind}    xb += pitch")
        add(f"{ind}    wb += {_u(fw * c)}")
        add(f"{ind}    for k in range({_u(c)}):")
        for j in range(count):
            add(f"{ind}        a{j} = yf[yb + {_u(j * step * c)} + k]")
        row_taps(ind + "        ", "xb", "wb", None)
        for j in range(count):
            add(f"{ind}        yf[yb + {_u(j * step * c)} + k] = a{j}")

    def all_taps(ind: str, ow: str, tiles: int) -> None:
        """Every tap in one body: rows whose filter rows are all in bounds."""
        bases(ind, ow)
        every_row(ind, tiles, lambda i, row, wts, fy: taps(i, tiles, row, wts, fy))

    def row_loop(ind: str, ow: str, tiles: int) -> None:
        """A filter-row loop over the in-bounds rows (rows in the vertical padding)."""
        bases(ind, ow)
        each_row(ind, tiles, lambda i, row, wts, fy: taps(i, tiles, row, wts, fy))

    def pixel(ind: str, ow: str) -> None:
        """One output pixel, a select per tap (columns in the horizontal padding)."""
        add(f"{ind}c0 = {ow} * {sw} - pw")
        for fx in range(fw):  # & (not `and`): see depthwise_blocked
            add(f"{ind}u{fx} = (c0 + {fx * dw} >= 0) & (c0 + {fx * dw} < width)")
            add(f"{ind}q{fx} = np.uint64(min(max(c0 + {fx * dw}, 0), width - 1) * {c})")
        add(f"{ind}xb = xrow * {_u(c)}")
        add(f"{ind}wb = np.uint64(fy_lo * {fw * c})")
        out_base(ind, ow)
        add(f"{ind}for k in range({_u(c)}):")
        add(f"{ind}    yf[yb + k] = ZERO")
        add(f"{ind}for fy in range(fy_lo, fy_hi):")
        add(f"{ind}    for k in range({_u(c)}):")
        add(f"{ind}        a0 = yf[yb + k]")
        for fx in range(fw):
            value = f"(xf[xb + q{fx} + k] if u{fx} else ZERO)"
            add(f"{ind}        a0 += {value} * wf[wb + {_u(fx * c)} + k]")
        add(f"{ind}        yf[yb + k] = a0")
        add(f"{ind}    xb += pitch")
        add(f"{ind}    wb += {_u(fw * c)}")

    def edge_taps(ind: str, right: bool, row: str, weights: str, fy: int | None) -> None:
        """The in-bounds multiply-adds of one filter row for the ``edge`` pixels of a side:
        left pixel ``j`` reads column ``j - edge + fx*dw`` (from column 0), right pixel ``j``
        column ``j + fx*dw`` from the tile's first column ``width - (fw - 1)*dw``."""
        for fx in range(fw):
            if right:
                pixels = [(j, j + fx * dw) for j in range(edge) if j + fx * dw < (fw - 1) * dw]
            else:
                pixels = [(j, j - edge + fx * dw) for j in range(edge) if j + fx * dw >= edge]
            if not pixels:
                continue
            tap = _u((fy * fw + fx) * c) if fy is not None else f"{weights} + {_u(fx * c)}"
            add(f"{ind}w = wf[{tap} + k]")
            for j, col in pixels:
                add(f"{ind}a{j} += xf[{row} + {_u(col * c)} + k] * w")

    def edge_tile(ind: str, right: bool) -> None:
        """The ``edge`` columns of one side as one tile: every filter row in one body for
        rows with all filter rows in bounds, else a filter-row loop."""
        first = f"np.uint64(hi - {edge})" if right else "np.uint64(0)"
        add(f"{ind}xb = (xrow + {first}) * {_u(c)}")
        out_base(ind, "hi" if right else "0")

        def row_taps(i: str, row: str, wts: str, fy: int | None) -> None:
            edge_taps(i, right, row, wts, fy)

        add(f"{ind}if (fy_lo == 0) & (fy_hi == {fh}):")
        every_row(ind + "    ", edge, row_taps)
        add(f"{ind}else:")
        each_row(ind + "    ", edge, row_taps)

    def sides(right: bool) -> None:
        """One side's edge columns: the edge tile where its geometry holds, else pixels."""
        ind = " " * 12
        columns = "range(hi, out_w)" if right else "range(lo)"
        if not edge:
            add(f"        for ow in {columns}:")
            pixel(ind, "ow")
            return
        add("        if edges:")
        edge_tile(ind, right)
        add("        else:")
        add(f"            for ow in {columns}:")
        pixel(ind + "    ", "ow")

    def sweep(ind: str, body: Any, size: int) -> None:
        """Tiles over the interior columns ``[lo, hi)``; the last tile ends at ``hi`` and
        overlaps the one before (outputs are written, not accumulated, so that is exact)."""
        add(f"{ind}if hi - lo >= {size}:")
        add(f"{ind}    ow = lo")
        add(f"{ind}    while ow < hi:")
        add(f"{ind}        ow = min(ow, hi - {size})")
        body(ind + "        ", "ow", size)
        add(f"{ind}        ow += {size}")
        add(f"{ind}else:")
        add(f"{ind}    for ow in range(lo, hi):")
        pixel(ind + "        ", "ow")

    sides(right=False)
    add(f"        if (fy_lo == 0) & (fy_hi == {fh}):")
    sweep(" " * 12, all_taps, tile)
    add("        else:")
    sweep(" " * 12, row_loop, min(ROW_TILE, tile))
    sides(right=True)
    return _HEADER + "\n".join(lines) + "\n"


def tile_spec(
    fh: int,
    fw: int,
    sw: int,
    dw: int,
    chans: int,
    out_step: int = 0,
    tile: int = TILE,
    edge_pad: int = 0,
) -> tuple[str, str]:
    """The name prefix and source of :func:`tile_kernel`."""
    text = source(fh, fw, sw, dw, chans, tile=tile, out_step=out_step, edge_pad=edge_pad)
    suffix = f"_out{out_step}" if out_step else ""
    suffix += f"_t{tile}" if tile != TILE else ""
    suffix += f"_e{edge_pad}" if edge_pad else ""
    return f"miocore_dw_tiles_{fh}x{fw}_{sw}_{dw}_{chans}{suffix}", text


@functools.cache
def tile_kernel(
    fh: int,
    fw: int,
    sw: int,
    dw: int,
    chans: int,
    out_step: int = 0,
    tile: int = TILE,
    edge_pad: int = 0,
) -> Any:
    """The compiled kernel of :func:`source` (numba's disk cache, see
    :func:`miocore_direct.depthwise_blocked.load_generated`)."""
    return load_generated(*tile_spec(fh, fw, sw, dw, chans, out_step, tile, edge_pad))


def run(x: Any, wt: Any, y: Any, sh: int, ph: int, dh: int, pw: int, sw: int, dw: int) -> None:
    """Run the tile kernel on packed channels-last ``x`` and ``y`` and staged ``wt``."""
    for array in (x, wt, y):
        if not array.flags.c_contiguous:  # flat indexing needs packed arrays
            raise ValueError("tile kernel arrays must be C-contiguous")
    fh, fw, chans = wt.shape
    tile = tile_for(x.shape[2], y.shape[2], fw, sw, dw, pw)
    kernel = tile_kernel(fh, fw, sw, dw, chans, tile=tile, edge_pad=edge_pad_for(fw, sw, dw, pw))
    kernel(x, wt, y, x.reshape(-1), wt.reshape(-1), y.reshape(-1), sh, ph, dh, pw)
