"""Problems the ``miocore tune`` tests share."""

from __future__ import annotations

from miocore.problem.conv import ConvProblem
from miocore.tune import expand


def tiny_problems() -> list[ConvProblem]:
    """Nine small problems (three shapes, one grouped channels-last, in every direction) that
    a CPU finds in a blink."""
    base = [
        ConvProblem.from_sizes(
            "forward", n=1, c=2, k=2, in_spatial=(5, 5), filter_spatial=(3, 3), pads=(1, 1)
        ),
        ConvProblem.from_sizes("forward", n=1, c=2, k=4, in_spatial=(4, 4), filter_spatial=(1, 1)),
        ConvProblem.from_sizes(
            "forward",
            n=1,
            c=4,
            k=4,
            in_spatial=(5, 5),
            filter_spatial=(3, 3),
            pads=(1, 1),
            groups=4,
            layout="NHWC",
        ),
    ]
    return expand(base, directions=["forward", "backward_data", "backward_weights"])
