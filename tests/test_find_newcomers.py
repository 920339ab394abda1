"""A plugin installed after the shipped system database was built (design guide §4, extended):
a hit found only in the system layer cannot speak for solver families it never measured, so
HYBRID and DYNAMIC_HYBRID measure the newcomers that apply beside the recorded solutions and
write the user record; FAST returns the hit; a user record, or newcomers that do not apply,
leave the hit alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_solvers import TimedSolver, small_problem

from miocore import Algorithm, Handle, Registry
from miocore.db import FindDb, FindDbEntry

PROBLEM = small_problem()


def _system_db(folder: Path, device: str, times: dict[str, float]) -> Path:
    db = FindDb(device, user_dir=folder)  # written as a user layer, read as the system one
    db.write(
        PROBLEM.key,
        [
            FindDbEntry(
                solver=name, algorithm="direct", time_ms=t, workspace_size=0, count=5, spread_ms=0
            )
            for name, t in times.items()
        ],
    )
    return folder


@pytest.fixture
def solvers() -> dict[str, TimedSolver]:
    return {
        "old": TimedSolver("old.direct", delay_s=0.004),
        "older": TimedSolver("old.gemm", delay_s=0.006, algorithm=Algorithm.GEMM),
        "new": TimedSolver("new.kernel", delay_s=0.001, dynamic=True),
    }


def _handle(tmp_path: Path, solvers: dict[str, TimedSolver], **system: float) -> Handle:
    device = Handle("cpu").context.device.identity
    system_dir = _system_db(tmp_path / "system", device, system)
    return Handle(
        "cpu",
        registry=Registry.from_solvers(solvers.values()),
        user_db_path=tmp_path / "user",
        system_db_path=system_dir,
    )


@pytest.mark.parametrize("mode", ["HYBRID", "DYNAMIC_HYBRID"])
def test_newcomers_are_measured_beside_a_system_hit(
    tmp_path: Path, solvers: dict[str, TimedSolver], mode: str
) -> None:
    h = _handle(tmp_path, solvers, **{"old.direct": 400.0, "old.gemm": 600.0})
    sols = h.find_solutions(PROBLEM, find_mode=mode)
    assert solvers["new"].runs > 0
    assert sols[0].solver == "new.kernel" and sols[0].source == "measured"
    by_name = {s.solver: s for s in sols}
    assert {"old.direct", "old.gemm", "new.kernel"} <= set(by_name)
    if mode == "DYNAMIC_HYBRID":  # the recorded, not dynamic, solvers keep their times
        assert solvers["old"].runs == 0 and by_name["old.direct"].time_ms == 400.0
    [user] = [r for r in h.find_db.records(PROBLEM.key) if r.layer == "user"]
    assert user.entries[0].solver == "new.kernel" and len(user.entries) == 3
    # the next find hits the user record: nothing measured again
    runs = solvers["new"].runs
    again = h.find_solutions(PROBLEM, find_mode=mode)
    assert solvers["new"].runs == runs and again[0].source == "find-db"


def test_fast_mode_returns_the_system_hit(tmp_path: Path, solvers: dict) -> None:
    h = _handle(tmp_path, solvers, **{"old.direct": 4.0})
    sols = h.find_solutions(PROBLEM, find_mode="FAST")
    assert [s.solver for s in sols] == ["old.direct"] and sols[0].source == "system-db"
    assert sum(s.runs for s in solvers.values()) == 0


def test_known_families_and_inapplicable_newcomers_leave_the_hit_alone(
    tmp_path: Path, solvers: dict[str, TimedSolver]
) -> None:
    # the system layer measured the "new" family elsewhere: it is no newcomer
    h = _handle(tmp_path, solvers, **{"old.direct": 4.0, "new.other": 9.0})
    assert h.find_solutions(PROBLEM)[0].source == "system-db"
    solvers["new"].applies_to = "backward_weights"  # not this forward problem
    h2 = _handle(tmp_path / "b", solvers, **{"old.direct": 4.0})
    sols = h2.find_solutions(PROBLEM)
    assert [s.source for s in sols] == ["system-db"]
    assert sum(s.runs for s in solvers.values()) == 0
