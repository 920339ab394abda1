"""Solvers with ``deferred_setup``: their config and workspace (a vendor library's plan build)
are asked for only when find measures them, when immediate mode ranks them, or when a
workspace limit needs the size; a refusal then counts as not applicable."""

from __future__ import annotations

from typing import Any

from fake_solvers import TimedSolver, small_problem

from miocore import Handle, NotApplicableError, Registry
from miocore.problem import ConvProblem
from miocore.solver import ExecutionContext, PerfConfig


class DeferredSolver(TimedSolver):
    """Counts how often its setup (the workspace) is asked for; may refuse there."""

    deferred_setup = True

    def __init__(self, name: str, *, refuse: bool = False, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.refuse = refuse
        self.setups = 0

    def workspace_size(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> int:
        self.setups += 1
        if self.refuse:
            raise NotApplicableError(
                "the library refuses every plan of this problem", field="solver", value=self.name
            )
        return self.workspace


def _handle(*solvers: TimedSolver) -> Handle:
    return Handle("cpu", registry=Registry.from_solvers(list(solvers)))


def test_a_candidate_find_prunes_never_has_its_setup_asked_for() -> None:
    fast = TimedSolver("test.fast", delay_s=0.001, wti=0.9)
    hopeless = DeferredSolver("test.hopeless", delay_s=0.001, wti=1e-12)
    h = _handle(fast, hopeless)
    found = h.find_solutions(small_problem(), find_mode="NORMAL")
    assert [s.solver for s in found] == ["test.fast"]
    assert "pruned" in found.report.skipped["test.hopeless"]
    assert hopeless.setups == 0 and hopeless.runs == 0


def test_a_setup_refused_when_measured_counts_as_not_applicable() -> None:
    plain = TimedSolver("test.plain", delay_s=0.002, wti=0.5)
    refusing = DeferredSolver("test.refusing", delay_s=0.001, wti=0.9, refuse=True)
    h = _handle(plain, refusing)
    problem = small_problem()
    found = h.find_solutions(problem, find_mode="NORMAL")
    assert [s.solver for s in found] == ["test.plain"]
    assert "refuses every plan" in found.report.not_applicable["test.refusing"]
    assert not found.report.failed and refusing.setups == 1
    again = h.find_solutions(problem, find_mode="NORMAL")
    assert [s.solver for s in again] == ["test.plain"]
    assert "refuses every plan" in again.report.not_applicable["test.refusing"]


def test_a_deferred_solver_that_is_measured_carries_its_workspace() -> None:
    deferred = DeferredSolver("test.deferred", delay_s=0.001, wti=0.9, workspace=256)
    h = _handle(deferred, TimedSolver("test.plain", delay_s=0.004, wti=0.5))
    found = h.find_solutions(small_problem(), find_mode="NORMAL")
    assert found[0].solver == "test.deferred" and found[0].workspace_size == 256
    assert deferred.setups == 1


def test_immediate_mode_asks_for_every_deferred_setup() -> None:
    deferred = DeferredSolver("test.deferred", delay_s=0.001, wti=0.9, workspace=128)
    refusing = DeferredSolver("test.refusing", wti=0.8, refuse=True)
    h = _handle(deferred, refusing, TimedSolver("test.plain", wti=0.5))
    solutions = h.get_solutions(small_problem())
    assert [s.solver for s in solutions] == ["test.deferred", "test.plain"]
    assert solutions[0].workspace_size == 128
    assert "refuses" in solutions.report.not_applicable["test.refusing"]
    assert deferred.setups == 1 and refusing.setups == 1


def test_immediate_mode_with_every_setup_refused_says_why() -> None:
    import pytest

    from miocore import NoApplicableSolverError

    h = _handle(DeferredSolver("test.refusing", wti=0.8, refuse=True))
    with pytest.raises(NoApplicableSolverError, match="refuses every plan"):
        h.get_solutions(small_problem())


def test_a_workspace_limit_asks_for_the_setup_when_candidates_are_selected() -> None:
    big = DeferredSolver("test.big", delay_s=0.001, wti=0.9, workspace=4096)
    h = _handle(big, TimedSolver("test.plain", delay_s=0.002, wti=0.5))
    found = h.find_solutions(small_problem(), find_mode="NORMAL", workspace_limit=64)
    assert [s.solver for s in found] == ["test.plain"]
    assert "needs 4096 B" in found.report.skipped["test.big"]
    assert big.setups == 1 and big.runs == 0


def test_two_threads_settling_one_candidate_ask_once_and_both_see_the_setup() -> None:
    import threading
    import time

    from miocore.find.candidates import Candidate, settle

    asked: list[int] = []

    def slow_setup() -> tuple[None, int, bool]:
        asked.append(1)
        time.sleep(0.05)  # a plan build
        return None, 512, False

    reg = Registry.from_solvers([DeferredSolver("test.deferred")]).get("test.deferred")
    cand = Candidate(reg=reg, perf_config=None, workspace_size=0, perf_db_entry=False)
    cand.pending = slow_setup
    seen: list[int] = []

    def use() -> None:
        assert settle(cand, None)
        seen.append(cand.workspace_size)

    threads = [threading.Thread(target=use) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert asked == [1] and seen == [512, 512]


def test_the_contract_suite_takes_a_setup_refusal_as_not_applicable() -> None:
    from miocore.testing import check_contract

    class ForwardOnly(DeferredSolver):
        """Listed for every direction; its setup refuses all but forward."""

        def workspace_size(
            self, ctx: ExecutionContext, problem: ConvProblem, perf_config: Any = None
        ) -> int:
            if problem.direction.value != "forward":
                raise NotApplicableError("refused at setup", field="solver", value=self.name)
            return 0

    # Raises ContractViolation where a rule is broken; backward problems are no examples.
    report = check_contract(ForwardOnly("test.forward_only", wti=0.5), use_corpus=False)
    assert report.directions == ("forward",) and report.problems > 0
