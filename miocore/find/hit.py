"""A FindDb hit that asks only the solvers its record names.

A hit returns the recorded solutions of the solvers that are installed, enabled, applicable
and allowed (design guide §4): every rule of the candidates step applies to them, but the
solvers the record does not name need not be asked anything, nor made (a lazy solver's module
is not imported). This is what makes a hit in a new process cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miocore.problem.conv import ConvProblem
from miocore.solver.results import FindReport, Solution

if TYPE_CHECKING:
    from miocore.find.handle import Handle


def recorded_hit(
    handle: Handle,
    problem: ConvProblem,
    report: FindReport,
    limit: int | None,
    accuracy: Any,
    deterministic: bool,
) -> list[Solution]:
    """The hit of ``problem`` among the solvers its FindDb records name, or [] on a miss.

    ``report`` gets what was left out of the recorded solvers, and why. On a miss the full
    selection that follows rewrites those entries alike (the same rules on the same solvers)
    and adds the others'.
    """
    ranker = handle.ranker
    records = ranker.records(problem.key)
    if not records:
        return []
    named = frozenset(e.solver for r in records for e in r.entries)
    found = handle.candidates.select(
        problem,
        report,
        limit,
        use_perf_db=True,
        accuracy=accuracy,
        deterministic=deterministic,
        among=named,
    )
    hit = ranker.recorded(problem, found, report, records) if found else []
    if hit:
        handle._note_storage(report)
    return hit
