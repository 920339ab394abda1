"""Sliding-window kernels of ``direct.grouped`` for groups of 32 channels in and out
(ResNeXt-50's two 1024-channel layers), a group's two 16-lane output blocks in one tile.

The plain kernel (:mod:`miocore_direct.grouped_simd`) gives each 16-lane output block its
own pass over the group's 32 input channels, one broadcast from memory per multiply-add (45-60
multiply-adds per ns). Here a tile is 7 output pixels of both blocks of a group (14
accumulators): each broadcast ``x[p', i]`` is loaded once and multiply-added with both blocks'
weight vectors into every output pixel of the tile that one of its column taps reaches
(:func:`miocore_direct.grouped_slide.column_hits`), with the ``2 * F`` weight vectors of a
filter row and channel in registers. A 3-tap row at stride 1 takes 9 broadcasts and 6 weight
loads per 42 multiply-adds (the plain kernel 42 and 3 per 42), at stride 2 15 and 6.

Rows of 7 pixels are ResNeXt's 7x7 layers (and each stride phase of their 14x14 backward
data); a row's last tile overlaps the one before, narrower rows take one pixel (of both
blocks) at a time. Backward weights: :func:`weights_source`, a job one filter row, one
16-lane output block and a quarter of the group's input channels (``F * 8`` sums).
"""

from __future__ import annotations

import functools
from typing import Any

from miocore_direct.grouped_slide import _HEADER, LANES, column_hits

#: The group width these kernels take.
WIDTH = 32
#: Output pixels a tile: ResNeXt's 7-pixel rows; 14 accumulators, 6 weight vectors and a
#: broadcast fit the 32 AVX-512 registers.
TILE = 7
#: Input channels a backward-weights job sums (``F * 8`` accumulators, as the width-16
#: sliding kernel's half groups).
PART = 8
#: Groups a self-staging task stages at once: an NHWC pixel's 4 groups are one 512-byte
#: run (staging 8 images of 1024x7x7: 0.029 ms in runs of 4 groups, 0.045 of one, 0.065 ms
#: per 16-channel block; 1024x14x14: 0.12, 0.20, 0.27 ms).
CHUNK = 4
#: Bumped with any change to :func:`miocore_direct.grouped_blocks.stage_blocks`, which the
#: self-staging kernels here and :func:`miocore_direct.grouped_fused.weights_source` call
#: (numba's disk cache keys a kernel on its own module only; their sources name it).
REVISION = 1
#: (column taps, stride, dilation) compiled: 3x3 at stride 1 and 2, and the one- and two-tap
#: column phases of stride-2 backward data.
SHAPES = {(3, 1, 1), (3, 2, 1), (2, 1, 1), (1, 1, 1)}


def wide_shape(fx_n: int, sw: int, dw: int, out_w: int) -> tuple[int, int, int] | None:
    """The compiled shape of a 32-wide pass whose rows have ``out_w`` output pixels, else
    None (the plain kernel)."""
    shape = (fx_n, sw, dw)
    return shape if shape in SHAPES and out_w >= 1 else None


def _channel(src: str) -> str:
    """The offset of input channel ``i`` of a group from its channel 0: channels-last in the
    staged input ``xp``, in two 16-channel blocks ``half`` apart in a thread's ``buf``."""
    return "i" if src == "xp" else f"i // {LANES} * half + i % {LANES}"


def _weight_offset(f: int | str, steps: bool) -> str:
    """The offset in ``wa`` of block ``2g``'s weight vector of column tap ``f`` and input
    channel ``i`` of the filter row at ``wr``."""
    if steps:
        return f"wr + {f} * fs + i * ist"
    if isinstance(f, int):
        return f"wr + {f * WIDTH * LANES} + i * {LANES}"
    return f"wr + {f} * {WIDTH * LANES} + i * {LANES}"


