"""Timing shared by the benchmarks: both sides are measured by the same loop."""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np


def median_ms(
    run: Callable[[], object],
    *,
    warmup: int = 2,
    min_runs: int = 5,
    min_total_s: float = 0.3,
    max_runs: int = 50,
) -> float:
    """Median wall-clock milliseconds of ``run`` after warm-up calls."""
    for _ in range(warmup):
        run()
    samples: list[float] = []
    while len(samples) < max_runs:
        start = time.perf_counter()
        run()
        samples.append(time.perf_counter() - start)
        if len(samples) >= min_runs and sum(samples) >= min_total_s:
            break
    return statistics.median(samples) * 1e3


def geomean(values: list[float]) -> float:
    """Geometric mean (NaN for an empty list)."""
    values = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def machine() -> str:
    """A one-line description of this machine."""
    import os

    return (
        f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
    ).replace("  ", " ")
