"""The plugin module named by the ``miocore`` entry point: registers the FFT solver."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore import SolverRecord
from miocore_fft.solver import FftOverlapSave


@miocore.hookimpl
def miocore_solvers() -> Iterator[SolverRecord]:
    """Yield the FFT family's solvers."""
    yield SolverRecord(solver=FftOverlapSave())