def weight_steps(fy_n: int, fx_n: int, direct: bool) -> tuple[int, ...]:
    """The self-staging kernel's weight addressing ``(gs, base, fys, fs, ist, w1)`` for a
    ``fy_n x fx_n`` filter: group ``g``'s filter row ``fy`` starts at ``g*gs + base +
    fy*fys``, its column tap ``f`` at ``f*fs`` on, input channel ``i`` at ``i*ist`` on, block
    ``2g + 1`` at ``w1`` on. The arranged weights
    (:func:`miocore_direct.grouped_arrange.arranged_weights`, ``(K/16, T, 32, 16)``), or
    ``direct``: the caller's packed float32 KYXC weights read as backward data's flipped
    filter (lane ``l`` of block ``2g + h``'s vector of tap ``t`` and channel ``i`` is ``w[g*32
    + i, T-1-t, h*16 + l]``, a vector in place: no rearranging pass)."""
    taps, block = fy_n * fx_n, WIDTH * LANES
    if direct:
        return (
            WIDTH * taps * WIDTH,
            (taps - 1) * WIDTH,
            -fx_n * WIDTH,
            -WIDTH,
            taps * WIDTH,
            LANES,
        )
    return (2 * taps * block, 0, fx_n * block, block, LANES, taps * block)


def _tile(
    add: Any, ind: str, shape: tuple[int, int, int], src: str, rows: list[str], steps: bool
) -> None:
    """Emit one tile's multiply-adds at indent ``ind``: accumulators ``a0..`` (block ``2g``)
    and ``c0..`` (``2g + 1``) over the filter rows; ``rows`` the source lines that set ``rb``
    (the channel-0 offset of input column ``ow * S`` of the tile's row, in array ``src``)
    and ``wr`` (its filter row's weights), ``pitch`` the floats between input pixels;
    ``steps``: the weights' steps between column taps and channels are the runtime ``fs``
    and ``ist`` (:func:`weight_steps`), else those of the arranged weights."""
    taps, stride, dil = shape
    span = (TILE - 1) * stride + (taps - 1) * dil + 1
    for p in range(TILE):
        add(f"{ind}a{p} = zero()")
        add(f"{ind}c{p} = zero()")
    add(f"{ind}for fy in range(fy_n):")
    for line in rows:
        add(f"{ind}    {line}")
    add(f"{ind}    for i in range({WIDTH}):")
    for f in range(taps):
        off = _weight_offset(f, steps)
        add(f"{ind}        u{f} = load(wa, {off})")
        add(f"{ind}        v{f} = load(wa, w1 + {off})")
    add(f"{ind}        xb = rb + {_channel(src)}")
    for q in range(span):
        hits = column_hits(q, taps, stride, dil, TILE)
        if hits:
            add(f"{ind}        b = splat({src}, xb + {q} * pitch)")
        for f, p in hits:
            add(f"{ind}        a{p} = fma(b, u{f}, a{p})")
            add(f"{ind}        c{p} = fma(b, v{f}, c{p})")


def _pixel(
    add: Any, ind: str, shape: tuple[int, int, int], src: str, rows: list[str], steps: bool
) -> None:
    """Emit one output pixel of both blocks (``a0``, ``c0``) at indent ``ind``, for rows
    narrower than a tile; ``rows`` and ``steps`` as in :func:`_tile`."""
    taps, _, dil = shape
    add(f"{ind}a0 = zero()")
    add(f"{ind}c0 = zero()")
    add(f"{ind}for fy in range(fy_n):")
    for line in rows:
        add(f"{ind}    {line}")
    add(f"{ind}    for fx in range({taps}):")
    add(f"{ind}        for i in range({WIDTH}):")
    add(f"{ind}            b = splat({src}, rb + {_channel(src)} + fx * {dil} * pitch)")
    off = _weight_offset("fx", steps)
    add(f"{ind}            a0 = fma(b, load(wa, {off}), a0)")
    add(f"{ind}            c0 = fma(b, load(wa, w1 + {off}), c0)")


