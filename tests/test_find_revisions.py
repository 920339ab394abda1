"""FindDb entries recorded by an older revision of a solver (``Solver.revision``): an entry
written before the solver's kernels or defaults changed runs today's default instead of the
recorded setting, the solver is named in ``FindReport.stale_records``, and the modes that
measure on a miss measure it again and record it as of the new revision; entries of the
current revision keep their recorded settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_solvers import TunableTimedSolver, buffers, small_problem

from miocore import Handle, PerfConfig, Registry
from miocore.db import FindDb, FindDbEntry

PROBLEM = small_problem()


class RevisedTunable(TunableTimedSolver):
    """The same solver after its defaults changed."""

    revision = 1


def _handle(tmp_path: Path, solver: TunableTimedSolver, revision: int | None) -> Handle:
    """A handle whose user FindDb records level 3 for ``solver`` (written by ``revision``,
    or naming none, as entries did before the field existed)."""
    device = Handle("cpu").context.device.identity
    provenance = {} if revision is None else {"solver_revision": str(revision)}
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


@pytest.mark.parametrize("revision", [None, 0])
def test_a_recorded_setting_of_the_same_revision_runs(tmp_path: Path, revision) -> None:
    solver = TunableTimedSolver()
    h = _handle(tmp_path, solver, revision)
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert sols[0].perf_config == PerfConfig(level=3)
    assert sols.report.stale_records == []
    h.run_solution(sols[0], **buffers(PROBLEM))
    assert solver.configs_run == [3]


@pytest.mark.parametrize("revision", [None, 0])
def test_fast_mode_runs_the_default_of_a_revised_solver(tmp_path: Path, revision) -> None:
    solver = RevisedTunable()
    h = _handle(tmp_path, solver, revision)
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert sols[0].source == "find-db" and sols[0].time_ms == 1.0  # the recorded time
    assert sols[0].perf_config == PerfConfig(level=1)  # today's default, not level 3
    assert sols.report.stale_records == [solver.name]
    assert "older revision" in sols[0].note
    assert any("older revision" in line for line in sols.report.lines())
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
    assert user.entries[0].provenance["solver_revision"] == "1"
    # recorded as of the new revision: the next find hits, measures nothing, runs the record
    runs = len(solver.configs_run)
    again = h.find_solutions(PROBLEM, find_mode="HYBRID")
    assert again[0].source == "find-db" and again.report.stale_records == []
    assert len(solver.configs_run) == runs


def test_a_record_of_the_current_revision_is_not_stale(tmp_path: Path) -> None:
    solver = RevisedTunable()
    h = _handle(tmp_path, solver, 1)
    sols = h.find_solutions(PROBLEM, find_mode="HYBRID")
    assert sols[0].source == "find-db" and sols[0].perf_config == PerfConfig(level=3)
    assert sols.report.stale_records == [] and solver.configs_run == []
