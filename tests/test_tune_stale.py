"""Which recorded problems a database refresh must find again (``miocore.tune.stale``): a
record lacking an entry of a solver that applies, or holding one of an older revision."""

from __future__ import annotations

from pathlib import Path

from fake_solvers import BrokenSolver, TimedSolver, TunableTimedSolver, small_problem

from miocore import Handle, Registry
from miocore.db import FindDb, FindDbEntry
from miocore.tune.stale import stale_solvers


class RevisedTunable(TunableTimedSolver):
    """The tunable solver after its kernels changed."""

    revision = 2


def _entry(solver: str, revision: int | None = None) -> FindDbEntry:
    provenance = {} if revision is None else {"solver_revision": str(revision)}
    return FindDbEntry(
        solver=solver, algorithm="direct", time_ms=1.0, workspace_size=0, provenance=provenance
    )


def test_a_refresh_names_missing_and_older_revision_solvers(tmp_path: Path) -> None:
    forward, backward = small_problem("forward"), small_problem("backward_data")
    registry = Registry.from_solvers(
        [
            TimedSolver("test.a"),
            TimedSolver("test.forward_only", applies_to="forward"),
            RevisedTunable(),
            BrokenSolver("is_applicable"),  # raises: not counted, the listing goes on
        ]
    )
    ctx = Handle("cpu").context
    db = FindDb("dev", user_dir=tmp_path)
    db.write(forward.key, [_entry("test.a"), _entry("test.tunable", revision=2)])
    db.write(backward.key, [_entry("test.a"), _entry("test.tunable", revision=1)])

    def stale(problem, math_mode: str = "exact") -> list[str]:
        return stale_solvers(db, "user", problem, registry, ctx, math_mode)

    # forward: test.forward_only applies and has no entry; the rest are current
    assert stale(forward) == ["test.forward_only"]
    # backward data: forward_only does not apply; the tunable's entry is of revision 1 of 2
    assert stale(backward) == ["test.tunable"]
    # a problem without a record is new, not stale; so is the tf32 record of an fp32 problem
    assert stale(small_problem("backward_weights")) == []
    assert stale(forward, "tf32") == []
    # once every applicable solver has a current entry, nothing is stale
    db.write(backward.key, [_entry("test.a"), _entry("test.tunable", revision=2)])
    assert stale(backward) == []
