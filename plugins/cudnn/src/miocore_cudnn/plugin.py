"""The ``cudnn`` plugin module named by the ``miocore`` entry point."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_cudnn.solvers import SOLVERS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Register ``cudnn.eng0`` .. ``cudnn.eng99``, one solver per cuDNN engine id. They apply
    on the cuda backend only, where ``import cudnn`` works and a cuDNN handle can be made."""
    for solver in SOLVERS:
        yield miocore.SolverRecord(solver=solver)
