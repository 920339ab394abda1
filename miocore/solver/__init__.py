"""The solver contract and where solvers come from.

``interface`` is what a plugin implements (``Solver``, ``ConvSolution``, ``KernelInfo``,
``Invoker``, ``PerfConfig``, the execution context), ``results`` what find returns
(``Solution``, ``Timing``, ``FindReport``), ``hookspecs`` the pluggy hooks a plugin registers
through, ``registry`` the plugin manager that collects them and ``entry_points`` its scan of the
installed distributions (cached while the installation is unchanged). This room imports the problem
model and ``miocore.errors``/``miocore.env``/``miocore.logs`` only.
"""

from miocore.solver.interface import (
    APPLICABLE,
    MATH_MODES,
    Algorithm,
    Applicability,
    Ceilings,
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
    normalize_applicability,
    not_applicable,
)

__all__ = [
    "APPLICABLE",
    "MATH_MODES",
    "Algorithm",
    "Applicability",
    "Ceilings",
    "ConvSolution",
    "DeviceInfo",
    "ExecutionContext",
    "InvokeParams",
    "Invoker",
    "InvokerFactory",
    "KernelInfo",
    "PerfConfig",
    "Solver",
    "TunableSolver",
    "normalize_applicability",
    "not_applicable",
]
