"""Recorded settings of an older version of a solver (``TunableSolver.settings_generation``):
a FindDb entry written before the solver's defaults changed runs today's default instead of
the recorded setting, is named in ``FindReport.stale_settings``, and the modes that measure
on a miss measure the solver again and record it under the new generation; entries of the
current generation keep their recorded settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_solvers import TunableTimedSolver, buffers, small_problem

from miocore import Handle, PerfConfig, Registry
from miocore.db import FindDb, FindDbEntry

PROBLEM = small_problem()


class RevisedTunable(TunableTimedSolver):
    """The same solver after its defaults changed."""

    settings_generation = 1


def _handle(tmp_path: Path, solver: TunableTimedSolver, generation: int | None) -> Handle:
    """A handle whose user FindDb records level 3 for ``solver`` (written under
    ``generation``, or with no generation as before the field existed)."""
    device = Handle("cpu").context.device.identity
    provenance = {} if generation is None else {"settings_generation": str(generation)}
    FindDb(device, user_dir=tmp_path).write(
        PROBLEM.key,
        [
            FindDbEntry(
                solver=solver.name,
                algorithm="implicit_gemm",
                time_ms=1.0,
                workspace_size=0,
                count=5,
                spread_ms=0.0,
                perf_config=PerfConfig(level=3).to_string(),
                provenance=provenance,
            )
        ],
    )
    return Handle("cpu", registry=Registry.from_solvers([solver]), user_db_path=tmp_path)


@pytest.mark.parametrize("generation", [None, 0])
def test_a_recorded_setting_of_the_same_generation_runs(tmp_path: Path, generation) -> None:
    solver = TunableTimedSolver()
    h = _handle(tmp_path, solver, generation)
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert sols[0].perf_config == PerfConfig(level=3)
    assert sols.report.stale_settings == []
    h.run_solution(sols[0], **buffers(PROBLEM))
    assert solver.configs_run == [3]


@pytest.mark.parametrize("generation", [None, 0])
def test_fast_mode_runs_the_default_of_a_revised_solver(tmp_path: Path, generation) -> None:
    solver = RevisedTunable()
    h = _handle(tmp_path, solver, generation)
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert sols[0].source == "find-db" and sols[0].time_ms == 1.0  # the recorded time
    assert sols[0].perf_config == PerfConfig(level=1)  # today's default, not level 3
    assert sols.report.stale_settings == [solver.name]
    assert "older settings" in sols[0].note
    assert any("older than the installed" in line for line in sols.report.lines())
    assert solver.configs_run == []  # FAST measures nothing
    h.run_solution(sols[0], **buffers(PROBLEM))
    assert solver.configs_run == [1]


def test_hybrid_measures_a_revised_solver_again_once(tmp_path: Path) -> None:
    solver = RevisedTunable()
    h = _handle(tmp_path, solver, None)
    sols = h.find_solutions(PROBLEM, find_mode="HYBRID")
    assert solver.name in sols.report.benchmarked and solver.configs_run
    assert sols[0].source == "measured"
    [user] = [r for r in h.find_db.records(PROBLEM.key) if r.layer == "user"]
    assert user.entries[0].provenance["settings_generation"] == "1"
    # recorded under the new generation: the next find hits, measures nothing, runs the record
    runs = len(solver.configs_run)
    again = h.find_solutions(PROBLEM, find_mode="HYBRID")
    assert again[0].source == "find-db" and again.report.stale_settings == []
    assert len(solver.configs_run) == runs


def test_a_record_of_the_current_generation_is_not_stale(tmp_path: Path) -> None:
    solver = RevisedTunable()
    h = _handle(tmp_path, solver, 1)
    sols = h.find_solutions(PROBLEM, find_mode="HYBRID")
    assert sols[0].source == "find-db" and sols[0].perf_config == PerfConfig(level=3)
    assert sols.report.stale_settings == [] and solver.configs_run == []
