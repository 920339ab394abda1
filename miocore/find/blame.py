"""Naming the culprit: a solver's failure is reported with its plugin, and find goes on."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from miocore.errors import MiocoreError, SolverFailedError
from miocore.solver.registry import RegisteredSolver
from miocore.solver.results import FindReport

log = logging.getLogger("miocore.find")


@contextlib.contextmanager
def naming_culprit(reg: RegisteredSolver, stage: str) -> Iterator[None]:
    """Re-raise a solver's own exception as SolverFailedError naming its plugin.

    miocore's own errors (a WorkspaceError a solver raises on purpose, say) pass unchanged.
    """
    try:
        yield
    except MiocoreError:
        raise
    except Exception as exc:
        raise solver_failure(reg, stage, exc) from exc


def solver_failure(reg: RegisteredSolver, stage: str, exc: BaseException) -> SolverFailedError:
    """The error that names ``reg``'s plugin for its failure in ``stage`` (the run paths keep
    their own ``try``: a context manager per call costs more than the call's checks)."""
    label = f"{reg.plugin} ({reg.distribution} {reg.version})"
    return SolverFailedError(reg.name, stage, exc, plugin=label)


def record_failure(
    report: FindReport, reg: RegisteredSolver, stage: str, exc: BaseException
) -> None:
    """List ``reg`` in ``report.failed`` with its plugin and log it; the caller skips it."""
    message = (
        f"{stage} raised {type(exc).__name__}: {exc} "
        f"(plugin {reg.plugin}, {reg.distribution} {reg.version})"
    )
    report.failed[reg.name] = message
    log.warning("solver %s (%s %s) %s; skipped", reg.name, reg.distribution, reg.version, message)
