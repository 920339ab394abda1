"""miocore's solver contract suite on the implicit-GEMM solvers, one direction each."""

from __future__ import annotations

from miocore_igemm import (
    ImplicitGemmBackwardData,
    ImplicitGemmBackwardWeights,
    ImplicitGemmForward,
)

from miocore.testing import SolverContract


class TestImplicitGemmForwardContract(SolverContract):
    """igemm.fwd."""

    solver = ImplicitGemmForward()


class TestImplicitGemmBackwardDataContract(SolverContract):
    """igemm.bwd."""

    solver = ImplicitGemmBackwardData()


class TestImplicitGemmBackwardWeightsContract(SolverContract):
    """igemm.wrw."""

    solver = ImplicitGemmBackwardWeights()
