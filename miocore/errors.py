"""Every error miocore raises on purpose derives from :class:`MiocoreError`.

Errors that concern one input name it: ``field`` is the argument, descriptor attribute or
environment variable at fault and ``value`` is what was given, so a caller can report
``x.lengths=(1, 2)`` instead of a bare traceback.
"""

from __future__ import annotations

from typing import Any

_MISSING = object()


class MiocoreError(Exception):
    """Base class of all miocore errors.

    ``field`` and ``value`` are set when the error concerns one named input.
    """

    def __init__(self, message: str, *, field: str | None = None, value: Any = _MISSING) -> None:
        self.field = field
        self.value = None if value is _MISSING else value
        if field is not None and value is not _MISSING:
            message = f"{field}={value!r}: {message}"
        elif field is not None:
            message = f"{field}: {message}"
        super().__init__(message)


class InvalidDescriptorError(MiocoreError, ValueError):
    """A tensor or convolution descriptor was built from invalid values."""


class InvalidProblemError(MiocoreError, ValueError):
    """The descriptors of a problem do not fit together (channels, groups, output size, ...)."""


class InvalidArgumentError(MiocoreError, ValueError):
    """A call argument (array, option, name) does not match what the call needs."""


class WorkspaceError(InvalidArgumentError):
    """A workspace is missing or smaller than the solution needs."""


class UnknownSolverError(MiocoreError, KeyError):
    """No installed and enabled solver has the given name or id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class NotApplicableError(MiocoreError):
    """The named solver cannot solve this problem; the message says why."""


class NoApplicableSolverError(MiocoreError):
    """No installed solver can solve the problem (or none within the given limits)."""


class InvalidEnvironmentError(MiocoreError, ValueError):
    """An ``MIOCORE_*`` environment variable holds a value miocore does not accept."""


class PluginError(MiocoreError):
    """A plugin is malformed: bad registration record, duplicate solver name, bad solution."""


class SolverFailedError(MiocoreError):
    """A solver raised while it was asked a question or run.

    Carries the solver's name, the stage (``is_applicable``, ``get_solution``, ``run``, ...),
    the plugin that provides it (``name (distribution version)``) and the original exception.
    """

    def __init__(
        self, solver: str, stage: str, cause: BaseException, plugin: str | None = None
    ) -> None:
        self.solver = solver
        self.stage = stage
        self.cause = cause
        self.plugin = plugin
        origin = f" of plugin {plugin}" if plugin else ""
        super().__init__(
            f"solver {solver!r}{origin} failed in {stage}: {type(cause).__name__}: {cause}"
        )
        self.field, self.value = "solver", solver


class DatabaseError(MiocoreError):
    """A database could not be read or written (after recovery was tried)."""


class BackendUnavailableError(MiocoreError):
    """The requested device backend is not installed or has no device."""


class CompileError(MiocoreError):
    """A kernel failed to compile; the message carries the numbered source and compiler log."""
