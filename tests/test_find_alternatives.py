"""A normal find also measures the few listed settings of a solver that comes near the best
(``TunableSolver.find_configs``, ``MIOCORE_FIND_ALTERNATIVES``) and records the fastest
accurate one with the solution."""

from __future__ import annotations

import pytest
from fake_solvers import TimedSolver, TunableTimedSolver, small_problem

from miocore import Handle, InvalidEnvironmentError, NoApplicableSolverError, PerfConfig, Registry

PROBLEM = small_problem()


def _handle(*solvers: object) -> Handle:
    return Handle("cpu", registry=Registry.from_solvers(list(solvers)))


def test_normal_find_keeps_the_fastest_listed_setting_and_the_findb_remembers_it() -> None:
    tunable = TunableTimedSolver(listed=(1, 3, 4))
    h = _handle(tunable)
    (best,) = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert best.perf_config == PerfConfig(level=3)  # the default is level 1, 3 is fastest
    assert set(tunable.configs_run) == {1, 3, 4}
    record = h.find_db.record(PROBLEM.key)
    assert record is not None
    (entry,) = record.entries
    assert PerfConfig.from_string(entry.perf_config) == PerfConfig(level=3)
    # A new handle answers from the record, without measuring, and runs the recorded setting.
    tunable.configs_run.clear()
    again = _handle(tunable)
    (hit,) = again.find_solutions(PROBLEM)
    assert hit.source == "find-db" and hit.perf_config == PerfConfig(level=3)
    assert tunable.configs_run == []


def test_the_switch_turns_it_off_and_refuses_a_bad_factor(monkeypatch: pytest.MonkeyPatch) -> None:
    tunable = TunableTimedSolver(listed=(1, 3))
    monkeypatch.setenv("MIOCORE_FIND_ALTERNATIVES", "0")
    (best,) = _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL")
    assert best.perf_config == PerfConfig(level=1) and set(tunable.configs_run) == {1}
    monkeypatch.setenv("MIOCORE_FIND_ALTERNATIVES", "0.5")
    with pytest.raises(InvalidEnvironmentError, match="MIOCORE_FIND_ALTERNATIVES"):
        _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL")


def test_a_faster_setting_with_a_wrong_answer_is_not_kept() -> None:
    tunable = TunableTimedSolver(listed=(1, 3), wrong=3)
    (best,) = _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL", accuracy="default")
    assert 3 in tunable.configs_run  # measured, then refused by the accuracy check
    assert best.perf_config == PerfConfig(level=1)


def test_a_solver_far_from_the_best_is_not_searched() -> None:
    tunable = TunableTimedSolver(listed=(1, 3))
    quick = TimedSolver("test.quick", delay_s=0.0001)
    sols = _handle(tunable, quick).find_solutions(PROBLEM, find_mode="NORMAL")
    assert sols[0].solver == "test.quick"
    assert set(tunable.configs_run) == {1}


def test_a_perfdb_setting_is_not_second_guessed() -> None:
    tunable = TunableTimedSolver(listed=(1, 3))
    h = _handle(tunable)
    h.perf_db.put(PROBLEM.key, "test.tunable", '{"level":2}', {"by": "test"})
    (best,) = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert best.perf_config == PerfConfig(level=2) and set(tunable.configs_run) == {2}


class _LossyAtThree(TunableTimedSolver):
    """Level 3 (the fastest) reduces in a lower precision and says so per setting."""

    def notes_for(self, ctx: object, problem: object, perf_config: object = None) -> frozenset:
        level = (perf_config or PerfConfig(level=1))["level"]  # type: ignore[index]
        return frozenset({"reduced_precision_accumulation"} if level == 3 else ())


def test_strict_never_measures_a_listed_setting_whose_notes_it_refuses() -> None:
    tunable = _LossyAtThree(listed=(1, 3))
    (best,) = _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL", accuracy="strict")
    assert best.perf_config == PerfConfig(level=1) and 3 not in tunable.configs_run
    tunable.configs_run.clear()
    (best,) = _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL", accuracy="fast")
    assert best.perf_config == PerfConfig(level=3)


def test_per_setting_notes_decide_the_strict_filter() -> None:
    class LossyDefault(_LossyAtThree):
        def default_perf_config(self, ctx: object, problem: object) -> PerfConfig:  # type: ignore[override]
            return PerfConfig(level=3)

    with pytest.raises(NoApplicableSolverError, match="accuracy=strict: numerical notes"):
        _handle(LossyDefault()).find_solutions(PROBLEM, find_mode="NORMAL", accuracy="strict")
    (best,) = _handle(LossyDefault()).find_solutions(PROBLEM, find_mode="NORMAL")
    assert best.perf_config == PerfConfig(level=3)


def test_a_setting_over_the_workspace_limit_is_not_measured() -> None:
    tunable = TunableTimedSolver(listed=(1, 3), workspaces={3: 4096})
    (best,) = _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL", workspace_limit=1024)
    assert best.perf_config == PerfConfig(level=1) and 3 not in tunable.configs_run
    (best,) = _handle(tunable).find_solutions(PROBLEM, find_mode="NORMAL")
    assert best.perf_config == PerfConfig(level=3) and best.workspace_size == 4096


def test_a_solver_whose_notes_for_raises_falls_back_to_its_declared_notes() -> None:
    class Raising(TunableTimedSolver):
        numerical_notes = frozenset({"winograd"})

        def notes_for(self, ctx: object, problem: object, perf_config: object = None) -> frozenset:
            raise RuntimeError("broken notes")

    with pytest.raises(NoApplicableSolverError, match="accuracy=strict: numerical notes winograd"):
        _handle(Raising()).find_solutions(PROBLEM, find_mode="NORMAL", accuracy="strict")
    (best,) = _handle(Raising()).find_solutions(PROBLEM, find_mode="NORMAL")
    assert best.solver == "test.tunable"
