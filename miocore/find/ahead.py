"""Compiling ahead: the kernels that finding many problems would compile, built at once.

A network's layers are found one at a time (``miocore.torch.prepare`` meets them in call
order), and each find compiles what it measures before measuring it, so without this every
layer's compiles wait for the previous layer's. :func:`compile_ahead` asks, for each problem,
exactly what its find would start from (a database answer compiles nothing; DYNAMIC_HYBRID's
rules choose what it would compile) and hands every kernel to the backend's parallel
``precompile`` in one call.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from miocore import env
from miocore.env import FindMode
from miocore.find.dynamic import candidate_kernels, dynamic_only
from miocore.find.hit import find_start
from miocore.problem.conv import ConvProblem
from miocore.solver.results import FindReport

if TYPE_CHECKING:
    from miocore.find.handle import Handle


def compile_ahead(
    handle: Handle,
    problems: Iterable[ConvProblem],
    *,
    accuracy: Any = None,
    deterministic: bool = False,
) -> dict[str, str]:
    """See :meth:`miocore.Handle.compile_ahead` (``problems`` already checked)."""
    precompile = getattr(handle.backend, "precompile", None)
    if precompile is None:  # a backend that builds nothing ahead (the CPU)
        return {}
    mode = env.find_mode()
    kernels: list[Any] = []
    for problem in problems:
        report = FindReport(key=problem.key, mode=mode.name, enforce="NONE")
        _, candidates = find_start(
            handle, problem, report, mode, None, True, accuracy, deterministic
        )
        if not candidates:
            continue
        if mode is FindMode.DYNAMIC_HYBRID:
            candidates = dynamic_only(handle.engine, problem, candidates, report)
        kernels += candidate_kernels(handle.engine, problem, candidates)
    if not kernels:
        return {}
    return dict(precompile(kernels))
