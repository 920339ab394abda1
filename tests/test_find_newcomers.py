"""A plugin installed, or a solver added to one, after the shipped system database was built
(design guide §4, extended): a hit found only in the system layer cannot speak for solver
families it never measured nor for miocore's own solvers it never recorded, so HYBRID and
DYNAMIC_HYBRID measure the newcomers that apply beside the recorded solutions and write the
user record; FAST returns the hit; a user record, solvers recorded elsewhere, a vendor
library's engines the layer never recorded, and newcomers that do not apply leave the hit
alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_solvers import TimedSolver, small_problem

import miocore
from miocore import Algorithm, Handle, Registry
from miocore.db import FindDb, FindDbEntry

PROBLEM = small_problem()


OTHER = small_problem(dtype="float16")


def _entries(times: dict[str, float]) -> list[FindDbEntry]:
    return [
        FindDbEntry(
            solver=name, algorithm="direct", time_ms=t, workspace_size=0, count=5, spread_ms=0
        )
        for name, t in times.items()
    ]


def _system_db(
    folder: Path, device: str, times: dict[str, float], elsewhere: dict[str, float] | None = None
) -> Path:
    """A system layer recording ``times`` for PROBLEM and ``elsewhere`` for another key."""
    db = FindDb(device, user_dir=folder)  # written as a user layer, read as the system one
    db.write(PROBLEM.key, _entries(times))
    if elsewhere:
        db.write(OTHER.key, _entries(elsewhere))
    return folder


@pytest.fixture
def solvers() -> dict[str, TimedSolver]:
    return {
        "old": TimedSolver("old.direct", delay_s=0.004),
        "older": TimedSolver("old.gemm", delay_s=0.006, algorithm=Algorithm.GEMM),
        "new": TimedSolver("new.kernel", delay_s=0.001, dynamic=True),
    }


def _handle(
    tmp_path: Path,
    solvers: dict[str, TimedSolver],
    elsewhere: dict[str, float] | None = None,
    registry: Registry | None = None,
    **system: float,
) -> Handle:
    device = Handle("cpu").context.device.identity
    system_dir = _system_db(tmp_path / "system", device, system, elsewhere)
    return Handle(
        "cpu",
        registry=registry or Registry.from_solvers(solvers.values()),
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


def test_recorded_solvers_and_inapplicable_newcomers_leave_the_hit_alone(
    tmp_path: Path, solvers: dict[str, TimedSolver]
) -> None:
    # every installed solver recorded somewhere in the system layer: none is a newcomer
    h = _handle(tmp_path, solvers, {"new.kernel": 9.0}, **{"old.direct": 4.0, "old.gemm": 6.0})
    assert [s.source for s in h.find_solutions(PROBLEM)] == ["system-db", "system-db"]
    assert sum(s.runs for s in solvers.values()) == 0
    solvers["new"].applies_to = "backward_weights"  # not this forward problem
    h2 = _handle(tmp_path / "b", solvers, **{"old.direct": 4.0, "old.gemm": 6.0})
    sols = h2.find_solutions(PROBLEM)
    assert [s.source for s in sols] == ["system-db", "system-db"]
    assert sum(s.runs for s in solvers.values()) == 0


@pytest.mark.parametrize("mode", ["HYBRID", "DYNAMIC_HYBRID"])
def test_a_solver_added_to_a_known_family_is_a_newcomer(
    tmp_path: Path, solvers: dict[str, TimedSolver], mode: str
) -> None:
    """A plugin's new solver (its family known to the system layer, itself never recorded) is
    measured beside a system hit, as a new family's would be."""
    added = TimedSolver("old.wgmma", delay_s=0.001, dynamic=True)
    both = {**solvers, "added": added}
    h = _handle(tmp_path, both, {"new.kernel": 9.0}, **{"old.direct": 400.0, "old.gemm": 600.0})
    sols = h.find_solutions(PROBLEM, find_mode=mode)
    assert added.runs > 0 and sols[0].solver == "old.wgmma" and sols[0].source == "measured"
    assert solvers["new"].runs == 0  # recorded elsewhere: the layer speaks for it


class _Plugin:
    """Registers its solvers, as a vendor library's engines or not."""

    def __init__(self, solvers: list[TimedSolver], library: bool) -> None:
        self.solvers = solvers
        self.library = library

    @miocore.hookimpl
    def miocore_solvers(self) -> list[miocore.SolverRecord]:
        return [miocore.SolverRecord(solver=s, library=self.library) for s in self.solvers]


@pytest.mark.parametrize("library", [True, False])
def test_a_library_engine_the_layer_never_recorded_is_not_a_newcomer(
    tmp_path: Path, library: bool
) -> None:
    """The library decides which engines it offers: one never recorded was not offered, so a
    hit stays as recorded; the same solver of miocore's own would be measured."""
    recorded = TimedSolver("vendor.eng1", delay_s=0.004)
    unrecorded = TimedSolver("vendor.eng7", delay_s=0.001, dynamic=True)
    registry = Registry.from_plugins(
        [("vendor", _Plugin([recorded, unrecorded], library), "vendor", "1")]
    )
    assert registry.get("vendor.eng7").library is library
    h = _handle(tmp_path, {}, registry=registry, **{"vendor.eng1": 400.0})
    sols = h.find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    if library:
        assert [s.solver for s in sols] == ["vendor.eng1"] and sols[0].source == "system-db"
        assert unrecorded.runs == 0
    else:
        assert unrecorded.runs > 0, h.last_report
        assert sols[0].solver == "vendor.eng7", [(s.solver, s.time_ms) for s in sols]
