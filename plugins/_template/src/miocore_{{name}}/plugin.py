"""miocore plugin entry point of the {{name}} family: what it registers, nothing else.

The hooks only collect registrations; miocore calls the solvers' methods directly. Every
process that uses miocore imports this module, so it imports nothing of the solvers: each is
declared lazily (its name, family and backends, which must equal the class's), and the
``factory`` module is imported when a find first asks the solver a question. A FindDb hit
then imports only the solvers its record names, and a CPU handle never imports a GPU solver.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

#: Kernel sources for the GPU backends, inside the package so the wheel carries them.
KERNELS = Path(__file__).parent / "kernels"


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """The {{name}} solvers."""
    yield miocore.SolverRecord(
        factory="miocore_{{name}}.solver:{{Name}}Direct",  # a Solver subclass or a callable
        name="{{name}}.direct",
        algorithm="direct",
        backends=("cpu",),
    )


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """Where ``KernelInfo.source`` names of this plugin are looked up."""
    yield miocore.KernelSourceRecord(name="{{name}}", path=KERNELS)
