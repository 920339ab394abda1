"""Solvers registered by the core tests, so the find machinery is tested without any plugin.

They compute the right answer (through the float64 reference, rounded to the output dtype)
and take a controlled amount of *virtual* time: instead of sleeping they advance
:data:`VIRTUAL_CLOCK`, which the tests' conftest adds to what the CPU backend measures. Real
sleeps of a few milliseconds lose their order when the machine is busy; the virtual costs,
scaled by :data:`TIME_SCALE`, stay far above any scheduling noise and cost no real time.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from miocore import reference
from miocore.problem import ConvProblem
from miocore.solver import (
    APPLICABLE,
    Algorithm,
    ConvSolution,
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    Solver,
    TunableSolver,
    not_applicable,
)

#: Seconds of virtual time per declared second of delay.
TIME_SCALE = 20.0


class VirtualClock:
    """Seconds the fake solvers have "spent"; read by the tests' timing hook."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def spend(self, seconds: float) -> None:
        """Advance by ``seconds`` of declared delay (times TIME_SCALE)."""
        self.seconds += seconds * TIME_SCALE


VIRTUAL_CLOCK = VirtualClock()


def _compute(params: InvokeParams) -> None:
    p = params.problem
    out = p.direction.output_tensor
    inputs = {k: getattr(params, k) for k in ("x", "w", "y") if k != out}
    getattr(params, out)[...] = reference.convolution(p, **inputs).astype(
        getattr(params, out).dtype
    )


class TimedSolver(Solver):
    """A correct solver that sleeps ``delay_s`` per run and needs ``workspace`` bytes."""

    def __init__(
        self,
        name: str,
        *,
        delay_s: float = 0.0,
        algorithm: Algorithm = Algorithm.DIRECT,
        dynamic: bool = False,
        workspace: int = 0,
        wti: float = -1.0,
        applies_to: str | None = None,
    ) -> None:
        self.name = name
        self.algorithm = algorithm
        self.is_dynamic = dynamic
        self.delay_s = delay_s
        self.workspace = workspace
        self._wti = wti
        self.applies_to = applies_to
        self.runs = 0

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        if self.applies_to is not None and problem.direction.value != self.applies_to:
            return not_applicable(f"only {self.applies_to}")
        return APPLICABLE

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        return self.workspace

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        return self._wti

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: InvokeParams) -> None:
                if self.workspace:
                    assert (
                        params.workspace is not None and params.workspace.nbytes >= self.workspace
                    )
                self.runs += 1
                VIRTUAL_CLOCK.spend(self.delay_s)
                _compute(params)

            return invoker

        return ConvSolution(
            solver=self.name, workspace_size=self.workspace, invoker_factory=factory
        )


class TunableTimedSolver(TunableSolver):
    """A tunable solver whose run time depends on its ``level`` config: level 3 is fastest."""

    name = "test.tunable"
    algorithm = Algorithm.IMPLICIT_GEMM
    levels = (1, 2, 3, 4)

    def __init__(
        self,
        listed: Iterable[int] = (),
        wrong: int | None = None,
        workspaces: dict[int, int] | None = None,
    ) -> None:
        self.configs_run: list[int] = []
        self.listed = tuple(listed)
        self.wrong = wrong
        self.workspaces = workspaces or {}

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        level = (perf_config or self.default_perf_config(ctx, problem))["level"]
        return self.workspaces.get(level, 0)

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        return APPLICABLE

    def find_configs(self, ctx: ExecutionContext, problem: ConvProblem) -> list[PerfConfig]:
        return [PerfConfig(level=v) for v in self.listed]

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterable[PerfConfig]:
        return [PerfConfig(level=v) for v in self.levels]

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        return PerfConfig(level=1)

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        level = (perf_config or self.default_perf_config(ctx, problem))["level"]
        delay = 0.002 + 0.004 * abs(level - 3)

        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: InvokeParams) -> None:
                self.configs_run.append(level)
                VIRTUAL_CLOCK.spend(delay)
                _compute(params)
                if level == self.wrong:  # a fast setting with a wrong answer
                    out = getattr(params, params.problem.direction.output_tensor)
                    out[...] = out * 1.5 + 1.0

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=self.workspaces.get(level, 0),
            invoker_factory=factory,
            perf_config=perf_config,
        )


class BrokenSolver(Solver):
    """Raises in the method named by ``stage``."""

    algorithm = Algorithm.FFT

    def __init__(self, stage: str, name: str | None = None) -> None:
        self.stage = stage
        self.name = name or f"test.broken_{stage}"

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        if self.stage == "is_applicable":
            raise RuntimeError("boom in is_applicable")
        return APPLICABLE

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        if self.stage == "get_solution":
            raise RuntimeError("boom in get_solution")

        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: InvokeParams) -> None:
                raise RuntimeError("boom in run")

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


def small_problem(
    direction: str = "forward", dtype: str = "float32", layout: str = "NCHW", groups: int = 1
) -> ConvProblem:
    """A tiny 3x3 problem."""
    return ConvProblem.from_sizes(
        direction,
        n=2,
        c=4 * groups,
        k=4 * groups,
        in_spatial=(6, 6),
        filter_spatial=(3, 3),
        pads=(1, 1),
        groups=groups,
        dtype=dtype,
        layout=layout,
    )


def buffers(problem: ConvProblem, seed: int = 0) -> dict[str, np.ndarray]:
    """Random x, w, y for ``problem``."""
    return reference.random_inputs(problem, seed)


class RecordedGraph:
    """What a GPU backend's ``capture`` returns, emulated: replay runs the recorded call."""

    def __init__(self, run: Any, capturing: bool = False) -> None:
        self.run = run
        self.replays = 0
        self.capturing = capturing  # the stream is in the caller's own capture

    def replay(self) -> bool:
        if self.capturing:
            return False
        self.replays += 1
        self.run()
        return True
