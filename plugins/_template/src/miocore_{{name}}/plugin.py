"""miocore plugin entry point of the {{name}} family: what it registers, nothing else.

The hooks only collect registrations; miocore calls the solvers' methods directly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import miocore

from miocore_{{name}}.solver import {{Name}}Direct

#: Kernel sources for the GPU backends, inside the package so the wheel carries them.
KERNELS = Path(__file__).parent / "kernels"


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """The {{name}} solvers."""
    yield miocore.SolverRecord(solver={{Name}}Direct())


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """Where ``KernelInfo.source`` names of this plugin are looked up."""
    yield miocore.KernelSourceRecord(name="{{name}}", path=KERNELS)
