"""Timing shared by the benchmarks: both sides are measured by the same loop."""

from __future__ import annotations

import math
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

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
    """A one-line description of this machine, with the kernels numpy's OpenBLAS runs (a VM
    hiding an AVX-512 CPU's model gets its Haswell ones: miocore.backends.cpu_blas) and the
    BLAS miocore's CPU solvers run their GEMMs on (miocore.backends.cpu_gemm)."""
    import os

    from threadpoolctl import threadpool_info

    from miocore.backends.cpu_gemm import own_blas

    own = own_blas()

    blas = [
        f"{lib['internal_api']} {lib.get('version', '')} {lib.get('architecture', '')}".strip()
        for lib in threadpool_info()
        if lib.get("user_api") == "blas"
    ]
    return (
        f"{platform.machine()} {platform.processor() or ''} {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, numpy {np.__version__}"
        + (f" ({', '.join(blas)})" if blas else "")
        + (
            f"; miocore's GEMMs: own OpenBLAS {own.corename}"
            if own
            else "; miocore's GEMMs: numpy's"
        )
    ).replace("  ", " ")


def config_runner(
    handle: Any, solver: str, problem: Any, config: Any, x: Any, w: Any, y: Any
) -> Any:
    """A zero-argument callable running ``solver`` with one perf config on the given arrays,
    compiled outside the handle's caches (to time configs find would not pick)."""
    import miocore

    implementation = handle.registry.get(solver).solver
    canon = problem.canonical
    solution = implementation.get_solution(handle.context, canon, config)
    invoker = solution.invoker_factory(handle.backend.compile(solution.kernels))
    workspace = handle.backend.allocate_workspace(solution.workspace_size)
    views = {
        name: handle.backend.check_array(getattr(problem, name), t, name)
        for name, t in (("x", x), ("w", w), ("y", y))
    }
    params = miocore.InvokeParams(problem=canon, workspace=workspace, **views)
    return lambda: invoker(handle, params)


def time_configs(
    handle: Any,
    solver: str,
    problem: Any,
    configs: Any,
    tensors: tuple[Any, Any, Any],
    out: Any,
    expected: Any,
    timer: Any,
) -> list[dict[str, Any]]:
    """Each of ``configs`` of ``solver`` on the torch ``tensors`` (x, w, y): run once into
    ``out`` (the written one) poisoned with NaN, its error the largest difference from
    ``expected`` over ``expected``'s largest magnitude, then timed by ``timer(fn)`` (ms). A
    config that raises gives its error instead of a time."""
    scale = float(expected.abs().max())
    timings: list[dict[str, Any]] = []
    for cfg in configs:
        try:
            run = config_runner(handle, solver, problem, cfg, *tensors)
            out.fill_(float("nan"))
            run()
            err = float((out.float() - expected).abs().max()) / scale
            timings.append({"config": dict(cfg), "ms": timer(run), "rel_err": err})
        except Exception as exc:
            timings.append({"config": dict(cfg), "error": f"{type(exc).__name__}: {exc}"[:300]})
    return timings
