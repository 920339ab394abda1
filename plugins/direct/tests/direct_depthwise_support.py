"""Problems the direct.depthwise CPU tests share."""

from __future__ import annotations

from miocore import ConvProblem

DIRECTIONS = ("forward", "backward_data", "backward_weights")


def depthwise_problem(direction: str, layout: str, dtype: str, mult: int = 1) -> ConvProblem:
    return ConvProblem.from_sizes(
        direction,
        n=2,
        c=5,
        k=5 * mult,
        in_spatial=(9, 8),
        filter_spatial=(3, 5),
        pads=(1, 2),
        strides=(2, 1),
        dilations=(1, 2),
        groups=5,
        dtype=dtype,
        layout=layout,
    )


def twenty_channels(
    direction: str, n: int, filt, pads, strides, dils, size, dtype: str, layout: str
) -> ConvProblem:
    """A depthwise problem of 20 channels: one 16-lane vector and a remainder."""
    return ConvProblem.from_sizes(
        direction,
        n=n,
        c=20,
        k=20,
        in_spatial=size,
        filter_spatial=filt,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=20,
        dtype=dtype,
        layout=layout,
    )
