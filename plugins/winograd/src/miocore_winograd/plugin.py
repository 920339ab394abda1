"""miocore plugin entry point of the Winograd family."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_winograd.solver import WinogradRxS


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """The Winograd solvers."""
    yield miocore.SolverRecord(solver=WinogradRxS())
