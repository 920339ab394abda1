"""miocore's solver contract suite on the direct solvers (direct.taps, direct.naive)."""

from __future__ import annotations

from miocore_direct import NaiveDirectSolver, TapsDirectSolver

from miocore.testing import SolverContract


class TestTapsDirectContract(SolverContract):
    """direct.taps: per-tap BLAS, tunable."""

    solver = TapsDirectSolver()


class TestNaiveDirectContract(SolverContract):
    """direct.naive: the universal fallback."""

    solver = NaiveDirectSolver()
