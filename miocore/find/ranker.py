"""The immediate ranker: solutions without benchmarking.

A problem's FindDb record answers first (user layer, then the shipped system layer; fastest
first). Solvers the record does not name are ranked by the fallback chain: the first applicable
learned heuristic, and the solvers it does not know by their WTI estimates (estimated fraction
of peak) placed among its ranking by estimated time (:func:`merge_by_time`); solvers with no
estimate last, the GEMM family (the universal fallback) first among them. Every solution says
where its time came from (``source``) and whether it is an estimate.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from miocore.db._common import recorded_revision
from miocore.find.candidates import Candidate, settle, settled
from miocore.find.state import FindState
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import Algorithm, PerfConfig, TunableSolver
from miocore.solver.registry import RegisteredSolver
from miocore.solver.results import FindReport, Solution, Timing, order_with_ties

log = logging.getLogger("miocore.find")


class ImmediateRanker:
    """Ranks candidates from the databases and the fallback chain."""

    def __init__(self, state: FindState, max_memo: int = 4096) -> None:
        self.state = state
        self.max_memo = max_memo
        self._records: dict[str, list[Any]] = {}
        #: (solver, problem key, recorded setting) -> (setting, workspace), None: the default's
        self._settings: dict[tuple[str, str, str], Any] = {}
        self._signature: tuple[Any, ...] = ()
        self._newcomers: dict[tuple[Any, ...], frozenset[str]] = {}
        state.forget_hooks.append(lambda key: self._records.pop(key, None))

    # -- the databases ----------------------------------------------------------------------

    def recorded(
        self,
        problem: ConvProblem,
        candidates: list[Candidate],
        report: FindReport | None,
        records: list[Any] | None = None,
    ) -> list[Solution]:
        """The first FindDb record of ``problem`` naming a candidate, as solutions (a hit), or
        an empty list (a miss); ``records``: those of ``problem`` if the caller read them."""
        usable = {c.reg.name: c for c in candidates}
        if records is None:
            records = self.records(self.state.record_key(problem))
        for record in records:
            out = []
            for entry in record.entries:
                cand = usable.get(entry.solver)
                if cand is None or not settle(cand, report):
                    continue
                stale = recorded_before_revision(cand.reg, entry.provenance)
                if stale:  # recorded by an older revision of the solver: today's default runs
                    config, workspace = cand.perf_config, cand.workspace_size
                    if report is not None and cand.reg.name not in report.stale_records:
                        report.stale_records.append(cand.reg.name)
                else:
                    config, workspace = self._recorded_config(cand, entry.perf_config, problem)
                timing = None
                if entry.count:
                    timing = Timing(
                        median_ms=entry.time_ms,
                        spread_ms=entry.spread_ms or 0.0,
                        min_ms=entry.time_ms,
                        max_ms=entry.time_ms,
                        count=entry.count,
                    )
                out.append(
                    Solution(
                        problem=problem,
                        solver=cand.reg.name,
                        solver_id=cand.reg.id,
                        algorithm=cand.reg.algorithm,
                        time_ms=entry.time_ms,
                        workspace_size=workspace,
                        source="find-db" if record.layer == "user" else "system-db",
                        is_estimate=False,
                        timing=timing,
                        perf_config=config,
                        note=_recorded_note(entry.provenance, stale),
                    )
                )
            if out:
                if report is not None:
                    report.db_hit = f"the {record.layer} FindDb"
                log.debug(
                    "%s: %d solutions from the %s FindDb", problem.key, len(out), record.layer
                )
                return order_with_ties(out)
        return []

    def _recorded_config(
        self, cand: Candidate, recorded: str | None, problem: ConvProblem
    ) -> tuple[PerfConfig | None, int]:
        """The setting (and its workspace) a FindDb entry was measured with, where it differs
        from the candidate's default and is still valid; a PerfDb setting (tuned) keeps
        precedence, and anything stale or unreadable falls back to the candidate's."""
        if recorded is None or cand.perf_db_entry or cand.perf_config is None:
            return cand.perf_config, cand.workspace_size
        memo_key = (cand.reg.name, problem.key, recorded)
        found = self._settings.get(memo_key, False)
        if found is False:  # parsed and checked once per entry: hits stay cheap
            found = None
            try:
                config = PerfConfig.from_string(recorded)
                solver, context, canon = cand.reg.solver, self.state.context, problem.canonical
                if (
                    config != cand.perf_config
                    and isinstance(solver, TunableSolver)
                    and solver.is_valid_perf_config(context, canon, config)
                ):
                    found = config, int(solver.workspace_size(context, canon, config))
            except Exception as exc:  # a stale or foreign entry must not break the hit
                log.debug("%s: recorded setting of %s unused: %s", problem.key, cand.reg.name, exc)
            if len(self._settings) >= self.max_memo:
                self._settings.clear()
            self._settings[memo_key] = found
        return found if found is not None else (cand.perf_config, cand.workspace_size)

    def records(self, key: str) -> list[Any]:
        """FindDb records of ``key``, read again only when a database file changed.

        A commit by any connection, in this process or another, changes the file or its
        write-ahead log; four ``stat`` calls are far cheaper than a query.
        """
        signature = self._db_signature()
        if signature != self._signature:
            self._records.clear()
            self._signature = signature
        found = self._records.get(key)
        if found is None:
            found = self._records[key] = self.state.find_db.records(key)
            while len(self._records) > self.max_memo:
                self._records.pop(next(iter(self._records)))
        return found

    def newcomers(self, registry: Any, backend: str) -> frozenset[str]:
        """Installed solvers for ``backend`` that the system layer cannot speak for: those of a
        family (the part of a name before its first dot) it never measured anywhere, and
        miocore's own solvers (not a vendor library's engines, ``SolverRecord.library``) it
        never recorded anywhere; none where it measured none of the installed families (empty
        or absent). Remembered per registry and backend while the database files stay as they
        were when :meth:`records` last looked: one index seek per family and per own solver,
        once per process."""
        memo_key = (id(registry), backend, self._signature)
        found = self._newcomers.get(memo_key)
        if found is not None:
            return found
        installed = {reg.name: reg for reg in registry.solvers if backend in reg.backends}
        family = {name: name.split(".", 1)[0] for name in installed}
        db = self.state.find_db
        present = db.families(set(family.values()))
        found = frozenset()
        if present:
            own = [n for n, reg in installed.items() if family[n] in present and not reg.library]
            recorded = db.solvers(own)
            found = frozenset(n for n in installed if family[n] not in present) | frozenset(
                n for n in own if n not in recorded
            )
        if len(self._newcomers) > 16:
            self._newcomers.clear()
        self._newcomers[memo_key] = found
        return found

    def _db_signature(self) -> tuple[Any, ...]:
        out: list[Any] = []
        db = self.state.find_db
        for base in (db.user_path, db.system_path):
            for path in (base, base.with_name(base.name + "-wal")):
                try:
                    st = path.stat()
                    out.append((st.st_mtime_ns, st.st_size))
                except OSError:
                    out.append(None)
        return tuple(out)

    # -- the fallback chain -----------------------------------------------------------------

    def fallback(
        self,
        problem: ConvProblem,
        candidates: list[Candidate],
        report: FindReport | None = None,
    ) -> list[Solution]:
        """``candidates`` ranked by the first applicable heuristic, those it does not know by
        WTI among them (:func:`merge_by_time`), then the rest (every deferred setup asked
        for: a solution carries its config and workspace)."""
        candidates = settled(candidates, report)
        state = self.state
        canon = problem.canonical
        by_name = {c.reg.name: c for c in candidates}
        ranked: list[Solution] = []
        heuristic, order = self.heuristic_order(canon, list(by_name))
        for name, estimate in order:
            cand = by_name.pop(name, None)
            if cand is not None:
                ranked.append(
                    self.estimate(
                        problem,
                        cand.reg,
                        cand.workspace_size,
                        cand.perf_config,
                        source="heuristic",
                        time_ms=estimate,
                        note=f"ranked by {heuristic}",
                    )
                )
        by_wti: list[Solution] = []
        unknown: list[Candidate] = []
        for cand in by_name.values():
            score = wti_score(state, cand.reg, canon)
            if score > 0:
                estimate = self.estimate(
                    problem,
                    cand.reg,
                    cand.workspace_size,
                    cand.perf_config,
                    source="wti",
                    time_ms=state.context.ideal_ms(canon) / score,
                    note=f"WTI {score:.3g}",
                )
                by_wti.append(estimate)
            else:
                unknown.append(cand)
        # a solver the heuristic does not know (a newcomer, or one it saw too rarely) goes
        # where its own estimate puts it among the heuristic's, not after all of them
        ranked = merge_by_time(ranked, by_wti)
        unknown.sort(key=lambda c: (c.reg.algorithm is not Algorithm.GEMM, c.reg.name))
        ranked.extend(
            self.estimate(
                problem,
                c.reg,
                c.workspace_size,
                c.perf_config,
                source="fallback",
                time_ms=float("inf"),
                note="no estimate available",
            )
            for c in unknown
        )
        return ranked

    def heuristic_order(
        self, canon: ConvProblem, names: list[str]
    ) -> tuple[str, list[tuple[str, float]]]:
        """(name, ``names`` it can estimate with estimated ms, fastest first) of the first
        applicable heuristic (a learned model, a fitted WTI table); ("", []) without one."""
        state = self.state
        for info, heuristic in state.registry.heuristics:
            try:
                if not heuristic.is_applicable(state.context, canon):
                    continue
                order = heuristic.rank(state.context, canon, names)
                return heuristic.name, [(n, float(t)) for n, t in order]
            except Exception as exc:
                log.warning("heuristic %s (%s) failed: %s", heuristic.name, info.label, exc)
        return "", []

    def estimate(
        self,
        problem: ConvProblem,
        reg: RegisteredSolver,
        workspace: int,
        config: PerfConfig | None,
        *,
        source: str = "wti",
        time_ms: float | None = None,
        note: str = "",
    ) -> Solution:
        """A solution whose time is an estimate (from WTI unless ``time_ms`` is given)."""
        if time_ms is None:
            score = wti_score(self.state, reg, problem.canonical)
            canon = problem.canonical
            time_ms = self.state.context.ideal_ms(canon) / score if score > 0 else float("inf")
        return Solution(
            problem=problem,
            solver=reg.name,
            solver_id=reg.id,
            algorithm=reg.algorithm,
            time_ms=time_ms,
            workspace_size=workspace,
            source=source,
            is_estimate=True,
            perf_config=config,
            note=note,
        )


