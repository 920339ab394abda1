"""A normal find also measures the few listed settings of a solver that comes near the best
(``TunableSolver.find_configs``, ``MIOCORE_FIND_ALTERNATIVES``) and records the fastest
accurate one with the solution."""

from __future__ import annotations

import pytest
from fake_solvers import TimedSolver, TunableTimedSolver, small_problem

from miocore import Handle, InvalidEnvironmentError, PerfConfig, Registry

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
