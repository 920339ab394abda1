"""miocore: find and run the fastest convolution algorithm for a problem.

The public names are listed in ``__all__``; see ``docs/overview.md`` for a tour.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miocore import logs as _logs
from miocore.env import FindEnforce, FindMode
from miocore.errors import (
    BackendUnavailableError,
    CompileError,
    DatabaseError,
    InvalidArgumentError,
    InvalidDescriptorError,
    InvalidEnvironmentError,
    InvalidProblemError,
    MiocoreError,
    NoApplicableSolverError,
    NotApplicableError,
    PluginError,
    SolverFailedError,
    UnknownSolverError,
    WorkspaceError,
)
from miocore.find.handle import Handle
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.descriptors import ConvolutionDescriptor, TensorDescriptor
from miocore.problem.dtypes import DataType
from miocore.solver.hookspecs import (
    BuiltKernel,
    HeuristicRecord,
    KernelBuilder,
    KernelSourceRecord,
    SolverRecord,
    hookimpl,
)
from miocore.solver.interface import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvSolution,
    DeviceInfo,
    ExecutionContext,
    InvokeParams,
    Invoker,
    InvokerFactory,
    KernelInfo,
    PerfConfig,
    Solver,
    TunableSolver,
    not_applicable,
)
from miocore.solver.lazy import lazy_exports
from miocore.solver.registry import PluginInfo, RegisteredSolver, Registry, default_registry
from miocore.solver.results import AlgorithmPerf, FindReport, Solution, Solutions, Timing

if TYPE_CHECKING:
    from miocore import reference

    __version__: str

_logs.configure_from_env()


def __getattr__(name: str) -> Any:
    """``reference`` (numpy's float64 convolution) and ``__version__`` (read from the installed
    distribution's metadata) load on first use: a FindDb hit in a new process needs neither,
    and their imports (numpy, importlib.metadata) would be most of its cost."""
    if name == "reference":
        import miocore.reference as module

        return module
    if name == "__version__":
        from importlib import metadata

        try:
            version = metadata.version("miocore")
        except metadata.PackageNotFoundError:  # running from a source tree without installing
            version = "0+unknown"
        globals()["__version__"] = version
        return version
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def solvers() -> list[RegisteredSolver]:
    """The installed solvers, with the plugin, distribution and version that provide each."""
    return list(default_registry().solvers)


__all__ = [
    "APPLICABLE",
    "Algorithm",
    "AlgorithmPerf",
    "Applicability",
    "BackendUnavailableError",
    "BuiltKernel",
    "CompileError",
    "ConvProblem",
    "ConvSolution",
    "ConvolutionDescriptor",
    "DataType",
    "DatabaseError",
    "DeviceInfo",
    "Direction",
    "ExecutionContext",
    "FindEnforce",
    "FindMode",
    "FindReport",
    "Handle",
    "HeuristicRecord",
    "InvalidArgumentError",
    "InvalidDescriptorError",
    "InvalidEnvironmentError",
    "InvalidProblemError",
    "InvokeParams",
    "Invoker",
    "InvokerFactory",
    "KernelBuilder",
    "KernelInfo",
    "KernelSourceRecord",
    "MiocoreError",
    "NoApplicableSolverError",
    "NotApplicableError",
    "PerfConfig",
    "PluginError",
    "PluginInfo",
    "RegisteredSolver",
    "Registry",
    "Solution",
    "Solutions",
    "Solver",
    "SolverFailedError",
    "SolverRecord",
    "TensorDescriptor",
    "Timing",
    "TunableSolver",
    "UnknownSolverError",
    "WorkspaceError",
    "__version__",
    "hookimpl",
    "lazy_exports",
    "not_applicable",
    "reference",
    "solvers",
]
