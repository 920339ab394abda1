"""The handle: one device, its databases and caches; every find and run call goes through it."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import numpy as np

from miocore import env
from miocore.backends import open_backend
from miocore.errors import (
    InvalidArgumentError,
    InvalidEnvironmentError,
    MiocoreError,
    NoApplicableSolverError,
    NotApplicableError,
    PluginError,
    SolverFailedError,
    UnknownSolverError,
)
from miocore.find.invoker_cache import CachedInvoker, InvokerCache
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import (
    Algorithm,
    ConvSolution,
    ExecutionContext,
    InvokeParams,
    KernelInfo,
    PerfConfig,
    TunableSolver,
    normalize_applicability,
)
from miocore.solver.registry import RegisteredSolver, Registry, default_registry
from miocore.solver.results import (
    AlgorithmPerf,
    FindReport,
    Solution,
    Solutions,
    Timing,
    order_with_ties,
)

log = logging.getLogger("miocore.find")

FindMode = env.FindMode
FindEnforce = env.FindEnforce

#: Called during find as ``progress(done, total, solver_name)``.
ProgressCallback = Callable[[int, int, str], None]


@attrs.define
class _Candidate:
    reg: RegisteredSolver
    perf_config: PerfConfig | None
    workspace_size: int
    perf_db_entry: bool


class Handle:
    """One device with its FindDb, PerfDb and invoker cache.

    ``Handle("cpu")``; ``"cuda"``, ``"cuda:1"``, ``"hip"``, ``"hip:0"`` where a GPU backend is
    installed. ``registry`` defaults to the installed plugins; ``user_db_path`` and
    ``system_db_path`` override ``MIOCORE_USER_DB_PATH`` and ``MIOCORE_SYSTEM_DB_PATH``.
    On a GPU, ``stream`` is the stream every run goes on (a raw handle, a ``torch.cuda.Stream``
    such as ``torch.cuda.current_stream()``, a CuPy stream; default: the default stream).
    ``math_mode`` is ``"exact"`` (default) or ``"tf32"``: only ``"tf32"`` lets solvers that
    round fp32 inputs to TF32 apply (``igemm.gpu_tf32``); an exact handle never gets them,
    not even from a FindDb record another handle wrote.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        registry: Registry | None = None,
        user_db_path: str | Path | None = None,
        system_db_path: str | Path | None = None,
        stream: Any = None,
        math_mode: str = "exact",
    ) -> None:
        self.backend = (
            open_backend(device) if stream is None else open_backend(device, stream=stream)
        )
        if hasattr(self.backend, "bind_registry"):  # GPU backends find kernel sources there
            self.backend.bind_registry(lambda: self.registry)
        self.device = self.backend.device
        self.context = ExecutionContext(device=self.device, math_mode=math_mode)
        self._registry = registry
        self._user_db_path = Path(user_db_path) if user_db_path is not None else None
        self._system_db_path = Path(system_db_path) if system_db_path is not None else None
        self._find_db: Any = None
        self._perf_db: Any = None
        self.invoker_cache = InvokerCache()
        self.last_report: FindReport | None = None
        self._candidate_memo: dict[
            tuple[Any, ...], tuple[tuple[_Candidate, ...], dict[str, dict[str, str]]]
        ] = {}
        self._record_memo: dict[str, list[Any]] = {}
        self._record_signature: tuple[Any, ...] = ()

    def __repr__(self) -> str:
        return f"Handle({self.backend.name!r}, device={self.device.identity!r})"

    # -- shared state ----------------------------------------------------------------------

    @property
    def registry(self) -> Registry:
        """The solvers this handle considers."""
        return self._registry if self._registry is not None else default_registry()

    @property
    def find_db(self) -> Any:
        """The FindDb of this handle's device (user layer first, then system)."""
        if self._find_db is None:
            from miocore.db import FindDb

            self._find_db = FindDb(
                self.device.identity, user_dir=self._user_db_path, system_dir=self._system_db_path
            )
        return self._find_db

    @property
    def perf_db(self) -> Any:
        """The PerfDb (tuned performance configs) of this handle's device."""
        if self._perf_db is None:
            from miocore.db import PerfDb

            self._perf_db = PerfDb(
                self.device.identity, user_dir=self._user_db_path, system_dir=self._system_db_path
            )
        return self._perf_db

    # -- Find 2.0 --------------------------------------------------------------------------

    def find_solutions(
        self,
        problem: ConvProblem,
        *,
        sort_by: str = "time",
        workspace_limit: int | None = None,
        max_results: int | None = None,
        exhaustive: bool = False,
        find_mode: Any = None,
        find_enforce: Any = None,
        x: Any = None,
        w: Any = None,
        y: Any = None,
        workspace: Any = None,
        progress: ProgressCallback | None = None,
    ) -> Solutions:
        """Solutions for ``problem``, fastest first, following the find mode (design guide §4).

        Buffers are optional: without them find benchmarks on random data of its own. With
        them, the output tensor of the direction is overwritten. The returned list has a
        ``report`` saying what was done and why each left-out solver was left out.
        """
        problem = _check_problem(problem)
        mode = FindMode.parse(find_mode, "find_mode") if find_mode is not None else env.find_mode()
        enforce = (
            FindEnforce.parse(find_enforce, "find_enforce")
            if find_enforce is not None
            else env.find_enforce()
        )
        if enforce is not FindEnforce.NONE:
            mode = FindMode.NORMAL
        limit = _check_limit(workspace_limit)
        report = FindReport(key=problem.key, mode=mode.name, enforce=enforce.name)
        self.last_report = report
        if enforce is FindEnforce.DB_CLEAN:
            self.find_db.delete(problem.key)
            self.perf_db.delete(problem.key)
            self._forget(problem.key)
        use_perf_db = enforce is not FindEnforce.DB_CLEAN
        candidates = self._candidates(problem, report, limit, use_perf_db=use_perf_db)
        if not candidates:
            raise self._nothing_applies(problem, report, limit)

        if mode is not FindMode.NORMAL:
            hit = self._db_solutions(problem, candidates, report)
            if hit:
                return self._finish(hit, report, sort_by, max_results)
            if mode is FindMode.FAST:
                ranked = self._fallback_ranking(problem, candidates)
                return self._finish(ranked, report, sort_by, max_results, ordered=True)
            if mode is FindMode.DYNAMIC_HYBRID:
                dynamic = [c for c in candidates if c.reg.solver.is_dynamic]
                for c in candidates:
                    if not c.reg.solver.is_dynamic:
                        report.skipped[c.reg.name] = (
                            "DYNAMIC_HYBRID find benchmarks only dynamic solvers on a miss"
                        )
                if dynamic:
                    candidates = dynamic
                else:
                    report.skipped.clear()
                    log.info("no dynamic solver applies to %s; benchmarking all", problem.key)
        measured = self._benchmark_all(
            problem,
            candidates,
            report,
            exhaustive=exhaustive,
            enforce=enforce,
            buffers={"x": x, "w": w, "y": y},
            workspace=workspace,
            progress=progress,
        )
        if not measured:
            raise NoApplicableSolverError(
                f"every applicable solver failed on {problem.key}: "
                + "; ".join(f"{k}: {v}" for k, v in report.failed.items())
            )
        ordered = order_with_ties(measured)
        self._write_find_record(problem, ordered, mode)
        report.wrote_db = True
        return self._finish(ordered, report, sort_by, max_results, ordered=True)

    def run_solution(
        self, solution: Solution, *, x: Any, w: Any, y: Any, workspace: Any = None
    ) -> None:
        """Run a solution (from any find, in any process) on the caller's buffers."""
        if not isinstance(solution, Solution):
            raise InvalidArgumentError(
                "expected a miocore Solution", field="solution", value=type(solution).__name__
            )
        entry = self._invoker(solution.problem, solution.solver, solution.perf_config)
        self._run(solution.problem, entry, x=x, w=w, y=y, workspace=workspace)

    # -- immediate mode --------------------------------------------------------------------

    def get_solutions(
        self,
        problem: ConvProblem,
        *,
        workspace_limit: int | None = None,
        max_results: int | None = None,
    ) -> Solutions:
        """Every applicable solution without benchmarking: recorded ones first (FindDb), the
        rest ranked by the fallback chain (heuristic, then WTI, GEMM last)."""
        problem = _check_problem(problem)
        limit = _check_limit(workspace_limit)
        report = FindReport(key=problem.key, mode="IMMEDIATE", enforce="NONE")
        self.last_report = report
        candidates = self._candidates(problem, report, limit, use_perf_db=True)
        if not candidates:
            raise self._nothing_applies(problem, report, limit)
        recorded = self._db_solutions(problem, candidates, report)
        seen = {s.solver for s in recorded}
        rest = self._fallback_ranking(problem, [c for c in candidates if c.reg.name not in seen])
        return self._finish([*recorded, *rest], report, "time", max_results, ordered=True)

    def get_solution_count(
        self, problem: ConvProblem, *, workspace_limit: int | None = None
    ) -> int:
        """How many solutions :meth:`get_solutions` would return."""
        return len(self.get_solutions(problem, workspace_limit=workspace_limit))

    def get_solution_workspace_size(self, problem: ConvProblem, solver: str | int) -> int:
        """Workspace bytes ``solver`` needs for ``problem``, with the perf config it would use."""
        problem = _check_problem(problem)
        reg = self._applicable_solver(problem, solver)
        config = self._stored_perf_config(reg, problem.canonical, use_perf_db=True)[0]
        return self._workspace(reg, problem.canonical, config)

    def compile_solution(self, problem: ConvProblem, solver: str | int) -> Solution:
        """Build and cache the invoker of ``solver`` for ``problem``; return its solution."""
        problem = _check_problem(problem)
        reg = self._applicable_solver(problem, solver)
        config = self._stored_perf_config(reg, problem.canonical, use_perf_db=True)[0]
        entry = self._invoker(problem, reg.name, config)
        found = [s for s in self.get_solutions(problem) if s.solver == reg.name]
        if found:
            return found[0]
        return self._estimate(problem, reg, entry.workspace_size, config)

    def immediate(
        self,
        problem: ConvProblem,
        solver: str | int,
        *,
        x: Any,
        w: Any,
        y: Any,
        workspace: Any = None,
    ) -> None:
        """Run ``solver`` on ``problem`` without find (compiling on first use)."""
        problem = _check_problem(problem)
        network_config = problem.network_config
        entry = self.invoker_cache.get(network_config, solver) if isinstance(solver, str) else None
        if entry is None:
            entry = self.invoker_cache.get(network_config, self.registry.get(solver).name)
        if entry is None:
            reg = self._applicable_solver(problem, solver)
            config = self._stored_perf_config(reg, problem.canonical, use_perf_db=True)[0]
            entry = self._invoker(problem, reg.name, config)
        self._run(problem, entry, x=x, w=w, y=y, workspace=workspace)

    # -- Find 1.0 --------------------------------------------------------------------------

    def find_convolution_algorithm(
        self,
        problem: ConvProblem,
        *,
        x: Any,
        w: Any,
        y: Any,
        request_algo_count: int = 4,
        workspace: Any = None,
        exhaustive: bool = False,
    ) -> list[AlgorithmPerf]:
        """The best solver of each algorithm family, fastest first (MIOpen's Find 1.0).

        The buffers are used for benchmarking; the direction's output is overwritten. With a
        workspace, only solutions that fit in it are considered.
        """
        problem = _check_problem(problem)
        if (
            isinstance(request_algo_count, bool)
            or not isinstance(request_algo_count, int)
            or (request_algo_count < 1)
        ):
            raise InvalidArgumentError(
                "must be an integer >= 1", field="request_algo_count", value=request_algo_count
            )
        limit = None
        if workspace is not None:
            limit = int(getattr(workspace, "nbytes", 0))
        solutions = self.find_solutions(
            problem,
            workspace_limit=limit,
            exhaustive=exhaustive,
            x=x,
            w=w,
            y=y,
            workspace=workspace,
        )
        best: dict[Algorithm, Solution] = {}
        for s in solutions:
            best.setdefault(s.algorithm, s)
        network_config = problem.network_config
        out = []
        for algorithm, s in best.items():
            self.invoker_cache.set_solver_for(network_config, algorithm, s.solver)
            out.append(
                AlgorithmPerf(
                    algorithm=algorithm,
                    time_ms=s.time_ms,
                    memory=s.workspace_size,
                    solver=s.solver,
                    source=s.source,
                    is_estimate=s.is_estimate,
                )
            )
        return out[:request_algo_count]

    def convolution(
        self,
        problem: ConvProblem,
        algorithm: Any,
        *,
        x: Any,
        w: Any,
        y: Any,
        alpha: float = 1.0,
        beta: float = 0.0,
        workspace: Any = None,
    ) -> None:
        """Run the best known solver of ``algorithm``: ``out = alpha * conv + beta * out``.

        Works without a prior find in this process: the choice comes from Find 1.0's memory,
        else the FindDb, else immediate-mode ranking.
        """
        problem = _check_problem(problem)
        algo = Algorithm.parse(algorithm)
        for name, value in (("alpha", alpha), ("beta", beta)):
            if not isinstance(value, (int, float)) or not np.isfinite(value):
                raise InvalidArgumentError("must be a finite number", field=name, value=value)
        network_config = problem.network_config
        name = self.invoker_cache.solver_for(network_config, algo)
        if name is None:
            ranked = [s for s in self.get_solutions(problem) if s.algorithm is algo]
            if not ranked:
                raise NoApplicableSolverError(
                    f"no installed solver of algorithm {algo.value!r} applies to {problem.key}",
                    field="algorithm",
                    value=algo.value,
                )
            name = ranked[0].solver
            self.invoker_cache.set_solver_for(network_config, algo, name)
        entry = self.invoker_cache.get(network_config, name)
        if entry is None:
            reg = self._applicable_solver(problem, name)
            config = self._stored_perf_config(reg, problem.canonical, use_perf_db=True)[0]
            entry = self._invoker(problem, reg.name, config)
        self._run(
            problem, entry, x=x, w=w, y=y, workspace=workspace, alpha=float(alpha), beta=float(beta)
        )

    # -- internals: candidates ---------------------------------------------------------------

    def _candidates(
        self, problem: ConvProblem, report: FindReport, limit: int | None, *, use_perf_db: bool
    ) -> list[_Candidate]:
        # Solvers are stateless and pure, so their answers for one problem never change; only
        # the switches, the registry and this handle's own PerfDb writes can change the list.
        memo_key = (problem.network_config, limit, use_perf_db, id(self.registry), _switches())
        found = self._candidate_memo.get(memo_key)
        if found is not None:
            candidates, left_out = found
            for name, table in left_out.items():
                getattr(report, name).update(table)
            return list(candidates)
        candidates = self._find_candidates(problem, report, limit, use_perf_db=use_perf_db)
        if not report.failed:  # a failure may be transient: ask again next time
            left_out = {name: dict(getattr(report, name)) for name in ("not_applicable", "skipped")}
            self._candidate_memo[memo_key] = (tuple(candidates), left_out)
            while len(self._candidate_memo) > 1024:
                self._candidate_memo.pop(next(iter(self._candidate_memo)))
        return candidates

    def _find_candidates(
        self, problem: ConvProblem, report: FindReport, limit: int | None, *, use_perf_db: bool
    ) -> list[_Candidate]:
        canon = problem.canonical
        only = env.only_solver()
        registry = self.registry
        if only is not None:
            try:
                only = registry.get(only).name
            except UnknownSolverError as exc:
                raise UnknownSolverError(
                    str(exc).split(": ", 1)[-1], field="MIOCORE_FIND_ONLY_SOLVER", value=only
                ) from None
        out = []
        for reg in registry.solvers:
            solver = reg.solver
            if only is not None and reg.name != only:
                continue
            if self.backend.name not in solver.backends:
                report.not_applicable[reg.name] = (
                    f"runs on {', '.join(sorted(solver.backends))}, not {self.backend.name}"
                )
                continue
            algo = solver.algorithm.value
            if not env.algorithm_enabled(algo):
                report.skipped[reg.name] = f"disabled by MIOCORE_DEBUG_CONV_{algo.upper()}=0"
                continue
            try:
                answer = normalize_applicability(solver.is_applicable(self.context, canon))
            except Exception as exc:
                self._solver_failed(report, reg, "is_applicable", exc)
                continue
            if not answer:
                report.not_applicable[reg.name] = answer.reason or "not applicable"
                continue
            try:
                config, from_db = self._stored_perf_config(reg, canon, use_perf_db=use_perf_db)
                workspace = self._workspace(reg, canon, config)
            except Exception as exc:
                self._solver_failed(report, reg, "workspace_size", exc)
                continue
            if limit is not None and workspace > limit:
                report.skipped[reg.name] = f"needs {workspace} B of workspace, limit is {limit} B"
                continue
            out.append(
                _Candidate(
                    reg=reg, perf_config=config, workspace_size=workspace, perf_db_entry=from_db
                )
            )
        return out

    def _nothing_applies(
        self, problem: ConvProblem, report: FindReport, limit: int | None
    ) -> Exception:
        if not len(self.registry):
            return NoApplicableSolverError(
                f"no solver can solve {problem.key}: no solver plugin is installed. Install one "
                "(for example `pip install miocore-gemm`) or check MIOCORE_DISABLE_PLUGINS."
            )
        reasons = [
            *(f"{k}: {v}" for k, v in report.not_applicable.items()),
            *(f"{k}: {v}" for k, v in report.skipped.items()),
            *(f"{k}: failed: {v}" for k, v in report.failed.items()),
        ]
        if not reasons:
            reasons = ["MIOCORE_FIND_ONLY_SOLVER excludes every solver"]
        where = f" within a workspace limit of {limit} B" if limit is not None else ""
        return NoApplicableSolverError(
            f"no installed solver can solve {problem.key}{where}: " + "; ".join(reasons)
        )

    def _applicable_solver(self, problem: ConvProblem, solver: str | int) -> RegisteredSolver:
        reg = self.registry.get(solver)
        if self.backend.name not in reg.solver.backends:
            raise NotApplicableError(
                f"runs on {sorted(reg.solver.backends)}, not {self.backend.name}",
                field="solver",
                value=reg.name,
            )
        with _naming_culprit(reg, "is_applicable"):
            answer = normalize_applicability(
                reg.solver.is_applicable(self.context, problem.canonical)
            )
        if not answer:
            raise NotApplicableError(
                f"does not apply to {problem.key}: {answer.reason}", field="solver", value=reg.name
            )
        return reg

    def _solver_failed(
        self, report: FindReport, reg: RegisteredSolver, stage: str, exc: BaseException
    ) -> None:
        message = (
            f"{stage} raised {type(exc).__name__}: {exc} "
            f"(plugin {reg.plugin}, {reg.distribution} {reg.version})"
        )
        report.failed[reg.name] = message
        log.warning(
            "solver %s (%s %s) %s; skipped", reg.name, reg.distribution, reg.version, message
        )

    # -- internals: perf configs and workspace -------------------------------------------------

    def _stored_perf_config(
        self, reg: RegisteredSolver, canon: ConvProblem, *, use_perf_db: bool
    ) -> tuple[PerfConfig | None, bool]:
        solver = reg.solver
        if not isinstance(solver, TunableSolver):
            return None, False
        if use_perf_db:
            entry = self.perf_db.get(canon.key, reg.name)
            if entry is not None:
                try:
                    config = PerfConfig.from_string(entry.perf_config)
                    if solver.is_valid_perf_config(self.context, canon, config):
                        return config, True
                except Exception as exc:  # a stale or foreign entry must not break find
                    log.warning("ignoring PerfDb entry of %s for %s: %s", reg.name, canon.key, exc)
        return solver.default_perf_config(self.context, canon), False

    def _workspace(
        self, reg: RegisteredSolver, canon: ConvProblem, config: PerfConfig | None
    ) -> int:
        size = reg.solver.workspace_size(self.context, canon, config)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidArgumentError(
                "workspace_size must return an integer >= 0",
                field=f"{reg.name}.workspace_size",
                value=size,
            )
        return size

    # -- internals: database ---------------------------------------------------------------------

    def _db_solutions(
        self, problem: ConvProblem, candidates: list[_Candidate], report: FindReport
    ) -> list[Solution]:
        usable = {c.reg.name: c for c in candidates}
        for record in self._records(problem.key):
            out = []
            for entry in record.entries:
                cand = usable.get(entry.solver)
                if cand is None:
                    continue
                timing = None
                if entry.count:
                    spread = entry.spread_ms or 0.0
                    timing = Timing(
                        median_ms=entry.time_ms,
                        spread_ms=spread,
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
                        workspace_size=cand.workspace_size,
                        source="find-db" if record.layer == "user" else "system-db",
                        is_estimate=False,
                        timing=timing,
                        perf_config=cand.perf_config,
                        note=f"recorded {entry.provenance.get('written_at', 'earlier')}",
                    )
                )
            if out:
                report.db_hit = f"the {record.layer} FindDb"
                return order_with_ties(out)
        return []

    def _records(self, key: str) -> list[Any]:
        """FindDb records of ``key``, read again only when a database file changed.

        A commit by any connection, in this process or another, changes the file or its
        write-ahead log; four ``stat`` calls are far cheaper than a query.
        """
        signature = self._db_signature()
        if signature != self._record_signature:
            self._record_memo.clear()
            self._record_signature = signature
        found = self._record_memo.get(key)
        if found is None:
            found = self._record_memo[key] = self.find_db.records(key)
            while len(self._record_memo) > 4096:
                self._record_memo.pop(next(iter(self._record_memo)))
        return found

    def _db_signature(self) -> tuple[Any, ...]:
        out: list[Any] = []
        for base in (self.find_db.user_path, self.find_db.system_path):
            for path in (base, base.with_name(base.name + "-wal")):
                try:
                    st = path.stat()
                    out.append((st.st_mtime_ns, st.st_size))
                except OSError:
                    out.append(None)
        return tuple(out)

    def _forget(self, key: str) -> None:
        self._record_memo.pop(key, None)
        self._candidate_memo.clear()  # perf configs (and so workspaces) may have changed

    def _write_find_record(
        self, problem: ConvProblem, solutions: Sequence[Solution], mode: FindMode
    ) -> None:
        from miocore.db import FindDbEntry, make_provenance

        entries = []
        for s in solutions:
            reg = self.registry.get(s.solver)
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
                        self.device.identity,
                        plugin=reg.distribution,
                        plugin_version=reg.version,
                        find_mode=mode.name,
                    ),
                )
            )
        self.find_db.write(problem.key, entries)
        self._forget(problem.key)

    # -- internals: immediate-mode fallback ----------------------------------------------------

    def _fallback_ranking(
        self, problem: ConvProblem, candidates: list[_Candidate]
    ) -> list[Solution]:
        canon = problem.canonical
        by_name = {c.reg.name: c for c in candidates}
        ranked: list[Solution] = []
        for info, heuristic in self.registry.heuristics:
            try:
                if not heuristic.is_applicable(self.context, canon):
                    continue
                order = heuristic.rank(self.context, canon, list(by_name))
            except Exception as exc:
                log.warning("heuristic %s (%s) failed: %s", heuristic.name, info.label, exc)
                continue
            for name, estimate in order:
                cand = by_name.pop(name, None)
                if cand is not None:
                    ranked.append(
                        self._estimate(
                            problem,
                            cand.reg,
                            cand.workspace_size,
                            cand.perf_config,
                            source="heuristic",
                            time_ms=float(estimate),
                            note=f"ranked by {heuristic.name}",
                        )
                    )
            break  # the first applicable heuristic decides
        by_wti: list[tuple[float, Solution]] = []
        unknown: list[_Candidate] = []
        for cand in by_name.values():
            try:
                score = float(cand.reg.solver.wti(self.context, canon))
            except Exception as exc:
                log.warning("solver %s wti raised %s; ranked last", cand.reg.name, exc)
                score = -1.0
            if score > 0 and np.isfinite(score):
                estimate = self.context.ideal_ms(canon) / score
                by_wti.append(
                    (
                        score,
                        self._estimate(
                            problem,
                            cand.reg,
                            cand.workspace_size,
                            cand.perf_config,
                            source="wti",
                            time_ms=estimate,
                            note=f"WTI {score:.3g}",
                        ),
                    )
                )
            else:
                unknown.append(cand)
        by_wti.sort(key=lambda pair: (-pair[0], pair[1].solver))
        ranked.extend(s for _, s in by_wti)
        # Solvers without an estimate come last, the GEMM family (the universal fallback) first.
        unknown.sort(key=lambda c: (c.reg.algorithm is not Algorithm.GEMM, c.reg.name))
        ranked.extend(
            self._estimate(
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

    def _estimate(
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
        if time_ms is None:
            score = reg.solver.wti(self.context, problem.canonical)
            time_ms = (
                self.context.ideal_ms(problem.canonical) / score if score > 0 else float("inf")
            )
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

    # -- internals: benchmarking and tuning ------------------------------------------------

    def _benchmark_all(
        self,
        problem: ConvProblem,
        candidates: list[_Candidate],
        report: FindReport,
        *,
        exhaustive: bool,
        enforce: FindEnforce,
        buffers: dict[str, Any],
        workspace: Any,
        progress: ProgressCallback | None,
    ) -> list[Solution]:
        canon = problem.canonical
        arrays = self._find_buffers(problem, buffers)
        # Likely winners first, so the cut-offs for hopeless candidates have a reference.
        ideal = self.context.ideal_ms(canon)
        predicted: dict[str, float] = {}
        for c in candidates:
            try:
                score = float(c.reg.solver.wti(self.context, canon))
            except Exception:
                score = -1.0
            predicted[c.reg.name] = (
                ideal / score if score > 0 and np.isfinite(score) else float("inf")
            )
        ordered = sorted(candidates, key=lambda c: (predicted[c.reg.name], c.reg.name))
        if hasattr(self.backend, "precompile"):
            self._precompile(canon, ordered)
        prune = _prune_factor()
        out: list[Solution] = []
        best = float("inf")
        for done, cand in enumerate(ordered):
            if progress is not None:
                progress(done, len(ordered), cand.reg.name)
            guess = predicted[cand.reg.name]
            if prune and np.isfinite(guess) and guess > prune * best:
                report.skipped[cand.reg.name] = (
                    f"pruned: its WTI predicts {guess:.4g} ms, over {prune:g}x the best measured "
                    f"{best:.4g} ms"
                )
                continue
            try:
                config = cand.perf_config
                if isinstance(cand.reg.solver, TunableSolver) and _should_tune(
                    enforce, exhaustive, cand.perf_db_entry
                ):
                    config = self._tune(problem, cand, arrays, report)
                entry = self._build(problem, cand.reg, config)
                ws = self._find_workspace(workspace, entry.workspace_size)
                timing, note = self._time(canon, entry, arrays, ws, best)
            except Exception as exc:
                self._solver_failed(report, cand.reg, "find", exc)
                continue
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
        return out

    def _precompile(self, canon: ConvProblem, candidates: list[_Candidate]) -> None:
        """Compile every candidate's kernels in parallel (``MIOCORE_COMPILE_PARALLEL_LEVEL``)
        before benchmarking; a failure surfaces again, per solver, when find builds it."""
        kernels = []
        for cand in candidates:
            try:
                solution = cand.reg.solver.get_solution(self.context, canon, cand.perf_config)
            except Exception:  # reported by _build, with the solver's name
                continue
            kernels.extend(solution.kernels)
        if kernels:
            self.backend.precompile(kernels)

    def _find_buffers(self, problem: ConvProblem, buffers: dict[str, Any]) -> dict[str, Any]:
        given = {k: v for k, v in buffers.items() if v is not None}
        if given and len(given) != 3:
            missing = sorted(set(buffers) - set(given))
            raise InvalidArgumentError(
                "pass all of x, w and y to find on your buffers, or none",
                field=missing[0],
                value=None,
            )
        if given:
            return self._canonical_arrays(problem, given)
        rng = np.random.default_rng(0)
        canon = problem.canonical
        return {name: self.backend.random(getattr(canon, name), rng) for name in ("x", "w", "y")}

    def _find_workspace(self, workspace: Any, needed: int) -> Any:
        if workspace is not None:
            return self.backend.check_workspace(workspace, needed)
        return self.backend.allocate_workspace(needed)

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

        def run() -> None:
            entry.invoker(self, params)

        first = self.backend.time_ms(run)  # warm-up: caches, lazy allocations
        # A candidate far slower than the best so far cannot win: one more run is enough to
        # report an honest (measured) time without spending seconds on it.
        if first > 10 * best_ms:
            timing = Timing.from_samples([self.backend.time_ms(run)])
            return (
                timing,
                f"stopped after 1 timed run: over 10x the best time so far ({best_ms:.4g} ms)",
            )
        samples: list[float] = []
        while len(samples) < max_runs:
            samples.append(self.backend.time_ms(run))
            if len(samples) >= min_runs and sum(samples) >= min_total_ms:
                break
        return Timing.from_samples(samples), ""

    def _tune(
        self, problem: ConvProblem, cand: _Candidate, arrays: dict[str, Any], report: FindReport
    ) -> PerfConfig:
        canon = problem.canonical
        solver = cand.reg.solver
        assert isinstance(solver, TunableSolver)
        budget_s = float(env.positive_int("MIOCORE_TUNING_BUDGET_S", 30))
        deadline = time.monotonic() + budget_s
        from miocore.db import make_provenance

        best: tuple[float, PerfConfig] | None = None
        tried = 0
        for config in solver.perf_config_space(self.context, canon):
            if time.monotonic() > deadline:
                break
            if not solver.is_valid_perf_config(self.context, canon, config):
                continue
            try:
                entry = self._build(problem, cand.reg, config)
                ws = self.backend.allocate_workspace(entry.workspace_size)
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
            return solver.default_perf_config(self.context, canon)
        self.perf_db.put(
            canon.key,
            cand.reg.name,
            best[1].to_string(),
            make_provenance(
                self.device.identity,
                plugin=cand.reg.distribution,
                plugin_version=cand.reg.version,
                time_ms=f"{best[0]:.6g}",
                configs_tried=str(tried),
            ),
        )
        self._forget(canon.key)
        report.tuned[cand.reg.name] = (
            f"{best[1].to_string()} ({best[0]:.4g} ms, {tried} configs tried)"
        )
        return best[1]

    # -- internals: building and running -------------------------------------------------------

    def _build(
        self, problem: ConvProblem, reg: RegisteredSolver, config: PerfConfig | None
    ) -> CachedInvoker:
        canon = problem.canonical
        with _naming_culprit(reg, "get_solution"):
            solution = reg.solver.get_solution(self.context, canon, config)
        # A malformed solution is the plugin's bug: name the plugin, distribution and version.
        culprit = f"solver {reg.name!r} of plugin {reg.plugin} ({reg.distribution} {reg.version})"
        flaw = None
        if not isinstance(solution, ConvSolution):
            flaw = f"returned {type(solution).__name__}, expected a miocore.ConvSolution"
        elif solution.solver != reg.name:
            flaw = f"returned a solution naming solver {solution.solver!r}"
        elif not callable(solution.invoker_factory):
            flaw = "returned a solution whose invoker_factory is not callable"
        elif not isinstance(solution.kernels, tuple) or not all(
            isinstance(k, KernelInfo) for k in solution.kernels
        ):
            flaw = "returned a solution whose kernels are not a tuple of miocore.KernelInfo"
        if flaw is not None:
            raise PluginError(
                f"{culprit} {flaw}",
                field=f"{reg.name}.get_solution",
                value=getattr(solution, "solver", type(solution).__name__),
            )
        compiled = self.backend.compile(solution.kernels)
        with _naming_culprit(reg, "invoker_factory"):
            invoker = solution.invoker_factory(compiled)
        if not callable(invoker):
            raise PluginError(
                f"{culprit}: its invoker_factory returned {type(invoker).__name__}, not a callable",
                field=f"{reg.name}.invoker_factory",
                value=type(invoker).__name__,
            )
        entry = CachedInvoker(
            invoker=invoker,
            solver=reg.name,
            perf_config=config,
            workspace_size=solution.workspace_size,
        )
        self.invoker_cache.put(problem.network_config, entry)
        return entry

    def _invoker(
        self, problem: ConvProblem, solver: str, config: PerfConfig | None
    ) -> CachedInvoker:
        entry = self.invoker_cache.get(problem.network_config, solver)
        if entry is not None and entry.perf_config == config:
            return entry
        reg = self._applicable_solver(problem, solver)
        return self._build(problem, reg, config)

    def _canonical_arrays(self, problem: ConvProblem, arrays: dict[str, Any]) -> dict[str, Any]:
        checked = {
            name: self.backend.check_array(getattr(problem, name), arrays[name], name)
            for name in ("x", "w", "y")
        }
        if problem.is_transposed:
            checked["x"], checked["y"] = checked["y"], checked["x"]
        return checked

    def _run(
        self,
        problem: ConvProblem,
        entry: CachedInvoker,
        *,
        x: Any,
        w: Any,
        y: Any,
        workspace: Any,
        alpha: float = 1.0,
        beta: float = 0.0,
    ) -> None:
        arrays = self._canonical_arrays(problem, {"x": x, "w": w, "y": y})
        ws = self._find_workspace(workspace, entry.workspace_size)
        canon = problem.canonical
        out_name = canon.direction.output_tensor
        try:  # free when nothing raises: the run call stays lean
            if alpha == 1.0 and beta == 0.0:
                entry.invoker(self, InvokeParams(problem=canon, workspace=ws, **arrays))
                return
            target = arrays[out_name]
            scratch = self.backend.empty(getattr(canon, out_name))
            entry.invoker(
                self, InvokeParams(problem=canon, workspace=ws, **{**arrays, out_name: scratch})
            )
        except MiocoreError:
            raise
        except Exception as exc:
            reg = self.registry.get(entry.solver)
            raise SolverFailedError(
                reg.name, "run", exc, plugin=f"{reg.plugin} ({reg.distribution} {reg.version})"
            ) from exc
        self.backend.blend(target, scratch, alpha, beta)

    def _finish(
        self,
        solutions: list[Solution],
        report: FindReport,
        sort_by: str,
        max_results: int | None,
        *,
        ordered: bool = False,
    ) -> Solutions:
        if sort_by not in ("time", "workspace"):
            raise InvalidArgumentError(
                "expected 'time' or 'workspace'", field="sort_by", value=sort_by
            )
        if max_results is not None and (
            isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1
        ):
            raise InvalidArgumentError(
                "must be an integer >= 1", field="max_results", value=max_results
            )
        items = list(solutions) if ordered else order_with_ties(solutions)
        if sort_by == "workspace":
            items.sort(key=lambda s: s.workspace_size)  # stable: time order within equal sizes
        if max_results is not None:
            items = items[:max_results]
        return Solutions(items, report)


@contextlib.contextmanager
def _naming_culprit(reg: RegisteredSolver, stage: str) -> Iterator[None]:
    """Re-raise a solver's own exception as SolverFailedError naming its plugin.

    miocore's own errors (a WorkspaceError a solver raises on purpose, say) pass unchanged.
    """
    try:
        yield
    except MiocoreError:
        raise
    except Exception as exc:
        label = f"{reg.plugin} ({reg.distribution} {reg.version})"
        raise SolverFailedError(reg.name, stage, exc, plugin=label) from exc


def _switches() -> tuple[str | None, ...]:
    """The environment switches that change which solvers find considers."""
    names = [
        "MIOCORE_FIND_ONLY_SOLVER",
        *(f"MIOCORE_DEBUG_CONV_{a.value.upper()}" for a in Algorithm),
    ]
    return tuple(os.environ.get(n) for n in names)


def _prune_factor() -> float:
    """``MIOCORE_FIND_PRUNE_FACTOR`` (default 20; 0 turns pruning off)."""
    raw = os.environ.get("MIOCORE_FIND_PRUNE_FACTOR", "").strip()
    if not raw:
        return 20.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value != 0 and value < 1:
        raise InvalidEnvironmentError(
            "expected 0 (off) or a factor >= 1", field="MIOCORE_FIND_PRUNE_FACTOR", value=raw
        )
    return value


def _should_tune(enforce: FindEnforce, exhaustive: bool, has_entry: bool) -> bool:
    """Whether find tunes a tunable solver (design guide §4, find enforce)."""
    if enforce is FindEnforce.SEARCH_DB_UPDATE:
        return True
    if enforce is FindEnforce.SEARCH:
        return not has_entry
    if enforce is FindEnforce.DB_UPDATE:
        return exhaustive
    if enforce is FindEnforce.DB_CLEAN:
        return False
    return exhaustive and not has_entry


def _check_problem(problem: Any) -> ConvProblem:
    if not isinstance(problem, ConvProblem):
        raise InvalidArgumentError(
            "expected a miocore.ConvProblem", field="problem", value=type(problem).__name__
        )
    return problem


def _check_limit(limit: Any) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise InvalidArgumentError(
            "must be an integer >= 0 (bytes) or None", field="workspace_limit", value=limit
        )
    return limit
