"""NCHW plane kernels of ``direct.depthwise`` (multiplier 1): no staging transposes.

Each channel's image is copied into a zero-padded plane (at stride 2, its four phases: even and
odd rows by even and odd columns, so a stride-2 convolution is four stride-1 ones), and the
output is computed on a grid of the plane's pitch: output ``i = oh * pitch + ow`` reads
``plane[i + fy * dh * pitch + fx * dw]``, one long loop over the whole image per pair of filter
rows, which LLVM vectorises, with no edge columns and no selects; the grid's margin columns are
computed and dropped. Backward weights lays dy on the same pitch and takes each tap as a dot
product of the two. Indices are unsigned: numba wraps a signed index that may be negative with
a select per element, which kept every earlier NCHW kernel from vectorising.

Generated and cached like the channels-last kernels
(:func:`miocore_direct.depthwise_blocked.load_generated`); this module imports no numba until
a kernel is asked for.
"""

from __future__ import annotations

import functools
from typing import Any

from miocore_direct.depthwise_blocked import _HEADER, MAX_STEP, MAX_WIDTH, load_generated

#: Filter rows the stride-1 plane kernel applies in one pass over its output grid (three or
#: four spill on 7x7 filters).
ROWS_PER_PASS = 2


def _stride1_prologue(fw: int, dw: int, taps: str, out: str, indent: str) -> list[str]:
    """The stride-1 kernels' shared geometry (sizes from ``x``, the ``taps`` array's filter
    height and the ``out`` array's output size) and their copy of image ``n`` of channel
    ``k`` into the zero-filled ``plane`` at ``indent``."""
    return [
        "    n_img, chans, height, width = x.shape",
        f"    fy_n = {taps}.shape[1]",
        f"    _, _, out_h, out_w = {out}.shape",
        f"    wp = max(width + 2 * pw, out_w + {(fw - 1) * dw})",
        "    hp = out_h + (fy_n - 1) * dh",
        "    rows_in = max(0, min(height, hp - ph))",
        "    span = np.uint64(out_h * wp)",
        f"    plane_len = hp * wp + {(fw - 1) * dw}",
        "    pitch = np.uint64(wp)",
        "    left = np.uint64(pw)",
    ], [
        f"{indent}for ih in range(rows_in):",
        f"{indent}    row = np.uint64(ih + ph) * pitch + left",
        f"{indent}    for iw in range(width):",
        f"{indent}        plane[row + np.uint64(iw)] = x[n, k, ih, iw]",
    ]


def source_plane(fw: int, dw: int) -> str:
    """The stride-1 kernel module for packed NCHW tensors: no staging transposes.

    ``kernel(x, wt, y, ph, dh, pw)``: ``y[n, k, oh, ow] = sum x[n, k, oh - ph + fy*dh,
    ow - pw + fx*dw] * wt[k, fy, fx]`` (x, y packed NCHW, wt ``(K, FY, FX)`` with ``FX == fw``,
    ``ph, pw >= 0``). Each channel's image is one parallel item: it is copied into a zero-padded
    plane with row pitch ``wp``, and the output is computed on a grid of the same pitch, where
    output ``i = oh * wp + ow`` reads ``plane[i + fy*dh*wp + fx*dw]``: one long loop over the
    whole image per filter row (LLVM vectorises it; no edge columns, no selects), ``fw``
    multiply-adds written out, each output loaded and stored once per filter row. The grid's
    ``wp - out_w`` extra columns per row are computed and dropped. Indices are unsigned: numba
    wraps a possibly negative signed index with a select per element, which keeps LLVM from
    vectorising."""

    def taps(rows: int) -> str:
        return " + ".join(
            f"plane[i + off{r} + np.uint64({fx * dw})] * w{r}_{fx}"
            for r in range(rows)
            for fx in range(fw)
        )

    geometry, copy_in = _stride1_prologue(fw, dw, "wt", "y", " " * 8)
    lines = [
        "def kernel(x, wt, y, ph, dh, pw):",
        *geometry,
        "    for item in prange(n_img * chans):",
        "        n = item // chans",
        "        k = item % chans",
        "        plane = np.zeros(plane_len, np.float32)",
        *copy_in,
        "        grid = np.empty(out_h * wp, np.float32)",
        "        fy = 0",
        "        while fy < fy_n:",
        f"            rows = min({ROWS_PER_PASS}, fy_n - fy)",
    ]
    for rows in range(ROWS_PER_PASS, 0, -1):
        ind = " " * 16
        lines.append(f"            {'if' if rows == ROWS_PER_PASS else 'elif'} rows == {rows}:")
        for r in range(rows):
            lines.append(f"{ind}off{r} = np.uint64((fy + {r}) * dh) * pitch")
            lines += [f"{ind}w{r}_{fx} = wt[k, fy + {r}, {fx}]" for fx in range(fw)]
        lines += [
            f"{ind}if fy == 0:",
            f"{ind}    for i in range(span):",
            f"{ind}        grid[i] = {taps(rows)}",
            f"{ind}else:",
            f"{ind}    for i in range(span):",
            f"{ind}        grid[i] += {taps(rows)}",
        ]
    lines += [
        "            fy += rows",
        "        for oh in range(out_h):",
        "            row = np.uint64(oh) * pitch",
        "            for ow in range(out_w):",
        "                y[n, k, oh, ow] = grid[row + np.uint64(ow)]",
    ]
    return _HEADER + "\n".join(lines) + "\n"


