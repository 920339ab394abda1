"""The ``miocore`` entry point of the direct family: registers its solvers."""

from __future__ import annotations

from collections.abc import Iterator

import miocore
from miocore_direct.depthwise import DepthwiseDirectSolver
from miocore_direct.gpu import KERNEL_DIR, GpuNaiveDirectSolver
from miocore_direct.gpu_depthwise import GpuDepthwiseSolver
from miocore_direct.gpu_tiled import GpuTiledDirectSolver
from miocore_direct.grouped import GroupedDirectSolver
from miocore_direct.naive import NaiveDirectSolver
from miocore_direct.taps import TapsDirectSolver


@miocore.hookimpl
def miocore_solvers() -> Iterator[miocore.SolverRecord]:
    """Yield the direct family's solvers: depthwise, grouped, per-tap BLAS, naive, GPU."""
    yield miocore.SolverRecord(solver=DepthwiseDirectSolver())
    yield miocore.SolverRecord(solver=GroupedDirectSolver())
    yield miocore.SolverRecord(solver=TapsDirectSolver())
    yield miocore.SolverRecord(solver=NaiveDirectSolver())
    yield miocore.SolverRecord(solver=GpuNaiveDirectSolver())
    yield miocore.SolverRecord(solver=GpuTiledDirectSolver())
    yield miocore.SolverRecord(solver=GpuDepthwiseSolver())


@miocore.hookimpl
def miocore_kernel_sources() -> Iterator[miocore.KernelSourceRecord]:
    """The GPU kernel sources of the direct family (``direct/naive_conv.cu``)."""
    yield miocore.KernelSourceRecord(name="direct", path=KERNEL_DIR)
