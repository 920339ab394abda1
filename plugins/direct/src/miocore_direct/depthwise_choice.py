"""Which kernel family of ``direct.depthwise`` takes a problem: each family's own test,
imported only when a plan asks (planning a problem, or a FindDb hit, loads no kernel module).
"""

from __future__ import annotations


def blocked_applies(mult: int, width: int, stride_w: int, dilation_w: int) -> bool:
    """:func:`miocore_direct.depthwise_blocked.applies` (that module is numba-free to import,
    but this keeps planning free of it until a kernel runs)."""
    from miocore_direct.depthwise_blocked import applies

    return applies(mult, width, stride_w, dilation_w)


def wrw_tiles_apply(mult: int, width: int, stride_w: int, dilation_w: int) -> bool:
    """:func:`miocore_direct.depthwise_wrw_tiles.applies`, imported when asked."""
    from miocore_direct.depthwise_wrw_tiles import applies

    return applies(mult, width, stride_w, dilation_w)


def tiles_apply(mult: int, filt: tuple[int, ...], stride_w: int, dilation_w: int) -> bool:
    """:func:`miocore_direct.depthwise_tile_shapes.applies`, imported when asked."""
    from miocore_direct.depthwise_tile_shapes import applies

    return applies(mult, (filt[0], filt[1]), stride_w, dilation_w)


def phases_apply(
    mult: int, filt: tuple[int, ...], strides: tuple[int, int], dilations: tuple[int, ...]
) -> bool:
    """:func:`miocore_direct.depthwise_phases.applies`, imported when asked."""
    from miocore_direct.depthwise_phases import applies

    return applies(mult, (filt[0], filt[1]), strides, (dilations[0], dilations[1]))


def plane_bwd2_applies(
    mult: int,
    filt: tuple[int, ...],
    strides: tuple[int, int],
    dilations: tuple[int, ...],
    size: tuple[int, ...],
) -> bool:
    """:func:`miocore_direct.depthwise_plane_bwd.applies`, imported when asked."""
    from miocore_direct.depthwise_plane_bwd import applies

    dils = (dilations[0], dilations[1])
    return applies(mult, (filt[0], filt[1]), strides, dils, (size[0], size[1]))


def plane_applies(
    mult: int,
    width: int,
    strides: tuple[int, int],
    pads: tuple[int, ...],
    dilations: tuple[int, ...],
) -> bool:
    """:func:`miocore_direct.depthwise_plane.plane_applies`, imported when asked."""
    from miocore_direct.depthwise_plane import plane_applies

    return plane_applies(mult, width, strides, (pads[0], pads[1]), (dilations[0], dilations[1]))


def staging_beats_planes(channels: int, filter_width: int, out_width: int) -> bool:
    """Whether a forward or stride-1 backward-data NCHW layer runs faster staged to
    channels-last (the tile kernels, vectorised over channels) than on the plane kernels
    (vectorised along output rows): with 64 channels or more, where rows are short for the
    filter: 5-wide filters or wider on outputs up to 14 wide, 7-wide or wider up to 28.
    Measured on ConvNeXt-T's and EfficientNet-B0's layers (one thread, batch 1 and 8, two
    alternating rounds, 2026-11-27, after the staging copies became 16x16 block transposes):
    ConvNeXt-T NCHW forward 0.89 / 0.73 -> 0.91 / 0.87 of oneDNN's speed (batch 1 / 8),
    backward data 0.82 / 0.72 -> 1.09 / 1.15; EfficientNet-B0's 5x5 layers on 14x14 1.2-1.6x
    faster; the planes as fast or faster elsewhere (docs/performance-cpu-depthwise.md). Before
    the block transposes (forward only): 5-wide up to 7, 7-wide up to 14."""
    if channels < 64:
        return False
    return (filter_width >= 5 and out_width <= 14) or (filter_width >= 7 and out_width <= 28)


def staging_beats_planes_wrw(channels: int, out_width: int) -> bool:
    """Whether NCHW backward weights runs faster staged to channels-last (the backward-weights
    register tiles, after the 16x16 block transposes) than on the plane kernels: on outputs up
    to 7 wide, with channels in whole blocks of 16. Measured on MobileNetV2's and
    EfficientNet-B0's stride-1 layers (one thread, batch 1 and 8, two alternating rounds,
    2026-11-27): staged 1.1-2.0x faster on every 7x7 layer (960, 1152 channels, 3x3 and 5x5),
    0.3-0.97x on every wider one (the planes' long rows)."""
    return channels % 16 == 0 and out_width <= 7