def source_plane_weights(fw: int, dw: int) -> str:
    """Backward weights at stride 1 on packed NCHW tensors, in the layout of
    :func:`source_plane`.

    ``kernel(x, dy, dw_out, ph, dh, pw)``: ``dw_out[k, fy, fx] = sum dy[n, k, oh, ow] *
    x[n, k, oh - ph + fy*dh, ow - pw + fx*dw]`` (``dw_out`` float32 ``(K, FY, FX)``). Each
    channel is one parallel item; per image, x goes into a zero-padded plane and dy onto a grid
    of the same pitch (zeros in its margin columns), and each filter row's ``fw`` taps are ``fw``
    dot products of the grid with the plane shifted by the tap, summed in one long vectorised
    loop (``fastmath`` reassociation makes the sums vector-wide)."""
    sums = "\n".join(f"                s{fx} = ZERO" for fx in range(fw))
    body = "\n".join(
        f"                    s{fx} += g * plane[i + off + np.uint64({fx * dw})]"
        for fx in range(fw)
    )
    adds = "\n".join(f"                acc[fy, {fx}] += s{fx}" for fx in range(fw))
    geometry, copy_in = _stride1_prologue(fw, dw, "dw_out", "dy", " " * 12)
    prologue = "\n".join(geometry)
    copy = "\n".join(copy_in)
    text = f"""def kernel(x, dy, dw_out, ph, dh, pw):
{prologue}
    for k in prange(chans):
        acc = np.zeros((fy_n, {fw}), np.float32)
        plane = np.empty(plane_len, np.float32)
        grid = np.empty(out_h * wp, np.float32)
        for n in range(n_img):
            plane[:] = ZERO
            grid[:] = ZERO
{copy}
            for oh in range(out_h):
                row = np.uint64(oh) * pitch
                for ow in range(out_w):
                    grid[row + np.uint64(ow)] = dy[n, k, oh, ow]
            for fy in range(fy_n):
                off = np.uint64(fy * dh) * pitch
{sums}
                for i in range(span):
                    g = grid[i]
{body}
{adds}
        for fy in range(fy_n):
            for fx in range({fw}):
                dw_out[k, fy, fx] = acc[fy, fx]
"""
    return _HEADER + text


def plane_weights_spec(fw: int, dw: int) -> tuple[str, str]:
    """The name prefix and source of :func:`plane_weights_kernel`."""
    return f"miocore_dw_plane_wrw_{fw}_{dw}", source_plane_weights(fw, dw)


@functools.cache
def plane_weights_kernel(fw: int, dw: int) -> Any:
    """The compiled NCHW backward-weights plane kernel for (filter width, column dilation)."""
    return load_generated(*plane_weights_spec(fw, dw))


def source_plane_stride2(fw: int) -> str:
    """The stride-2 (both ways, no dilation) counterpart of :func:`source_plane`.

    ``kernel(x, wt, y, ph, pw)``. The padded image is split into its four phases (even/odd
    rows by even/odd columns), each a plane of half the pitch: a stride-2 convolution is then
    the sum of four stride-1 ones, one per phase, with the filter taps of that phase, and each
    pass over the output grid reads its phase plane contiguously (no strided loads, nothing
    computed that is dropped but the grid's pitch margin)."""
    half = (fw - 1) // 2
    lines = [
        "def kernel(x, wt, y, ph, pw):",
        "    n_img, chans, height, width = x.shape",
        "    fy_n = wt.shape[1]",
        "    _, _, out_h, out_w = y.shape",
        f"    wq = max((width + 2 * pw + 1) // 2, out_w + {half})",
        "    hq = out_h + (fy_n - 1) // 2",
        "    rows_in = max(0, min(height, 2 * hq - ph))",
        f"    size = hq * wq + {half + 1}",
        "    span = np.uint64(out_h * wq)",
        "    pitch = np.uint64(wq)",
        "    for item in prange(n_img * chans):",
        "        n = item // chans",
        "        k = item % chans",
        "        q = np.zeros(4 * size, np.float32)",
        "        for ih in range(rows_in):",
        "            r2 = ih + ph",
        "            row = np.uint64((r2 % 2) * 2 * size) + np.uint64(r2 // 2) * pitch",
        "            for iw in range(width):",
        "                c2 = iw + pw",
        "                phase = np.uint64((c2 % 2) * size)",
        "                q[row + phase + np.uint64(c2 // 2)] = x[n, k, ih, iw]",
        "        grid = np.zeros(out_h * wq, np.float32)",
        "        for a in range(2):",
        "            for u in range((fy_n - a + 1) // 2):",
        "                fy = 2 * u + a",
    ]
    for b in range(2):
        taps = (fw - b + 1) // 2
        if taps == 0:
            continue
        ind = " " * 16
        lines.append(f"{ind}off = np.uint64((a * 2 + {b}) * size) + np.uint64(u) * pitch")
        lines += [f"{ind}w{v} = wt[k, fy, {2 * v + b}]" for v in range(taps)]
        terms = " + ".join(f"q[i + off + np.uint64({v})] * w{v}" for v in range(taps))
        lines += [f"{ind}for i in range(span):", f"{ind}    grid[i] += {terms}"]
    lines += [
        "        for oh in range(out_h):",
        "            row = np.uint64(oh) * pitch",
        "            for ow in range(out_w):",
        "                y[n, k, oh, ow] = grid[row + np.uint64(ow)]",
    ]
    return _HEADER + "\n".join(lines) + "\n"


