"""All-taps register tiles for channels-last depthwise filters of 3x3 to 8x8 (multiplier 1),
generated per (filter size, column stride, column dilation, channel count).

The filter-row kernels of :mod:`miocore_direct.depthwise_blocked` load and store each output
once per filter row; on 5x5 and 7x7 filters that reload, and the spills of their all-taps body,
held them at 0.3-0.7 of oneDNN. Here output rows whose filter rows are all in bounds are
computed in tiles of up to :data:`TILE` output pixels by one channel vector (the interior
split evenly): the channel loop is the
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
padding are one tile per side generated for that padding (each column's in-bounds taps known
at generation: no selects, each weight loaded once for every column of the tile; 384x14x14
7x7 0.141 → 0.089 ms; at column stride 2 the right side's taps depend on the width's parity,
:func:`~miocore_direct.depthwise_tile_shapes.edge_phase_for`), and where the call's geometry
does not fit one pixel at a time with a select per tap.

Images whose output rows have at most 32 columns (28x28, 14x14 and 7x7 layers) take none of
that: each output row is one tile of every column, or 2 even segments of at most 16 where it
is wider (``full_width``), each column's in-bounds taps written out, all filter rows in one
body where they are in bounds. Every input and weight of a filter row is then loaded once
for the segment, the accumulators are one per column (up to 16 independent chains) and no
column goes through an edge tile or the pixel loop: kernel alone at batch 8, 1.3-1.4x on
14x14, 1.4-2.0x on 7x7 and 1.2-1.3x on 28x28 images (session 12,
``docs/performance-cpu-depthwise.md``). Which kernel a call gets is chosen by
:mod:`miocore_direct.depthwise_tile_shapes`.
"""

from __future__ import annotations

import functools
from typing import Any

