"""The find engine: find modes and find enforce, benchmarking, tuning, ordering, writing records.

Given the candidates of a problem, the engine decides by the find mode (design guide §4)
whether the FindDb answers or every candidate is measured; it measures (warm-up, then the
median of several runs, with spread and count), prunes candidates whose WTI predicts they
cannot win, tunes tunable solvers as find enforce asks, orders the results with ties within
noise broken by a stable rule, and writes the user FindDb record.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

from miocore import env
from miocore.db._common import SOLVER_REVISION
from miocore.env import FindEnforce, FindMode
from miocore.errors import InvalidArgumentError, NoApplicableSolverError
from miocore.find.accuracy import notes_of
from miocore.find.accuracy import policy_of as accuracy_policy
from miocore.find.blame import record_failure
from miocore.find.candidates import Candidate, settle
from miocore.find.dynamic import dynamic_only
from miocore.find.invoker_cache import CachedInvoker
from miocore.find.ranker import (
    ImmediateRanker,
    solver_revision,
    wti_score,
)
from miocore.find.runner import Runner
from miocore.find.settings import alternatives_factor, prune_factor, should_tune
from miocore.find.state import FindState
from miocore.find.timing import time_candidate
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import InvokeParams, PerfConfig, TunableSolver
from miocore.solver.numerics import AccuracyPolicy
from miocore.solver.results import FindReport, Solution, Timing, order_with_ties
from miocore.values import evolve

log = logging.getLogger("miocore.find")

#: Called during find as ``progress(done, total, solver_name)``.
ProgressCallback = Callable[[int, int, str], None]


class FindEngine:
    """Runs find for one handle over the candidates the candidates step selected."""

    def __init__(self, state: FindState, ranker: ImmediateRanker, runner: Runner) -> None:
        self.state = state
        self.ranker = ranker
        self.runner = runner
        #: solver -> what the FindDb record says of its accuracy (the last benchmark's)
        self.accuracy_provenance: dict[str, dict[str, str]] = {}
        #: the last problem's heuristic estimates: (problem, names asked, heuristic, estimates)
        self._estimated: tuple[ConvProblem, frozenset[str], str, dict[str, float]] | None = None

    def find(
        self,
        problem: ConvProblem,
        candidates: list[Candidate],
        report: FindReport,
        *,
        mode: FindMode,
        enforce: FindEnforce,
        exhaustive: bool,
        buffers: dict[str, Any],
        workspace: Any,
        progress: ProgressCallback | None,
        accuracy: Any = None,
        workspace_limit: int | None = None,
        alongside: list[Solution] | None = None,
    ) -> tuple[list[Solution], bool]:
        """Solutions of ``problem`` by the find mode, and whether they are already ordered.

        ``accuracy`` is the policy (else ``MIOCORE_ACCURACY``): measured candidates are
        verified unless it is ``fast`` (``miocore.find.accuracy``). ``alongside``: a system
        record's solutions to measure newcomers beside (``miocore.find.hit.newcomers``): the
        record is not taken as a hit, and its solutions the mode's rules leave unmeasured keep
        their recorded times in the result and the user record written."""
        policy = accuracy_policy(accuracy)
        if mode is not FindMode.NORMAL:
            hit = self.ranker.recorded(problem, candidates, report) if alongside is None else []
            if hit:
                log.info("%s: FindDb hit (%s), no benchmark", problem.key, report.db_hit)
                return hit, True  # the ranker ordered it (ties within noise) already
            if mode is FindMode.FAST:
                log.info("%s: FindDb miss in FAST mode; ranked without benchmarking", problem.key)
                return self.ranker.fallback(problem, candidates, report), True
            if mode is FindMode.DYNAMIC_HYBRID:
                candidates = dynamic_only(self, problem, candidates, report)
        measured = self.benchmark(
            problem,
            candidates,
            report,
            exhaustive=exhaustive,
            enforce=enforce,
            buffers=buffers,
            workspace=workspace,
            progress=progress,
            policy=policy,
            workspace_limit=workspace_limit,
        )
        if alongside:
            # the record's solutions the mode left unmeasured keep their recorded times (none
            # measured at all: the record as it was, now the user's, so later calls hit it)
            seen = {s.solver for s in measured}
            measured = measured + [s for s in alongside if s.solver not in seen]
        if not measured:
            refused = {c.reg.name: c.refused for c in candidates if c.refused is not None}
            reasons = {**refused, **report.failed}  # setups refused when measured, failures
            raise NoApplicableSolverError(
                f"every applicable solver failed on {problem.key}: "
                + "; ".join(f"{k}: {v}" for k, v in reasons.items())
            )
        ordered = order_with_ties(measured)
        self.write_record(problem, ordered, mode)
        report.wrote_db = True
        log.info(
            "%s: %s wins at %.4g ms (%d measured)",
            problem.key,
            ordered[0].solver,
            ordered[0].time_ms,
            len(ordered),
        )
        return ordered, True

    def estimates(self, canon: ConvProblem, names: list[str]) -> tuple[str, dict[str, float]]:
        """The first applicable heuristic's name and its estimates (ms) of those of ``names``
        it knows on ``canon`` (``ImmediateRanker.heuristic_order``); ("", {}) without one. The
        last problem's are kept: a DYNAMIC_HYBRID find asks for them twice, choosing what to
        measure and then in what order."""
        last = self._estimated
        if last is not None and last[1].issuperset(names) and last[0] == canon:
            return last[2], {n: last[3][n] for n in names if n in last[3]}
        heuristic, order = self.ranker.heuristic_order(canon, names)
        found = dict(order)
        self._estimated = (canon, frozenset(names), heuristic, found)
        return heuristic, dict(found)

    def predicted(self, ideal_ms: float, cand: Candidate, canon: ConvProblem) -> float:
        """``cand``'s time on ``canon`` as its WTI predicts it (inf without one)."""
        score = wti_score(self.state, cand.reg, canon)
        return ideal_ms / score if score > 0 else float("inf")

    # -- benchmarking ------------------------------------------------------------------------

    def benchmark(
        self,
        problem: ConvProblem,
        candidates: list[Candidate],
        report: FindReport,
        *,
        exhaustive: bool,
        enforce: FindEnforce,
        buffers: dict[str, Any],
        workspace: Any,
        progress: ProgressCallback | None,
        policy: AccuracyPolicy = AccuracyPolicy.FAST,
        workspace_limit: int | None = None,
    ) -> list[Solution]:
        """Measure every candidate (likely winners first, hopeless ones pruned); unless the
        policy is ``fast``, verify each against the reference and leave out the inaccurate."""
        state = self.state
        canon = problem.canonical
        arrays = self._buffers(problem, buffers)
        from miocore.find.verify import AccuracyCheck  # here: a FindDb hit never verifies

        check = AccuracyCheck(state, problem, arrays) if policy is not AccuracyPolicy.FAST else None
        self.accuracy_provenance = check.provenance if check is not None else {}
        ideal = state.context.ideal_ms(canon)
        predicted = {c.reg.name: self.predicted(ideal, c, canon) for c in candidates}
        # Likely winners first, so the cut-offs for hopeless candidates have a reference: by
        # the heuristic's estimate where it has one (a learned model ranks far better than
        # WTI), else by WTI.
        _, estimates = self.estimates(canon, [c.reg.name for c in candidates])
        first = {name: estimates.get(name, guess) for name, guess in predicted.items()}
        ordered = sorted(candidates, key=lambda c: (first[c.reg.name], c.reg.name))
        if hasattr(state.backend, "precompile"):
            self._precompile(canon, ordered)
        prune = prune_factor()
        out: list[Solution] = []
        best = float("inf")
        for done, cand in enumerate(ordered):
            if progress is not None:
                progress(done, len(ordered), cand.reg.name)
            guess = predicted[cand.reg.name]
            if prune and math.isfinite(guess) and guess > prune * best:
                report.skipped[cand.reg.name] = (
                    f"pruned: its WTI predicts {guess:.4g} ms, over {prune:g}x the best measured "
                    f"{best:.4g} ms"
                )
                continue
            if not settle(cand, report):  # a deferred setup, asked for only now
                continue
            try:
                config = cand.perf_config
                if isinstance(cand.reg.solver, TunableSolver) and should_tune(
                    enforce, exhaustive, cand.perf_db_entry
                ):
                    config = self._tune(problem, cand, arrays, report)
                entry = self.runner.build(problem, cand.reg, config)
                ws = self.runner.workspace(workspace, entry.workspace_size)
                if check is not None:
                    check.poison()
                timing, note = self._time(canon, entry, arrays, ws, best)
                verdict = check.measure() if check is not None else None
            except Exception as exc:
                record_failure(report, cand.reg, "find", exc)
                continue
            if verdict is not None:
                if not verdict.within:
                    check.reject(cand.reg, verdict, report, config)  # type: ignore[union-attr]
                    continue
                notes = notes_of(cand.reg, state.context, canon, config)
                check.keep(cand.reg, verdict, policy, notes)  # type: ignore[union-attr]
                note = "; ".join(filter(None, (verdict.note(), note)))
            log.debug("%s: %s %s", problem.key, cand.reg.name, timing)
            report.benchmarked.append(cand.reg.name)
            best = min(best, timing.median_ms)
            out.append(
                Solution(
                    problem=problem,
                    solver=cand.reg.name,
                    solver_id=cand.reg.id,
                    algorithm=cand.reg.algorithm,
                    time_ms=timing.median_ms,
                    workspace_size=entry.workspace_size,
                    source="measured",
                    is_estimate=False,
                    timing=timing,
                    perf_config=config,
                    note=note,
                )
            )
        if progress is not None:
            progress(len(ordered), len(ordered), "")
        out = self._alternatives(
            problem, ordered, out, arrays, workspace, check, policy, workspace_limit
        )
        if check is not None:
            from miocore.find.verify import against_plain_paths

            out = against_plain_paths(check, out, report)
        return out

    def _alternatives(
        self,
        problem: ConvProblem,
        candidates: list[Candidate],
        out: list[Solution],
        arrays: dict[str, Any],
        workspace: Any,
        check: Any,
        policy: AccuracyPolicy,
        limit: int | None,
    ) -> list[Solution]:
        """Measure the :meth:`~TunableSolver.find_configs` of every solver whose default came
        within ``MIOCORE_FIND_ALTERNATIVES`` of the best (none from the PerfDb) and keep its
        fastest accurate one: a vendor engine's listed settings differ by 10-25% per problem,
        which is what PyTorch's benchmark mode chooses among. A setting whose workspace is
        over the caller's ``limit`` is not measured."""
        near = alternatives_factor()
        if not near or not out:
            return out
        best = min(s.time_ms for s in out)
        by_name = {c.reg.name: c for c in candidates}
        canon = problem.canonical
        for i, solution in enumerate(out):
            cand = by_name.get(solution.solver)
            if cand is None or cand.perf_db_entry or solution.time_ms > near * best:
                continue
            solver = cand.reg.solver
            if not isinstance(solver, TunableSolver):
                continue
            context = self.state.context
            for config in solver.find_configs(context, canon):
                notes = notes_of(cand.reg, context, canon, config)
                if config == solution.perf_config or not policy.allows(notes):
                    continue
                try:
                    entry = self.runner.build(problem, cand.reg, config)
                    if limit is not None and entry.workspace_size > limit:
                        continue
                    ws = self.runner.workspace(workspace, entry.workspace_size)
                    if check is not None:
                        check.poison()
                    timing, note = self._time(canon, entry, arrays, ws, solution.time_ms)
                    verdict = check.measure() if check is not None else None
                except Exception as exc:  # one setting failing leaves the measured one
                    log.debug("%s: %s %s failed: %s", problem.key, solution.solver, config, exc)
                    continue
                if timing.median_ms >= solution.time_ms or (verdict and not verdict.within):
                    continue
                if verdict is not None:
                    check.keep(cand.reg, verdict, policy, notes)
                    note = "; ".join(filter(None, (verdict.note(), note)))
                solution = evolve(
                    solution,
                    time_ms=timing.median_ms,
                    timing=timing,
                    workspace_size=entry.workspace_size,
                    perf_config=config,
                    note=note,
                )
            out[i] = solution
            best = min(best, solution.time_ms)
        return out

    def _precompile(self, canon: ConvProblem, candidates: list[Candidate]) -> None:
        """Compile every candidate's kernels in parallel (``MIOCORE_COMPILE_PARALLEL_LEVEL``)
        before benchmarking; a failure surfaces again, per solver, when find builds it."""
        kernels = []
        for cand in candidates:
            if cand.pending is not None:  # its setup is a build of its own, asked when measured
                continue
            try:
                solution = cand.reg.solver.get_solution(self.state.context, canon, cand.perf_config)
            except Exception:  # reported by the build, with the solver's name
                continue
            kernels.extend(solution.kernels)
        if kernels:
            self.state.backend.precompile(kernels)

    def _buffers(self, problem: ConvProblem, buffers: dict[str, Any]) -> dict[str, Any]:
        given = {k: v for k, v in buffers.items() if v is not None}
        if given and len(given) != 3:
            missing = sorted(set(buffers) - set(given))
            raise InvalidArgumentError(
                "pass all of x, w and y to find on your buffers, or none",
                field=missing[0],
                value=None,
            )
        if given:
            return self.runner.canonical_arrays(problem, given)
        import numpy as np  # random data only when find measures

        rng = np.random.default_rng(0)
        canon = problem.canonical
        backend = self.state.backend
        return {name: backend.random(getattr(canon, name), rng) for name in ("x", "w", "y")}

    def _time(
        self,
        canon: ConvProblem,
        entry: CachedInvoker,
        arrays: dict[str, Any],
        workspace: Any,
        best_ms: float,
        *,
        min_runs: int = 3,
        max_runs: int = 15,
        min_total_ms: float = 40.0,
    ) -> tuple[Timing, str]:
        params = InvokeParams(problem=canon, workspace=workspace, **arrays)
        owner = self.runner.owner

        def run() -> None:
            entry.invoker(owner, params)

        return time_candidate(
            self.state.backend,
            run,
            best_ms,
            min_runs=min_runs,
            max_runs=max_runs,
            min_total_ms=min_total_ms,
        )

    # -- tuning ------------------------------------------------------------------------------

    def _tune(
        self, problem: ConvProblem, cand: Candidate, arrays: dict[str, Any], report: FindReport
    ) -> PerfConfig:
        from miocore.db import make_provenance

        state = self.state
        canon = problem.canonical
        solver = cand.reg.solver
        assert isinstance(solver, TunableSolver)
        budget_s = float(env.positive_int("MIOCORE_TUNING_BUDGET_S", 30))
        deadline = time.monotonic() + budget_s
        best: tuple[float, PerfConfig] | None = None
        tried = 0
        for config in solver.perf_config_space(state.context, canon):
            if time.monotonic() > deadline:
                break
            if not solver.is_valid_perf_config(state.context, canon, config):
                continue
            try:
                entry = self.runner.build(problem, cand.reg, config)
                ws = state.backend.allocate_workspace(entry.workspace_size)
                timing, _ = self._time(
                    canon,
                    entry,
                    arrays,
                    ws,
                    best[0] if best else float("inf"),
                    min_runs=2,
                    max_runs=5,
                    min_total_ms=10.0,
                )
            except Exception as exc:
                log.warning(
                    "tuning %s: config %s failed: %s", cand.reg.name, config.to_string(), exc
                )
                continue
            tried += 1
            if best is None or timing.median_ms < best[0]:
                best = (timing.median_ms, config)
        if best is None:
            report.tuned[cand.reg.name] = "no valid config ran; using the default"
            return solver.default_perf_config(state.context, canon)
        state.perf_db.put(
            state.record_key(canon),
            cand.reg.name,
            best[1].to_string(),
            make_provenance(
                state.device.identity,
                plugin=cand.reg.distribution,
                plugin_version=cand.reg.version,
                time_ms=f"{best[0]:.6g}",
                configs_tried=str(tried),
            ),
        )
        state.forget(state.record_key(canon))
        report.tuned[cand.reg.name] = (
            f"{best[1].to_string()} ({best[0]:.4g} ms, {tried} configs tried)"
        )
        return best[1]

    # -- records -----------------------------------------------------------------------------

    def write_record(
        self, problem: ConvProblem, solutions: Sequence[Solution], mode: FindMode
    ) -> None:
        """Write the user FindDb record of ``problem`` (replacing any earlier one)."""
        from miocore.db import FindDbEntry, make_provenance

        state = self.state
        entries = []
        for s in solutions:
            reg = state.registry.get(s.solver)
            revision = solver_revision(reg)
            # every entry runs today's settings (a stale one was given the default): each is
            # recorded as of the installed revision
            current = {SOLVER_REVISION: str(revision)} if revision else {}
            entries.append(
                FindDbEntry(
                    solver=s.solver,
                    algorithm=s.algorithm.value,
                    time_ms=s.time_ms,
                    workspace_size=s.workspace_size,
                    spread_ms=s.timing.spread_ms if s.timing else None,
                    count=s.timing.count if s.timing else 0,
                    perf_config=s.perf_config.to_string() if s.perf_config is not None else None,
                    provenance=make_provenance(
                        state.device.identity,
                        plugin=reg.distribution,
                        plugin_version=reg.version,
                        find_mode=mode.name,
                        **self.accuracy_provenance.get(s.solver, {}),
                        **current,
                    ),
                )
            )
        key = state.record_key(problem)
        state.find_db.write(key, entries)
        state.forget(key)
        log.debug("%s: wrote the user FindDb record (%d entries)", problem.key, len(entries))