def forward_source(taps: int, stride: int, dil: int) -> str:
    """``kernel(xp, wa, y, dims, place)`` as :func:`miocore_direct.grouped_simd.forward_source`
    for group width 32 and ``(fx_n, sw, dw) == (taps, stride, dil)``; a task is one image and
    group (its weights, 36 KiB at 3x3, stay in cache over its rows)."""
    shape = (taps, stride, dil)
    block = WIDTH * LANES
    lines = [
        "def kernel(xp, wa, y, dims, place):",
        "    n_img, hp, wp, chans, out_h, out_w, kout, fy_n, fx_n, sh, sw, dh, dw = dims",
        "    x0, y0, y_img, y_row, y_px = place",
        f"    groups = kout // {WIDTH}",
        f"    taps = fy_n * {taps}",
        "    pitch = chans",
        f"    w1 = taps * {block}",  # block 2g+1's weights after 2g's
        "    for task in prange(n_img * groups):",
        "        n = task // groups",
        "        g = task % groups",
        f"        gc = g * {WIDTH}",
        "        wg = g * 2 * w1",
        "        for oh in range(out_h):",
        "            yr = y0 + n * y_img + oh * y_row + gc",
        f"            if out_w >= {TILE}:",
        "                ow = 0",
        "                while ow < out_w:",
        f"                    ow = min(ow, out_w - {TILE})",
    ]
    add = lines.append
    rows = [
        f"rb = x0 + ((n * hp + oh * sh + fy * dh) * wp + ow * {stride}) * chans + gc",
        f"wr = wg + fy * {taps * block}",
    ]
    _tile(add, " " * 20, shape, "xp", rows, False)
    for p in range(TILE):
        add(f"                    store(y, yr + (ow + {p}) * y_px, a{p})")
        add(f"                    store(y, yr + (ow + {p}) * y_px + {LANES}, c{p})")
    add(f"                    ow += {TILE}")
    add("            else:")
    add("                for ow in range(out_w):")
    _pixel(add, " " * 20, shape, "xp", rows, False)
    add("                    store(y, yr + ow * y_px, a0)")
    add(f"                    store(y, yr + ow * y_px + {LANES}, c0)")
    from miocore_direct.simd import REVISION

    return _HEADER.format(revision=REVISION) + "\n".join(lines) + "\n"


def fused_header() -> str:
    """The start of a generated 32-wide self-staging kernel's source, up to its ``def``:
    :func:`miocore_direct.grouped_fused.stage_source_header` with the block copies it calls
    and this module's :data:`REVISION`."""
    from miocore_direct.grouped_fused import stage_source_header

    text = stage_source_header().replace("import stage, unstage", "import stage_blocks, unstage")
    return text.replace("\nimport numba", f", grouped_wide revision {REVISION}\nimport numba", 1)


