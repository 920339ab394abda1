"""A FindDb hit that asks only the solvers its record names, and the newcomers it cannot know.

A hit returns the recorded solutions of the solvers that are installed, enabled, applicable
and allowed (design guide §4): every rule of the candidates step applies to them, but the
solvers the record does not name need not be asked anything, nor made (a lazy solver's module
is not imported). This is what makes a hit in a new process cheap.

A hit found only in the shipped system layer cannot speak for a plugin installed after that
database was built, nor for a solver a plugin added since: :func:`newcomers` names the
installed solvers of families the system layer never measured, and miocore's own solvers it
never recorded (a vendor library's engines excepted: the library chooses which it offers).
Nor can an entry recorded before its solver's kernels or defaults
changed (``Solver.revision``): the ranker gives such an entry today's default setting and
names the solver in ``FindReport.stale_records``. The modes that measure on a miss (HYBRID,
DYNAMIC_HYBRID) then measure both kinds beside the recorded ones, under their own rules, and
write the user record; FAST returns the hit as it is (stale entries running the default).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miocore.env import FindMode
from miocore.problem.conv import ConvProblem
from miocore.solver.results import FindReport, Solution

if TYPE_CHECKING:
    from miocore.find.candidates import Candidate
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
    records = ranker.records(handle.state.record_key(problem))
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


def newcomers(handle: Handle, problem: ConvProblem, hit: list[Solution]) -> frozenset[str]:
    """Installed solvers for this backend the system layer cannot speak for (of a family it
    never measured, or of miocore's own it never recorded: ``Ranker.newcomers``), when
    ``hit`` came from the system layer alone (a user record was measured with them
    installed, or chose without them); names only, nothing is asked or imported."""
    if any(s.source != "system-db" for s in hit):
        return frozenset()
    return handle.ranker.newcomers(handle.registry, handle.context.backend)


def find_start(
    handle: Handle,
    problem: ConvProblem,
    report: FindReport,
    mode: FindMode,
    limit: int | None,
    use_perf_db: bool,
    accuracy: Any,
    deterministic: bool,
) -> tuple[list[Solution], list[Candidate] | None]:
    """What a find of ``problem`` starts from (``Handle.find_solutions``, and
    ``Handle.compile_ahead`` asking what it would compile): ``(hit, None)`` where a FindDb
    hit answers it, else ``(hit, candidates)`` to benchmark (``hit``: a system-layer record
    the newcomers are measured beside, or empty)."""
    among = None
    hit: list[Solution] = []
    fresh: frozenset[str] | None = None
    if mode is not FindMode.NORMAL:
        hit = recorded_hit(handle, problem, report, limit, accuracy, deterministic)
        if hit:
            # a system-layer hit measures the newcomers it cannot know beside itself, and any
            # hit the solvers it recorded with an older revision than the installed one
            fresh = None
            if mode is not FindMode.FAST:
                fresh = newcomers(handle, problem, hit) | frozenset(report.stale_records)
            if not fresh:
                return hit, None
            among = fresh | {s.solver for s in hit}
    candidates = handle.candidates.select(
        problem,
        report,
        limit,
        use_perf_db=use_perf_db,
        accuracy=accuracy,
        deterministic=deterministic,
        among=among,
    )
    if hit and not {c.reg.name for c in candidates} & (fresh or frozenset()):
        return hit, None  # no newcomer applies, no stale entry is measurable
    return hit, candidates