def wti_score(state: FindState, reg: RegisteredSolver, canon: ConvProblem) -> float:
    """``reg``'s WTI for ``canon``; -1 when it has none or raises (ranked last, logged)."""
    try:
        score = float(reg.solver.wti(state.context, canon))
    except Exception as exc:
        log.warning("solver %s wti raised %s; ranked last", reg.name, exc)
        return -1.0
    return score if math.isfinite(score) and score > 0 else -1.0


def _recorded_note(provenance: Any, stale: bool) -> str:
    note = f"recorded {provenance.get('written_at', 'earlier')}"
    return note + ("; by an older revision of the solver, its default runs" if stale else "")


def solver_revision(reg: RegisteredSolver) -> int:
    """The installed solver's revision (``Solver.revision``; one that is not a whole number,
    which the contract suite refuses, counts as 0 rather than break a hit)."""
    revision = getattr(reg.solver, "revision", 0)
    return revision if isinstance(revision, int) and revision > 0 else 0


def recorded_before_revision(reg: RegisteredSolver, provenance: Any) -> bool:
    """Whether an entry of ``reg`` was recorded by an older revision of the solver than the
    installed one (an entry that names none is of revision 0)."""
    current = solver_revision(reg)
    if current <= 0:
        return False
    return recorded_revision(provenance) < current