from miocore_direct.depthwise_blocked import _HEADER, load_generated
from miocore_direct.depthwise_tile_shapes import MAX_EDGE, MAX_SEGMENT, ROW_TILE, TILE, choose


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
    edge_phase: int = 0,
    full_width: int = 0,
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

    With ``edge_pad``, a call whose column padding is that value (and, at column stride 2,
    whose width gives ``edge_phase``: ``depthwise_tile_shapes.edge_phase_for``) takes the
    ``ceil(edge_pad / sw)`` columns at the left and the columns past the interior at the
    right as one tile each, every tap that is in bounds for that column written out (known
    at generation), instead of one pixel at a time with a select per tap; other calls keep
    the pixel loop.

    With ``full_width`` (and ``edge_pad``, ``out_step == 0``), a call whose width is that
    value and whose column padding is ``edge_pad`` computes each output row as tiles of all
    its columns (even segments of at most ``MAX_SEGMENT``); the kernel then holds only that
    and a pixel loop for other calls."""
    c = chans
    full = full_width if not out_step else 0
    full_out = (full_width + 2 * edge_pad - (fw - 1) * dw - 1) // sw + 1
    edge = edge_pad if 0 < edge_pad <= min(MAX_EDGE, (fw - 1) * dw) and not full else 0
    # pixels and reach of each side: left pixel j reads columns j*sw - edge + fx*dw (those
    # >= 0); right pixel j columns j*sw + fx*dw from the first right tap column hi*sw - pw,
    # those <= reach (= width - 1 - (hi*sw - pw), which is fixed by edge_phase)
    reach = (fw - 1) * dw - sw + edge_phase % sw
    counts = (-(-edge // sw), max(0, (edge - sw + edge_phase % sw) // sw + 1))
    edge = edge if max(counts) <= MAX_EDGE else 0
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
    if edge and sw == 1:  # the edge tiles' geometry holds: lo and out_w - hi are the
        # padding, and the right tile's first input column is width - (fw - 1) * dw
        lines.append(
            f"    edges = (pw == {edge}) & (lo == {edge}) & (out_w - hi == {edge})"
            f" & (width > {(fw - 1) * dw}) & (hi == width - {(fw - 1) * dw} + {edge})"
        )
    elif edge:  # the same at column stride 2: side counts, the right reach, all columns read
        # by the left pixels < width and by the right ones >= 0
        lines.append(
            f"    edges = (pw == {edge}) & (lo == {counts[0]}) & (out_w - hi == {counts[1]})"
            f" & (width - 1 - (hi * {sw} - pw) == {reach}) & (hi * {sw} >= pw)"
            f" & (width > {(counts[0] - 1) * sw + (fw - 1) * dw - edge})"
        )
    if full:
        lines.append(f"    full = (width == {full}) & (pw == {edge_pad}) & (out_w == {full_out})")
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

    def madds(
        ind: str, row: str, weights: str, fy: int | None, fx: int, pixels: list[tuple[int, int]]
    ) -> None:
        """Tap ``(fy, fx)``'s multiply-adds: its weight loaded once (``fy``: the filter row's
        literal index, or None for the runtime row whose weights start at ``weights``), then
        ``a{j} += x[col] * w`` for each (output ``j``, input column ``col``) of ``pixels``."""
        if not pixels:
            return
        tap = _u((fy * fw + fx) * c) if fy is not None else f"{weights} + {_u(fx * c)}"
        add(f"{ind}w = wf[{tap} + k]")
        for j, col in pixels:
            add(f"{ind}a{j} += xf[{row} + {_u(col * c)} + k] * w")

    def taps(ind: str, tiles: int, row: str, weights: str, fy: int | None) -> None:
        """The multiply-adds of one filter row for ``tiles`` outputs, every tap in bounds."""
        for fx in range(fw):
            madds(ind, row, weights, fy, fx, [(j, j * sw + fx * dw) for j in range(tiles)])

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
        """The in-bounds multiply-adds of one filter row for the pixels of a side: left
        pixel ``j`` reads column ``j*sw - edge + fx*dw`` (from column 0), right pixel ``j``
        column ``j*sw + fx*dw`` from the tile's first column ``hi*sw - pw`` (at stride 1
        ``width - (fw - 1)*dw``)."""
        for fx in range(fw):
            if right:
                pixels = [(j, j * sw + fx * dw) for j in range(counts[1])]
                pixels = [(j, col) for j, col in pixels if col <= reach]
            else:
                pixels = [(j, j * sw - edge + fx * dw) for j in range(counts[0])]
                pixels = [(j, col) for j, col in pixels if col >= 0]
            madds(ind, row, weights, fy, fx, pixels)

    def edge_tile(ind: str, right: bool) -> None:
        """The edge columns of one side as one tile: every filter row in one body for rows
        with all filter rows in bounds, else a filter-row loop."""
        first = f"np.uint64(hi - {edge})" if right else "np.uint64(0)"
        if right and sw > 1:
            first = f"np.uint64(hi * {sw} - {edge})"
        add(f"{ind}xb = (xrow + {first}) * {_u(c)}")
        out_base(ind, "hi" if right else "0")

        def row_taps(i: str, row: str, wts: str, fy: int | None) -> None:
            edge_taps(i, right, row, wts, fy)

        add(f"{ind}if (fy_lo == 0) & (fy_hi == {fh}):")
        every_row(ind + "    ", counts[right], row_taps)
        add(f"{ind}else:")
        each_row(ind + "    ", counts[right], row_taps)

    def sides(right: bool) -> None:
        """One side's edge columns: the edge tile where its geometry holds, else pixels."""
        ind = " " * 12
        columns = "range(hi, out_w)" if right else "range(lo)"
        if not edge:
            add(f"        for ow in {columns}:")
            pixel(ind, "ow")
            return
        if not counts[right]:  # no pixels on this side (a narrow padding at stride 2)
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

    def full_taps(ind: str, row: str, weights: str, fy: int | None, seg: range) -> None:
        """One filter row's multiply-adds for the pixels ``seg`` of a ``full``-column row:
        pixel ``j`` reads column ``j*sw - edge_pad + fx*dw`` where that is in the image."""
        for fx in range(fw):
            pixels = [(j - seg.start, j * sw - edge_pad + fx * dw) for j in seg]
            pixels = [(j, col) for j, col in pixels if 0 <= col < full]
            madds(ind, row, weights, fy, fx, pixels)

    if full:  # the whole row as one tile: no edge tiles, no pixel loop
        add("        if full:")
        segs = -(-full_out // MAX_SEGMENT)
        size = -(-full_out // segs)
        for seg in (range(j, min(full_out, j + size)) for j in range(0, full_out, size)):

            def seg_taps(i: str, row: str, wts: str, fy: int | None, seg: range = seg) -> None:
                full_taps(i, row, wts, fy, seg)

            add(f"            xb = xrow * {_u(c)}")
            out_base(" " * 12, str(seg.start))
            add(f"            if (fy_lo == 0) & (fy_hi == {fh}):")
            every_row(" " * 16, len(seg), seg_taps)
            add("            else:")
            each_row(" " * 16, len(seg), seg_taps)
        add("            continue")
        add("        for ow in range(out_w):")  # another width or padding: pixels
        pixel(" " * 12, "ow")
        return _HEADER + "\n".join(lines) + "\n"
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
    edge_phase: int = 0,
    full_width: int = 0,
) -> tuple[str, str]:
    """The name prefix and source of :func:`tile_kernel`."""
    text = source(fh, fw, sw, dw, chans, tile, out_step, edge_pad, edge_phase, full_width)
    suffix = f"_out{out_step}" if out_step else ""
    suffix += f"_t{tile}" if tile != TILE else ""
    suffix += f"_e{edge_pad}" if edge_pad else ""
    suffix += f"_r{edge_phase}" if edge_phase else ""
    suffix += f"_w{full_width}" if full_width else ""
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
    edge_phase: int = 0,
    full_width: int = 0,
) -> Any:
    """The compiled kernel of :func:`source` (numba's disk cache, see
    :func:`miocore_direct.depthwise_blocked.load_generated`)."""
    spec = tile_spec(fh, fw, sw, dw, chans, out_step, tile, edge_pad, edge_phase, full_width)
    return load_generated(*spec)


def run(x: Any, wt: Any, y: Any, sh: int, ph: int, dh: int, pw: int, sw: int, dw: int) -> None:
    """Run the tile kernel on packed channels-last ``x`` and ``y`` and staged ``wt``."""
    for array in (x, wt, y):
        if not array.flags.c_contiguous:  # flat indexing needs packed arrays
            raise ValueError("tile kernel arrays must be C-contiguous")
    fh, fw, chans = wt.shape
    kwargs = choose(fw, sw, dw, pw, x.shape[2], y.shape[2])
    kernel = tile_kernel(fh, fw, sw, dw, chans, **kwargs)
    kernel(x, wt, y, x.reshape(-1), wt.reshape(-1), y.reshape(-1), sh, ph, dh, pw)
