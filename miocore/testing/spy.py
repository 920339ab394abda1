"""A spy around a solver: records every sizing, build and run, so a test can check that find
never touches a problem the solver declined (``Contract.check_inapplicable_never_run``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from miocore.problem.conv import ConvProblem
from miocore.solver.interface import (
    ConvSolution,
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    Solver,
    TunableSolver,
)
from miocore.values import evolve


class _SpyMixin:
    """Records ``(stage, problem key)`` for every sizing, build and run of the wrapped solver."""

    inner: Solver
    log: list[tuple[str, str, str]]

    def calls_for(self, problem: ConvProblem, stage: str) -> int:
        """How many times ``stage`` was reached for ``problem`` (canonical)."""
        ident = (problem.key, problem.network_config)
        return sum(1 for s, k, n in self.log if s == stage and (k, n) == ident)

    def _note(self, stage: str, problem: ConvProblem) -> None:
        self.log.append((stage, problem.key, problem.network_config))

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        return self.inner.is_applicable(ctx, problem)

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        self._note("workspace_size", problem)
        return self.inner.workspace_size(ctx, problem, perf_config)

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        return self.inner.wti(ctx, problem)

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        self._note("get_solution", problem)
        solution = self.inner.get_solution(ctx, problem, perf_config)
        factory = solution.invoker_factory

        def spying_factory(kernels: Sequence[Any]) -> Any:
            invoker = factory(kernels)

            def run(handle: Any, params: InvokeParams) -> None:
                self._note("invoker", params.problem)
                invoker(handle, params)

            return run

        return evolve(solution, invoker_factory=spying_factory)

    def perf_config_space(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        return self.inner.perf_config_space(ctx, problem)  # type: ignore[attr-defined]

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        return self.inner.default_perf_config(ctx, problem)  # type: ignore[attr-defined]

    def is_valid_perf_config(
        self, ctx: ExecutionContext, problem: ConvProblem, config: PerfConfig
    ) -> bool:
        return self.inner.is_valid_perf_config(ctx, problem, config)  # type: ignore[attr-defined]


def spy_on(solver: Solver) -> Any:
    """A solver with ``solver``'s name and answers that records every sizing, build and run
    (``spy.calls_for(problem, "get_solution")``); tunable when ``solver`` is."""
    base: type[Solver] = TunableSolver if isinstance(solver, TunableSolver) else Solver
    cls = type(
        f"Spy_{type(solver).__name__}",
        (_SpyMixin, base),
        {
            "name": solver.name,
            "algorithm": solver.algorithm,
            "is_dynamic": solver.is_dynamic,
            "backends": solver.backends,
        },
    )
    spy = cls()
    spy.inner = solver
    spy.log = []
    return spy
