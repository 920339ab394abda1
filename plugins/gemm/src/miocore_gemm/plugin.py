"""The ``gemm`` plugin module named by the ``miocore`` entry point."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_gemm.solvers import SOLVERS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Register ``gemm.1x1`` and ``gemm.im2col``."""
    for solver in SOLVERS:
        yield miocore.SolverRecord(solver=solver)
