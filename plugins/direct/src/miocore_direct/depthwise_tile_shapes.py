"""Which all-taps tile kernel a channels-last depthwise geometry gets
(:mod:`miocore_direct.depthwise_tiles`): tile width, edge tiles and full-row tiles,
chosen per call from the layer's sizes (each choice is a parameter of the generated source).
"""

from __future__ import annotations

from miocore_direct.depthwise_blocked import MAX_STEP, MAX_WIDTH

#: Most output pixels per all-taps tile (rows with every filter row in bounds).
TILE = 8
#: Output pixels per tile of the filter-row loop (rows reaching into the vertical padding).
ROW_TILE = 8
#: Filters of at least this many taps take these kernels: 3x3 and up. (3x3 kept the blocked
#: kernel's body until 2026-11-27; measured then, one thread, MobileNetV2's ten depthwise
#: layers NHWC, alternating: forward 0.84 / 0.63 -> 1.12 / 1.07 of oneDNN at batch 1 / 8,
#: backward data 0.84 / 0.95 -> 1.10 / 1.49.)
MIN_TAPS = 9
#: Widest output row computed as whole-row tiles (:func:`full_width_for`), in segments of at
#: most :data:`MAX_SEGMENT` columns: 28x28 layers 1.2-1.3x faster than the sweep, but 100-190 s
#: to compile instead of 30-60; 56-column rows were not measured.
MAX_FULL = 32
#: Most columns of one segment of a whole-row tile (its accumulators live in registers: 16 of
#: the 32 vector registers).
MAX_SEGMENT = 16
#: Most edge columns per side taken as one tile (their accumulators live in registers).
MAX_EDGE = 8


def applies(mult: int, filter_hw: tuple[int, int], stride_w: int, dilation_w: int) -> bool:
    """Whether a tile kernel exists for this geometry (3x3 to 8x8-sized filters)."""
    fh, fw = filter_hw
    return (
        mult == 1
        and fw <= MAX_WIDTH
        and fh <= MAX_WIDTH
        and fh * fw >= MIN_TAPS
        and stride_w <= MAX_STEP
        and dilation_w <= MAX_STEP
    )


def interior_columns(width: int, out_w: int, fw: int, sw: int, dw: int, pw: int) -> tuple[int, int]:
    """``(lo, hi)``: the output columns ``lo <= ow < hi`` whose taps are all in bounds (the
    generated kernels compute the same two numbers in their source)."""
    lo = min(out_w, max(0, -((-pw) // sw)))
    return lo, max(lo, min(out_w, (width - 1 - (fw - 1) * dw + pw) // sw + 1))


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
    lo, hi = interior_columns(width, out_w, fw, sw, dw, pw)
    if hi - lo < 2:
        return TILE
    tiles = -(-(hi - lo) // TILE)
    return -(-(hi - lo) // tiles)


def edge_pad_for(fw: int, sw: int, dw: int, pw: int) -> int:
    """The ``edge_pad`` a kernel for column padding ``pw`` is generated with (0: the edge
    columns stay a pixel loop): a padding within the filter's reach, at most
    :data:`MAX_EDGE` columns (column stride 1, and 2 since session 12)."""
    return pw if 0 < pw <= min(MAX_EDGE, (fw - 1) * dw) else 0


def edge_phase_for(width: int, fw: int, sw: int, dw: int, pw: int) -> int:
    """The ``edge_phase`` of a kernel for input ``width``: ``(width - 1 - (fw - 1)*dw + pw)
    % sw``, on which the right edge's taps depend at column stride 2 (0 at stride 1)."""
    return (width - 1 - (fw - 1) * dw + pw) % sw


def full_width_for(width: int, out_w: int, edge_pad: int) -> int:
    """The ``full_width`` of a kernel for input ``width``: the width itself where the output
    has at most :data:`MAX_FULL` columns and the padding is within the filter's reach
    (``edge_pad``), else 0."""
    return width if edge_pad and out_w <= MAX_FULL else 0


def choose(fw: int, sw: int, dw: int, pw: int, width: int, out_w: int) -> dict[str, int]:
    """The keyword arguments of :func:`miocore_direct.depthwise_tiles.tile_kernel` (after
    its geometry and channel count) for a call: filter width ``fw``, column stride and
    dilation, column padding ``pw``, input and output widths."""
    edge = edge_pad_for(fw, sw, dw, pw)
    full = full_width_for(width, out_w, edge)
    if full:  # the row is one tile: tile width and edge tiles do not apply
        return {"edge_pad": edge, "full_width": full}
    return {
        "tile": tile_for(width, out_w, fw, sw, dw, pw),
        "edge_pad": edge,
        "edge_phase": edge_phase_for(width, fw, sw, dw, pw),
    }
