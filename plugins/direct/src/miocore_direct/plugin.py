"""The ``miocore`` entry point of the direct family: registers its solvers."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_direct.naive import NaiveDirectSolver
from miocore_direct.taps import TapsDirectSolver


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Yield the direct family's solvers: the per-tap BLAS solver and the naive last resort."""
    yield miocore.SolverRecord(solver=TapsDirectSolver())
    yield miocore.SolverRecord(solver=NaiveDirectSolver())
