"""The ``igemm`` entry point: registers the three implicit-GEMM solvers with miocore."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_igemm.solvers import SOLVERS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """One record per direction: ``igemm.fwd``, ``igemm.bwd``, ``igemm.wrw``."""
    for solver in SOLVERS:
        yield miocore.SolverRecord(solver=solver)
