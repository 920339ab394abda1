"""Problems the learned-heuristic tests share."""

from __future__ import annotations

from miocore.problem.conv import ConvProblem


def heuristic_problems() -> list[ConvProblem]:
    out = []
    for c in (2, 4, 8, 16):
        for hw in (4, 6, 8, 10):
            for f in (1, 3):
                for direction in ("forward", "backward_data", "backward_weights"):
                    out.append(
                        ConvProblem.from_sizes(
                            direction,
                            n=1,
                            c=c,
                            k=c,
                            in_spatial=(hw, hw),
                            filter_spatial=(f, f),
                            pads=(f // 2, f // 2),
                        )
                    )
    return out