def fused_source(taps: int, stride: int, dil: int) -> str:
    """``kernel(x, wa, y, dims, bufs, nchw_in, nchw_out)`` as
    :func:`miocore_direct.grouped_fused.fused_source` for group width 32: a task (up to
    :data:`CHUNK` groups of one image; a thread's tasks run image after image, so the groups'
    weights stay in cache) stages its groups' channels of the caller's ``x`` into 16-channel
    blocks of its thread (:func:`miocore_direct.grouped_blocks.stage_blocks`), runs the tiles
    from them and writes the output straight into an NHWC ``y`` or through blocks of the
    thread (``bufs`` with room for :func:`fused_floats`) into an NCHW one."""
    from miocore_direct.grouped_fused import SLACK

    shape = (taps, stride, dil)
    lines = [
        "def kernel(x, wa, y, dims, bufs, nchw_in, nchw_out):",
        "    n_img, h, w, chans, out_h, out_w, kout, fy_n, fx_n, sh, sw, dh, dw = dims[:13]",
        "    hp, wp, top, left = dims[13:17]",
        "    gs, wbase, fys, fs, ist, w1 = dims[17:23]",  # weight_steps
        f"    groups = kout // {WIDTH}",
        f"    chunks = -(-groups // {CHUNK})",
        f"    pitch = {LANES}",
        f"    half = hp * wp * {LANES} + {SLACK}",
        f"    ob = {2 * CHUNK} * half",
        f"    plane = out_h * out_w * {LANES}",
        # NCHW output goes through blocks of the thread's (transposed back by unstage), NHWC
        # straight into y (a group's second block 16 floats on)
        f"    oh1 = plane if nchw_out else {LANES}",
        f"    px = {LANES} if nchw_out else kout",
        "    for task in prange(n_img * chunks):",
        "        g0 = task // n_img * " + str(CHUNK),
        "        n = task % n_img",
        f"        gn = min({CHUNK}, groups - g0)",
        "        buf = bufs[numba.get_thread_id()]",
        "        dst = buf if nchw_out else y",
        "        place = (hp, wp, top, left)",
        f"        cg = g0 * {WIDTH}",
        "        stage_blocks(x, buf, 0, half, n, cg, 2 * gn, (h, w, chans), place, nchw_in)",
        "        for gi in range(gn):",
        "            g = g0 + gi",
        f"            gc = g * {WIDTH}",
        "            wg = g * gs + wbase",
        "            xg = 2 * gi * half",
        "            og = ob + 2 * gi * plane",
        "            for oh in range(out_h):",
        "                if nchw_out:",
        "                    yr = og + oh * out_w * px",
        "                else:",
        "                    yr = (n * out_h + oh) * out_w * px + gc",
        f"                if out_w >= {TILE}:",
        "                    ow = 0",
        "                    while ow < out_w:",
        f"                        ow = min(ow, out_w - {TILE})",
    ]
    add = lines.append
    rows = [
        f"rb = xg + ((oh * sh + fy * dh) * wp + ow * {stride}) * {LANES}",
        "wr = wg + fy * fys",
    ]
    ind = " " * 24
    _tile(add, ind, shape, "buf", rows, True)
    for p in range(TILE):
        add(f"{ind}store(dst, yr + (ow + {p}) * px, a{p})")
        add(f"{ind}store(dst, yr + oh1 + (ow + {p}) * px, c{p})")
    add(f"{ind}ow += {TILE}")
    add("                else:")
    add("                    for ow in range(out_w):")
    _pixel(add, ind, shape, "buf", rows, True)
    add(f"{ind}store(dst, yr + ow * px, a0)")
    add(f"{ind}store(dst, yr + oh1 + ow * px, c0)")
    add("        if nchw_out:")
    add("            for b in range(2 * gn):")
    add(f"                k0 = cg + b * {LANES}")
    add("                unstage(buf, ob + b * plane, y, n, k0, out_h * out_w, kout, True)")
    return fused_header() + "\n".join(lines) + "\n"


def fused_floats(hp: int, wp: int, out_h: int, out_w: int) -> int:
    """Floats of a thread's block of :func:`fused_source` and :func:`weights_source`: the
    staged input blocks of :data:`CHUNK` groups of ``hp x wp`` pixels and their output (dy)
    blocks, each with the slack a 16-pixel run past a row's end needs."""
    from miocore_direct.grouped_fused import SLACK

    return 2 * CHUNK * (hp * wp * LANES + out_h * out_w * LANES + 2 * SLACK)


