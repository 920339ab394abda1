"""The solver contract suite catches each kind of broken solver, and passes a correct one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import miocore
from miocore import (
    APPLICABLE,
    Algorithm,
    ConvProblem,
    ConvSolution,
    Direction,
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    TunableSolver,
    not_applicable,
    reference,
)
from miocore.testing import check_contract as exported_check_contract
from miocore.testing.contract import (
    BUILTIN_SHAPES,
    Contract,
    ContractViolation,
    builtin_problems,
    check_contract,
    generate_problems,
    spy_on,
)


class GoodSolver(TunableSolver):
    """Correct in every direction: computes through the reference, stages the result in its
    workspace (so the workspace rule has something to check), declines 3-D problems."""

    name = "contract.good"
    algorithm = Algorithm.DIRECT

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        if len(problem.in_spatial) != 2:
            return not_applicable("2-D problems only")
        return APPLICABLE

    def perf_config_space(
        self, ctx: ExecutionContext, problem: ConvProblem
    ) -> Iterator[PerfConfig]:
        yield PerfConfig(copies=1)
        yield PerfConfig(copies=2)

    def default_perf_config(self, ctx: ExecutionContext, problem: ConvProblem) -> PerfConfig:
        return PerfConfig(copies=1)

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        out = getattr(problem, problem.direction.output_tensor)
        return out.element_space * 4  # one float32 staging copy of the output

    def wti(self, ctx: ExecutionContext, problem: ConvProblem) -> float:
        return 0.25

    def compute(self, params: InvokeParams, workspace: np.ndarray) -> None:
        """Stage the reference result in the workspace, then copy it out."""
        p = params.problem
        out_name = p.direction.output_tensor
        inputs = {k: getattr(params, k) for k in ("x", "w", "y") if k != out_name}
        result = reference.convolution(p, **inputs).astype(np.float32).reshape(-1)
        staged = workspace.view(np.float32)[: result.size]  # raises when the workspace is short
        if staged.size != result.size:
            raise miocore.WorkspaceError("workspace too small", field="workspace", value=None)
        staged[...] = result
        out = getattr(params, out_name)
        out[...] = staged.reshape(out.shape).astype(out.dtype)

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: InvokeParams) -> None:
                self.compute(params, params.workspace)

            return invoker

        return ConvSolution(
            solver=self.name,
            workspace_size=self.workspace_size(ctx, problem, perf_config),
            invoker_factory=factory,
            perf_config=perf_config,
        )


def _contract(solver: Any, **kwargs: Any) -> Contract:
    kwargs.setdefault("use_corpus", False)
    kwargs.setdefault("per_direction", 3)
    kwargs.setdefault("inapplicable", 2)
    return Contract(solver, **kwargs)


def test_a_correct_solver_keeps_every_rule(tmp_path: Any) -> None:
    report = _contract(GoodSolver()).check_all()
    assert report.directions == ("forward", "backward_data", "backward_weights")
    assert report.problems == 9 and report.inapplicable == 2
    assert report.perf_configs == 6 and report.rejected_perf_configs == 0
    assert "contract.good: contract kept on 9 problems" in report.summary()
    assert exported_check_contract is check_contract


def test_generated_problems_cover_every_kind() -> None:
    problems = builtin_problems()
    assert len(problems) == 3 * len(BUILTIN_SHAPES)
    kinds = {
        (p.direction, p.dtype, p.x.layout, len(p.in_spatial), p.groups > 1, p.is_depthwise)
        for p in problems
    }
    assert {k[0] for k in kinds} == set(Direction)
    assert {k[1].value for k in kinds} == {"float32", "float16", "bfloat16"}
    assert {k[2] for k in kinds} >= {"NCHW", "NHWC", "NCDHW", "NDHWC"}
    assert any(k[4] for k in kinds) and any(k[5] for k in kinds)
    assert any(any(s > 1 for s in p.conv.strides) for p in problems)
    assert any(any(d > 1 for d in p.conv.dilations) for p in problems)
    # Split by the solver's own answers, with its reasons.
    found = generate_problems(GoodSolver(), per_direction=2, inapplicable=3, use_corpus=False)
    assert all(len(v) == 2 for v in found.applicable.values())
    assert [reason for _, reason in found.inapplicable] == ["2-D problems only"] * 3


def test_extra_problems_are_asked_first() -> None:
    mine = ConvProblem.from_sizes(
        "forward", n=3, c=5, k=7, in_spatial=(4, 4), filter_spatial=(1, 1)
    )
    found = generate_problems(GoodSolver(), extra=[mine], use_corpus=False, per_direction=2)
    assert found.applicable[Direction.FORWARD][0] is mine


# -- one broken solver per rule -----------------------------------------------------------------


class BadName(GoodSolver):
    name = "Not A Dotted Name"


class BadRevision(GoodSolver):
    revision = "2"  # type: ignore[assignment]  # a revision is a whole number


class ImpureApplicability(GoodSolver):
    def __init__(self) -> None:
        self.calls = 0

    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        self.calls += 1  # hidden state: the answer depends on how often it was asked
        return not_applicable("tired") if self.calls > 60 else APPLICABLE


class SlowApplicability(GoodSolver):
    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        time.sleep(0.004)
        return super().is_applicable(ctx, problem)


class SilentDecline(GoodSolver):
    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        return miocore.Applicability(False, "") if problem.groups > 1 else APPLICABLE


class RaisingApplicability(GoodSolver):
    def is_applicable(self, ctx: ExecutionContext, problem: ConvProblem) -> Any:
        if problem.dtype is miocore.DataType.BFLOAT16:
            raise ValueError("bf16 surprises me")
        return APPLICABLE


class UnderstatedWorkspace(GoodSolver):
    def workspace_size(self, ctx: Any, problem: ConvProblem, perf_config: Any = None) -> int:
        return super().workspace_size(ctx, problem, perf_config) // 2


class DisagreeingWorkspace(GoodSolver):
    def get_solution(self, ctx: Any, problem: ConvProblem, perf_config: Any = None) -> Any:
        import dataclasses

        solution = super().get_solution(ctx, problem, perf_config)
        return dataclasses.replace(solution, workspace_size=solution.workspace_size + 8)


class SilentShortWorkspace(GoodSolver):
    """Given less workspace than it asked for, writes zeros instead of failing."""

    def compute(self, params: InvokeParams, workspace: np.ndarray) -> None:
        needed = self.workspace_size(None, params.problem)  # type: ignore[arg-type]
        if workspace is None or workspace.nbytes < needed:
            getattr(params, params.problem.direction.output_tensor)[...] = 0
            return
        super().compute(params, workspace)


class WrongConfig(GoodSolver):
    """Accepts copies=2, which computes the wrong answer; accepts stale configs too."""

    def compute(self, params: InvokeParams, workspace: np.ndarray) -> None:
        super().compute(params, workspace)
        if self.current == 2:
            getattr(params, params.problem.direction.output_tensor)[...] *= 2

    def get_solution(self, ctx: Any, problem: ConvProblem, perf_config: Any = None) -> Any:
        self.current = (perf_config or {}).get("copies", 1)
        return super().get_solution(ctx, problem, perf_config)


class StaleConfigAccepted(GoodSolver):
    def is_valid_perf_config(self, ctx: Any, problem: ConvProblem, config: PerfConfig) -> bool:
        return True


class InvalidDefault(GoodSolver):
    def default_perf_config(self, ctx: Any, problem: ConvProblem) -> PerfConfig:
        return PerfConfig(copies=3)


class WrongBackwardWeights(GoodSolver):
    def compute(self, params: InvokeParams, workspace: np.ndarray) -> None:
        super().compute(params, workspace)
        if params.problem.direction is Direction.BACKWARD_WEIGHTS:
            params.w[(0,) * params.w.ndim] += 1.0


class ForgetsAnElement(GoodSolver):
    def compute(self, params: InvokeParams, workspace: np.ndarray) -> None:
        out = getattr(params, params.problem.direction.output_tensor)
        keep = out[(0,) * out.ndim].copy()
        super().compute(params, workspace)
        out[(0,) * out.ndim] = keep  # the NaN the suite filled in stays


class MisnamedSolution(GoodSolver):
    def get_solution(self, ctx: Any, problem: ConvProblem, perf_config: Any = None) -> Any:
        import dataclasses

        return dataclasses.replace(
            super().get_solution(ctx, problem, perf_config), solver="other.name"
        )


class UnknownNote(GoodSolver):
    def notes_for(self, ctx: Any, problem: ConvProblem, perf_config: Any = None) -> frozenset:
        return frozenset({"magic"})


class ListsAStaleSetting(GoodSolver):
    def find_configs(self, ctx: Any, problem: ConvProblem) -> list[PerfConfig]:
        return [PerfConfig(copies=1), PerfConfig(copies=9)]


def _wti(value: float) -> type[GoodSolver]:
    return type("Wti", (GoodSolver,), {"wti": lambda self, ctx, problem: value})


@pytest.mark.parametrize(
    ("solver", "check", "rule", "words"),
    [
        (BadName(), "check_registration", "registration", "dotted identifier"),
        (BadRevision(), "check_registration", "registration", "not a whole number"),
        (ImpureApplicability(), "check_is_applicable", "is_applicable", "must be pure"),
        (SlowApplicability(), "check_is_applicable", "is_applicable", "budget"),
        (SilentDecline(), "check_is_applicable", "is_applicable", "must say why"),
        (RaisingApplicability(), "check_is_applicable", "is_applicable", "bf16 surprises me"),
        (UnderstatedWorkspace(), "check_workspace", "workspace_size", "raised WorkspaceError"),
        (DisagreeingWorkspace(), "check_workspace", "workspace_size", "but its solution says"),
        (SilentShortWorkspace(), "check_workspace", "workspace_size", "neither raised nor"),
        (WrongConfig(), "check_perf_configs", "perf_config", '{"copies":2}'),
        (StaleConfigAccepted(), "check_perf_configs", "perf_config", "stale PerfDb entry"),
        (InvalidDefault(), "check_perf_configs", "perf_config", "its default"),
        (ForgetsAnElement(), "check_correctness", "correctness", "relative error nan"),
        (MisnamedSolution(), "check_correctness", "correctness", "'other.name'"),
        (_wti(-1.0)(), "check_wti", "wti", "in (0, 1]"),
        (_wti(float("nan"))(), "check_wti", "wti", "nan"),
        (_wti(3.0)(), "check_wti", "wti", "3.0"),
        (UnknownNote(), "check_notes_and_find_configs", "notes_for", "'magic'"),
        (ListsAStaleSetting(), "check_notes_and_find_configs", "find_configs", "copies"),
    ],
    ids=lambda v: v if isinstance(v, str) else type(v).__name__,
)
def test_each_broken_solver_is_caught(solver: Any, check: str, rule: str, words: str) -> None:
    contract = _contract(solver)
    with pytest.raises(ContractViolation) as info:
        getattr(contract, check)()
    error = info.value
    assert isinstance(error, miocore.MiocoreError) and isinstance(error, AssertionError)
    assert error.rule == rule and error.field == "solver" and error.value == solver.name
    assert f"breaks the {rule} rule" in str(error) and words in str(error), str(error)


def test_a_wrong_direction_is_caught_in_that_direction_only() -> None:
    contract = _contract(WrongBackwardWeights())
    contract.check_correctness("forward")
    contract.check_correctness("backward_data")
    with pytest.raises(ContractViolation) as info:
        contract.check_correctness("backward_weights")
    assert info.value.problem is not None
    assert info.value.problem.direction is Direction.BACKWARD_WEIGHTS
    assert info.value.problem.key in str(info.value)


def test_unknown_wti_may_be_allowed() -> None:
    _contract(_wti(-1.0)(), require_wti=False).check_wti()


def test_a_solver_that_applies_to_nothing_is_told_to_bring_problems() -> None:
    class Nothing(GoodSolver):
        def is_applicable(self, ctx: Any, problem: ConvProblem) -> Any:
            return not_applicable("never")

    with pytest.raises(ContractViolation, match="pass problems="):
        _contract(Nothing()).check_correctness()


def test_tolerance_may_depend_on_the_perf_config() -> None:
    def bound(problem: ConvProblem, config: PerfConfig | None) -> float:
        return 10.0 if config is not None and config["copies"] == 2 else 1e-5

    _contract(WrongConfig(), tolerance=bound).check_perf_configs()
    with pytest.raises(ContractViolation):
        _contract(WrongConfig(), tolerance={miocore.DataType.FLOAT32: 1e-5}).check_perf_configs()


def test_the_spy_sees_every_stage_and_keeps_the_answers() -> None:
    inner = GoodSolver()
    spy = spy_on(inner)
    assert isinstance(spy, TunableSolver) and spy.name == inner.name
    p = ConvProblem.from_sizes("forward", n=1, c=2, k=2, in_spatial=(4, 4), filter_spatial=(3, 3))
    handle = miocore.Handle("cpu", registry=miocore.Registry.from_solvers([spy]))
    assert handle.get_solution_workspace_size(p, spy.name) == 4 * 2 * 2 * 2
    handle.immediate(p, spy.name, **reference.random_inputs(p, 0))
    assert [spy.calls_for(p, s) for s in ("workspace_size", "get_solution", "invoker")] == [1, 1, 1]


def test_the_never_run_check_catches_a_handle_that_runs_declined_problems(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Simulate a core regression: immediate mode skips the applicability check.
    from miocore.find.candidates import Candidates

    monkeypatch.setattr(
        Candidates,
        "applicable",
        lambda self, problem, solver: self.state.registry.get(solver),
    )
    contract = _contract(GoodSolver())
    with pytest.raises(ContractViolation) as info:
        contract.check_inapplicable_never_run()
    assert info.value.rule == "inapplicable"
    assert "accepted a declined problem" in str(info.value) or "was called anyway" in str(
        info.value
    )
