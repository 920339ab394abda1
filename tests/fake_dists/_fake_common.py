"""A correct little solver the fake plugins build on (through the float64 reference)."""

from __future__ import annotations

from typing import Any

import numpy as np

import miocore
from miocore import APPLICABLE, Algorithm, ConvSolution, Solver, reference


class FakeSolver(Solver):
    """Correct in every direction; subclasses break one thing."""

    name = "fake.base"
    algorithm = Algorithm.DIRECT
    is_dynamic = True

    def is_applicable(self, ctx: Any, problem: miocore.ConvProblem) -> Any:
        return APPLICABLE

    def wti(self, ctx: Any, problem: miocore.ConvProblem) -> float:
        return 0.5

    def get_solution(
        self, ctx: Any, problem: miocore.ConvProblem, perf_config: Any = None
    ) -> ConvSolution:
        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: Any) -> None:
                p = params.problem
                out = p.direction.output_tensor
                inputs = {k: getattr(params, k) for k in ("x", "w", "y") if k != out}
                result = reference.convolution(p, **inputs)
                getattr(params, out)[...] = result.astype(np.float32)

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)