def weights_source(taps: int, stride: int, dil: int) -> str:
    """``kernel(x, dy, dwa, dims, bufs, nchw)`` as
    :func:`miocore_direct.grouped_fused.weights_source` for group width 32: a task owns up
    to :data:`CHUNK` groups; per image it stages their x and dy blocks
    (:func:`miocore_direct.grouped_blocks.stage_blocks`), then its jobs (a group's lane block,
    filter row and :data:`PART` input channels: ``taps * PART`` sums in registers) add that
    image to their sums in turn. Each broadcast ``x[q, i]`` is multiply-added with the dy
    vectors of every output pixel of a :data:`TILE`-pixel tile that one of its column taps
    reaches; pixels past a row's last whole tile one at a time."""
    from miocore_direct.grouped_fused import SLACK, weights_rows

    block = WIDTH * LANES
    parts = WIDTH // PART
    acc = [(f, i) for f in range(taps) for i in range(PART)]
    lines = [
        "def kernel(x, dy, dwa, dims, bufs, nchw):",
        "    n_img, h, w, chans, out_h, out_w, kout, fy_n, fx_n, sh, sw, dh, dw = dims[:13]",
        "    hp, wp, top, left = dims[13:17]",
        f"    groups = kout // {WIDTH}",
        f"    chunks = -(-groups // {CHUNK})",
        f"    taps = fy_n * {taps}",
        f"    half = hp * wp * {LANES} + {SLACK}",
        f"    dstep = out_h * out_w * {LANES} + {SLACK}",
        f"    ob = {2 * CHUNK} * half",
        "    for c in prange(chunks):",
        f"        g0 = c * {CHUNK}",
        f"        gn = min({CHUNK}, groups - g0)",
        f"        cg = g0 * {WIDTH}",
        "        buf = bufs[numba.get_thread_id()]",
        "        for n in range(n_img):",
        "            place = (hp, wp, top, left)",
        "            stage_blocks(x, buf, 0, half, n, cg, 2 * gn, (h, w, chans), place, nchw)",
        "            dplace = (out_h, out_w, 0, 0)",
        "            dsize = (out_h, out_w, kout)",
        "            stage_blocks(dy, buf, ob, dstep, n, cg, 2 * gn, dsize, dplace, nchw)",
        f"            for job in range(gn * 2 * fy_n * {parts}):",
        f"                part = job % {parts}",
        f"                fy = job // {parts} % fy_n",
        f"                hb = job // ({parts} * fy_n)",  # lane block of the chunk, 0 .. 2*gn
        "                kb = 2 * g0 + hb",
        f"                wb = (kb * taps + fy * {taps}) * {block} + part * {PART * LANES}",
        # x channels of this part: block 2*(hb//2) + part//2 of the staged ones
        f"                xo = (hb // 2 * 2 + part // 2) * half + part % 2 * {PART}",
        "                do = ob + hb * dstep",
    ]
    add = lines.append
    for f, i in acc:
        add(f"                a{f}_{i} = load(dwa, wb + {f * block + i * LANES}) if n else zero()")
    xr = f"xo + (oh * sh + fy * dh) * wp * {LANES}"
    weights_rows(add, (taps, stride, dil), TILE, PART, (xr, f"do + oh * out_w * {LANES}"))
    for f, i in acc:
        add(f"                store(dwa, wb + {f * block + i * LANES}, a{f}_{i})")
    return fused_header() + "\n".join(lines) + "\n"


#: The generated kernels by kind (their names' infix): forward on the staged input, the
#: self-staging forward, the self-staging backward weights.
_KINDS = {"": forward_source, "fused_": fused_source, "wrw_": weights_source}


def spec(kind: str, shape: tuple[int, int, int]) -> tuple[str, str]:
    """The name prefix and source of one kind of kernel (:data:`_KINDS`) and shape."""
    taps, stride, dil = shape
    return f"miocore_gv_wide_{kind}{taps}_{stride}_{dil}", _KINDS[kind](taps, stride, dil)


@functools.cache
def kernel(kind: str, shape: tuple[int, int, int]) -> Any:
    """The compiled 32-wide kernel of one kind (:data:`_KINDS`) and shape."""
    from miocore_direct.depthwise_blocked import load_generated

    return load_generated(*spec(kind, shape))


def pass_shape(width: int, fx_n: int, sw: int, dw: int, out_w: int) -> tuple[int, int, int] | None:
    """The sliding-window shape of a pass of group width ``width`` (16:
    :func:`miocore_direct.grouped_slide.shape_for`; 32: :func:`wide_shape`), else None."""
    from miocore_direct.grouped_slide import shape_for

    return (
        wide_shape(fx_n, sw, dw, out_w) if width == WIDTH else shape_for(width, fx_n, sw, dw, out_w)
    )
