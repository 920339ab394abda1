"""Which recorded problems a refresh must find again: their records predate a solver.

A shipped database is tuned once and outlives the solvers it measured: a solver added later
has no entry in it, and a solver whose kernels or defaults changed since (``Solver.revision``)
has entries of an older revision. Immediate mode and the learned heuristic then judge such a
solver by nothing or by stale times. :func:`stale_solvers` names, for a recorded problem, the
solvers that apply to it with no entry or an entry of an older revision, so that a refresh
finds those problems again (with only the changed plugins enabled, the other solvers' entries
stay as measured when the run's database is merged in: FindDb's merge is by solver).
"""

from __future__ import annotations

import dataclasses

from miocore.db.finddb import FindDb
from miocore.db.mathkeys import record_key
from miocore.find.ranker import recorded_before_revision
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import ExecutionContext
from miocore.solver.registry import Registry


def stale_solvers(
    db: FindDb,
    layer: str,
    problem: ConvProblem,
    registry: Registry,
    ctx: ExecutionContext,
    math_mode: str = "exact",
) -> list[str]:
    """The solvers of ``registry`` for ``ctx``'s backend that apply to ``problem`` in
    ``math_mode`` and whose entry in its record of ``db`` (the ``layer`` read) is missing or
    was recorded by an older revision of the solver. A problem without a record names none
    (it is new, not stale)."""
    record = db.record(record_key(problem, math_mode), layer)
    if record is None:
        return []
    entries = {entry.solver: entry for entry in record.entries}
    context = dataclasses.replace(ctx, math_mode=math_mode)
    canon = problem.canonical
    out = []
    for reg in registry.solvers:
        if ctx.backend not in reg.backends:
            continue
        entry = entries.get(reg.name)
        if entry is not None and not recorded_before_revision(reg, entry.provenance):
            continue
        try:
            applies = bool(reg.solver.is_applicable(context, canon))
        except Exception:  # a plugin failing here fails find's applicability too: not stale
            applies = False
        if applies:
            out.append(reg.name)
    return out