def plane_stride2_spec(fw: int) -> tuple[str, str]:
    """The name prefix and source of :func:`plane_kernel_stride2`."""
    return f"miocore_dw_plane2_{fw}", source_plane_stride2(fw)


@functools.cache
def plane_kernel_stride2(fw: int) -> Any:
    """The compiled stride-2 NCHW plane kernel for filter width ``fw``."""
    return load_generated(*plane_stride2_spec(fw))


#: Most taps the even-width stride-2 kernel applies in one pass over its grid: whole filter
#: rows, at least one. One pass of 9 taps for 3x3; 5x5 and 7x7 a row a pass (one thread, 5x5
#: at 8x144x56x56: 1.9 ms a row a pass, 2.2 three rows; 7x7 at 8x96x56x56: 1.6 against 2.2).
STRIDE2_TAPS_PER_PASS = 9


def source_plane_stride2_even(fh: int, fw: int) -> str:
    """The stride-2 (both ways, no dilation) kernel for images of even width: no per-row copies.

    ``kernel(x, wt, y, ph, pw)`` for ``fh x fw`` filters. Per channel image, one long loop
    splits the image into its even and odd columns (``ev``, ``od``: consecutive pairs of the
    flat image, which keeps rows apart when the width is even; LLVM turns it into vector
    shuffles), placed after ``ph`` zero rows; rows of a few columns each copied one by one had
    cost most of the four-phase kernel's time. The output is computed on a grid of the input's
    row pitch ``W``: output ``t = oh * W + ow`` reads ``ev/od[t + fy * W/2 + (fx - pw -
    parity) // 2]`` (plus a front margin), so the filter rows of up to
    :data:`STRIDE2_TAPS_PER_PASS` taps are one long unit-stride loop over the grid; the grid's
    columns past ``out_w`` are computed and dropped. Where a tap falls left of column 0 or
    right of the last, the loop read a zero of the margin or a neighbouring row's value: the
    few outputs of those columns take it back, reading the same elements."""

    def source(fx: int, pw_parity: int) -> str:
        return "ev" if (fx - pw_parity) % 2 == 0 else "od"

    def shift(fx: int) -> str:
        return f"front + ({fx} - pw - ({fx} - pw) % 2) // 2"

    lines = [
        "def kernel(x, wt, y, ph, pw):",
        "    n_img, chans, height, width = x.shape",
        "    _, _, out_h, out_w = y.shape",
        "    half = width // 2",
        "    front = (pw + 1) // 2 + 1",
        f"    pad_bot = max(0, 2 * (out_h - 1) - ph + {fh} - height)",
        f"    size = front + (ph + height + pad_bot) * half + pw + {2 * fw}",
        "    body = np.uint64(front + ph * half)",
        "    pairs = np.uint64(height * half)",
        "    span = np.uint64((out_h - 1) * width + out_w)",
        "    items = n_img * chans",
        "    flat = x.reshape(items, height * width)",
        "    chunks = min(items, 256)",  # enough for any pool; a few buffers each
        *(f"    s{fx} = np.uint64({shift(fx)})" for fx in range(fw)),
        "    for chunk in prange(chunks):",  # buffers made once per chunk; margins stay zero
        "        ev = np.zeros(size, np.float32)",
        "        od = np.zeros(size, np.float32)",
        "        grid = np.empty(out_h * width, np.float32)",
        "        for item in range(chunk * items // chunks, (chunk + 1) * items // chunks):",
        "            k = item % chans",
        "            xf = flat[item]",
        "            for t in range(pairs):",
        "                ev[body + t] = xf[np.uint64(2) * t]",
        "                od[body + t] = xf[np.uint64(2) * t + np.uint64(1)]",
        *(f"            w{fy}_{fx} = wt[k, {fy}, {fx}]" for fy in range(fh) for fx in range(fw)),
        *(f"            r{fy} = np.uint64({fy} * half)" for fy in range(fh)),
    ]
    for parity in (0, 1):
        lines.append("            if pw % 2 == 0:" if parity == 0 else "            else:")
        per_pass = max(1, STRIDE2_TAPS_PER_PASS // fw)
        for first in range(0, fh, per_pass):
            rows = range(first, min(fh, first + per_pass))
            terms = " + ".join(
                f"{source(fx, parity)}[j + r{fy} + s{fx}] * w{fy}_{fx}"
                for fy in rows
                for fx in range(fw)
            )
            lines += [
                "                for j in range(span):",
                f"                    grid[j] {'=' if first == 0 else '+='} {terms}",
            ]
    for fx in range(fw):
        wrong = " + ".join(f"w{fy}_{fx} * src[g + r{fy}]" for fy in range(fh))
        lines += [
            f"            src = ev if ({fx} - pw) % 2 == 0 else od",
            f"            left = min(out_w, max(0, (pw - {fx} + 1) // 2))",
            f"            right = max(left, min(out_w, (width + pw - {fx} + 1) // 2))",
            "            for e in range(left + out_w - right):",
            "                ow = e if e < left else right + (e - left)",
            "                for oh in range(out_h):",
            f"                    g = np.uint64(oh * width + ow) + s{fx}",
            f"                    grid[g - s{fx}] -= {wrong}",
        ]
    lines += [
        "            out = y[item // chans, k]",
        "            for oh in range(out_h):",
        "                row = np.uint64(oh * width)",
        "                for ow in range(out_w):",
        "                    out[oh, ow] = grid[row + np.uint64(ow)]",
    ]
    return _HEADER + "\n".join(lines) + "\n"


def plane_stride2_even_spec(fh: int, fw: int) -> tuple[str, str]:
    """The name prefix and source of :func:`plane_kernel_stride2_even`."""
    return f"miocore_dw_plane2e_{fh}x{fw}", source_plane_stride2_even(fh, fw)


@functools.cache
def plane_kernel_stride2_even(fh: int, fw: int) -> Any:
    """The compiled stride-2 NCHW kernel for images of even width, ``fh x fw`` filters."""
    return load_generated(*plane_stride2_even_spec(fh, fw))


def stride2_even_applies(width: int, out_w: int) -> bool:
    """Whether :func:`source_plane_stride2_even` takes an input of ``width`` columns giving
    ``out_w``: an even width, and output rows that fit the grid's pitch with the reads of the
    last row inside the buffer's end margin (``out_w <= width / 2 + 1``: padding up to about
    half the filter; more padding takes the four-phase kernel)."""
    return width % 2 == 0 and out_w <= width // 2 + 1


def stride2_spec(filt: tuple[int, int], width: int, out_w: int) -> tuple[str, str]:
    """The stride-2 forward kernel's spec for ``filt`` (rows, columns) on an input of
    ``width`` columns giving ``out_w``: the flat kernel where :func:`stride2_even_applies`,
    the four-phase kernel elsewhere."""
    if stride2_even_applies(width, out_w):
        return plane_stride2_even_spec(*filt)
    return plane_stride2_spec(filt[1])


def stride2_kernel(filt: tuple[int, int], width: int, out_w: int) -> Any:
    """The compiled kernel of :func:`stride2_spec`."""
    if stride2_even_applies(width, out_w):
        return plane_kernel_stride2_even(*filt)
    return plane_kernel_stride2(filt[1])


def plane_applies(mult: int, filter_width: int, strides: tuple[int, int], pads: tuple[int, int],
                  dilations: tuple[int, int]) -> bool:  # fmt: skip
    """Whether an NCHW plane kernel exists for this (forward-form) geometry: stride 1 (column
    dilation up to :data:`MAX_STEP`), or stride 2 both ways without dilation; no negative
    padding."""
    if mult != 1 or filter_width > MAX_WIDTH or min(pads) < 0:
        return False
    if strides == (2, 2):
        return dilations == (1, 1)
    return strides == (1, 1) and dilations[1] <= MAX_STEP


def plane_spec(fw: int, dw: int) -> tuple[str, str]:
    """The name prefix and source of :func:`plane_kernel`."""
    return f"miocore_dw_plane_{fw}_{dw}", source_plane(fw, dw)


@functools.cache
def plane_kernel(fw: int, dw: int) -> Any:
    """The compiled NCHW plane kernel for (filter width, column dilation)."""
    return load_generated(*plane_spec(fw, dw))
