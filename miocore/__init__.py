"""miocore: find and run the fastest convolution algorithm for a problem.

The public names are listed in ``__all__``; see ``docs/overview.md`` for a tour.
"""

from __future__ import annotations

from importlib import metadata as _metadata

from miocore import reference
from miocore.descriptors import ConvolutionDescriptor, TensorDescriptor
from miocore.dtypes import DataType
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
from miocore.hookspecs import HeuristicRecord, KernelSourceRecord, SolverRecord, hookimpl
from miocore.problem import ConvProblem, Direction
from miocore.registry import PluginInfo, RegisteredSolver, Registry, default_registry
from miocore.solver import (
    APPLICABLE,
    Algorithm,
    Applicability,
    ConvSolution,
    DeviceInfo,
    ExecutionContext,
    Invoker,
    InvokerFactory,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    Solver,
    TunableSolver,
    not_applicable,
)

try:
    __version__ = _metadata.version("miocore")
except _metadata.PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"


def solvers() -> list[RegisteredSolver]:
    """The installed solvers, with the plugin, distribution and version that provide each."""
    return list(default_registry().solvers)


__all__ = [
    "APPLICABLE",
    "Algorithm",
    "Applicability",
    "BackendUnavailableError",
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
    "HeuristicRecord",
    "InvalidArgumentError",
    "InvalidDescriptorError",
    "InvalidEnvironmentError",
    "InvalidProblemError",
    "InvokeParams",
    "Invoker",
    "InvokerFactory",
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
    "Solver",
    "SolverFailedError",
    "SolverRecord",
    "TensorDescriptor",
    "TunableSolver",
    "UnknownSolverError",
    "WorkspaceError",
    "__version__",
    "hookimpl",
    "not_applicable",
    "reference",
    "solvers",
]