#: How much slower than its WTI estimate a solver the heuristic does not know is placed.
#: Each of a database's frequent winners in turn left out of the model and the WTI table,
#: held-out problems ranked with it (``benchmarks/newcomer_ranking.py``, docs/tuning.md):
#: within 10% of the best recorded solver, mean regret, means over the left-out solvers:
#: CPU (8) 87.3%, 22.8% after every known solver -> 88.3%, 13.8% placed 3x slower (1.5x:
#: 87.7%, 13.7%); sm90 (6) 86.1%, 10.9% -> 86.7%, 7.3% (1.5x: 86.3%, 8.5%), once
#: ``gemm.gpu_im2col``'s WTI counted its launches (before, a 588x pick on a tiny problem).
NEWCOMER_DOUBT = 3.0


def merge_by_time(
    ranked: list[Solution], others: list[Solution], doubt: float = NEWCOMER_DOUBT
) -> list[Solution]:
    """``ranked`` (a heuristic's order, kept as it is) with ``others`` placed by their
    estimated times times ``doubt``: each goes before the first of ``ranked`` from which on
    the heuristic expects something slower (the running maximum of its estimates, since a
    heuristic may rank by more than its time), after it on a tie; ``others`` among
    themselves fastest first. The solutions keep their own estimates."""
    keyed: list[tuple[float, int, int, Solution]] = []
    slowest = -math.inf
    for i, sol in enumerate(ranked):
        slowest = max(slowest, sol.time_ms)
        keyed.append((slowest, 0, i, sol))
    for i, sol in enumerate(sorted(others, key=lambda s: (s.time_ms, s.solver))):
        keyed.append((sol.time_ms * doubt, 1, i, sol))
    keyed.sort(key=lambda item: item[:3])
    return [sol for *_, sol in keyed]
