"""The handle: the public facade over find. One device, its databases and caches.

Every public call is a few lines here; the work is done by the steps it owns, through which data
flows one way: the candidates step (``candidates``), then either the find engine (``engine``) or
the immediate ranker (``ranker``), then the runner (``runner``). They share one ``FindState``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from miocore import env
from miocore.backends import open_backend
from miocore.errors import InvalidArgumentError, NoApplicableSolverError
from miocore.find.ahead import compile_ahead
from miocore.find.candidates import Candidates
from miocore.find.engine import FindEngine, ProgressCallback
from miocore.find.hit import find_start, recorded_hit
from miocore.find.invoker_cache import CachedInvoker, InvokerCache
from miocore.find.prepared import PreparedRun
from miocore.find.ranker import ImmediateRanker
from miocore.find.runner import Runner
from miocore.find.state import FindState
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import Algorithm, ExecutionContext
from miocore.solver.registry import Registry
from miocore.solver.results import AlgorithmPerf, FindReport, Solution, Solutions, order_with_ties

FindMode = env.FindMode
FindEnforce = env.FindEnforce

__all__ = ["FindEnforce", "FindMode", "Handle", "ProgressCallback"]


class Handle:
    """One device with its FindDb, PerfDb and invoker cache.

    ``Handle("cpu")``; ``"cuda"``, ``"cuda:1"``, ``"hip"``, ``"hip:0"`` where a GPU backend is
    installed. ``registry`` defaults to the installed plugins; ``user_db_path`` and
    ``system_db_path`` override ``MIOCORE_USER_DB_PATH`` and ``MIOCORE_SYSTEM_DB_PATH``.
    On a GPU, ``stream`` is the stream every run goes on (a raw handle, a ``torch.cuda.Stream``
    such as ``torch.cuda.current_stream()``, a CuPy stream; default: the default stream).
    ``math_mode`` is ``"exact"`` (default) or ``"tf32"``: only ``"tf32"`` lets solvers that
    round fp32 inputs to TF32 apply (``igemm.gpu_tf32``); an exact handle never gets them,
    not even from a FindDb record another handle wrote. ``threads`` (CPU only; default
    ``MIOCORE_CPU_THREADS``) caps every CPU thread pool, so find times what runs will use.
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
        threads: int | None = None,
    ) -> None:
        self.backend = (
            open_backend(device) if stream is None else open_backend(device, stream=stream)
        )
        if threads is not None:
            if not hasattr(self.backend, "set_threads"):
                raise InvalidArgumentError(
                    "threads applies to the CPU backend only", field="threads", value=threads
                )
            self.backend.set_threads(threads)
        if hasattr(self.backend, "bind_registry"):  # GPU backends find kernel sources there
            self.backend.bind_registry(lambda: self.registry)
        self.device = self.backend.device
        self.context = ExecutionContext(device=self.device, math_mode=math_mode)
        self.state = FindState(
            self.backend,
            self.context,
            registry=registry,
            user_db_path=Path(user_db_path) if user_db_path is not None else None,
            system_db_path=Path(system_db_path) if system_db_path is not None else None,
        )
        self.candidates = Candidates(self.state)
        self.ranker = ImmediateRanker(self.state)
        self.runner = Runner(self.state, owner=self)
        self.engine = FindEngine(self.state, self.ranker, self.runner)
        self.last_report: FindReport | None = None
        #: What run_solution and immediate looked up per solution (or problem and solver),
        #: with the invoker cache's generation then: see :meth:`_remember_lookup`.
        self._looked_up: dict[Any, tuple[Any, int, CachedInvoker]] = {}

    def __repr__(self) -> str:
        return f"Handle({self.backend.name!r}, device={self.device.identity!r})"

    @property
    def registry(self) -> Registry:
        """The solvers this handle considers."""
        return self.state.registry

    @property
    def find_db(self) -> Any:
        """The FindDb of this handle's device (user layer first, then system)."""
        return self.state.find_db

    @property
    def perf_db(self) -> Any:
        """The PerfDb (tuned performance configs) of this handle's device."""
        return self.state.perf_db

    @property
    def db_status(self) -> Any:
        """The user databases' :class:`~miocore.db.StorageStatus`: ``ok``, or ``degraded``
        (with cause and path) when a storage fault moved this handle's results to memory."""
        find, perf = self.state.find_db.status, self.state.perf_db.status
        return find if not find.ok or perf.ok else perf

    def _note_storage(self, report: FindReport) -> None:
        for name, db in (("find_db", self.state.find_db), ("perf_db", self.state.perf_db)):
            if not db.status.ok:
                report.storage[name] = db.status.line()

    @property
    def invoker_cache(self) -> InvokerCache:
        """Built invokers of this handle, by network config and solver."""
        return self.state.invoker_cache

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
        accuracy: Any = None,
        deterministic: bool = False,
    ) -> Solutions:
        """Solutions for ``problem``, fastest first, following the find mode (design guide §4).

        ``accuracy`` (``strict``, ``default``, ``fast``; else ``MIOCORE_ACCURACY``) and
        ``deterministic`` choose which solvers may answer (docs/numerics.md).

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
        _check_presentation(sort_by, max_results)
        report = FindReport(key=problem.key, mode=mode.name, enforce=enforce.name)
        self.last_report = report
        if enforce is FindEnforce.DB_CLEAN:
            key = self.state.record_key(problem)
            self.find_db.delete(key)
            self.perf_db.delete(key)
            self.state.forget(key)
        use_perf_db = enforce is not FindEnforce.DB_CLEAN
        hit, candidates = find_start(
            self, problem, report, mode, limit, use_perf_db, accuracy, deterministic
        )
        if candidates is None:
            return _present(hit, report, sort_by, max_results, ordered=True)
        if not candidates:
            raise self.candidates.nothing_applies(problem, report, limit)
        found, ordered = self.engine.find(
            problem,
            candidates,
            report,
            mode=mode,
            enforce=enforce,
            exhaustive=exhaustive,
            buffers={"x": x, "w": w, "y": y},
            workspace=workspace,
            progress=progress,
            accuracy=accuracy,
            workspace_limit=limit,
            alongside=hit or None,
        )
        self._note_storage(report)
        return _present(found, report, sort_by, max_results, ordered=ordered)

    def compile_ahead(
        self,
        problems: Iterable[ConvProblem],
        *,
        accuracy: Any = None,
        deterministic: bool = False,
    ) -> dict[str, str]:
        """Build at once, in parallel, every kernel that finding ``problems`` in the current
        find mode would compile, so that the finds that follow only load them (a network's
        layers are found one at a time; their compiles need not be). Problems a database
        answers compile nothing. Returns the failed builds, {source: error}: each is reported
        again by the find that meets it."""
        checked = [_check_problem(p) for p in problems]
        return compile_ahead(self, checked, accuracy=accuracy, deterministic=deterministic)

    def run_solution(
        self, solution: Solution, *, x: Any, w: Any, y: Any, workspace: Any = None
    ) -> None:
        """Run a solution (from any find, in any process) on the caller's buffers."""
        known = self._known_lookup(id(solution), solution)
        if known is not None:
            self.runner.run(solution.problem, known, x=x, w=w, y=y, workspace=workspace)
            return
        if not isinstance(solution, Solution):
            raise InvalidArgumentError(
                "expected a miocore Solution", field="solution", value=type(solution).__name__
            )
        entry = self._invoker(solution.problem, solution.solver, solution.perf_config)
        self._remember_lookup(id(solution), solution, entry)
        self.runner.run(solution.problem, entry, x=x, w=w, y=y, workspace=workspace)

    def _known_lookup(self, key: Any, source: Any) -> CachedInvoker | None:
        """What ``source`` looked up last, if the invoker cache has not changed since."""
        looked_up = self._looked_up.get(key)
        if (
            looked_up is not None
            and looked_up[0] is source
            and looked_up[1] == self.state.invoker_cache.generation
        ):
            return looked_up[2]
        return None

    def _remember_lookup(self, key: Any, source: Any, entry: CachedInvoker) -> None:
        """Keep ``entry`` as what ``source`` (a solution, or a problem and solver) looks up
        until the invoker cache changes: a call alike then skips the cache's lookup."""
        if len(self._looked_up) >= _MAX_LOOKUPS:
            self._looked_up.clear()
        self._looked_up[key] = (source, self.state.invoker_cache.generation, entry)

    def prepare(
        self,
        solution: Solution | ConvProblem,
        solver: str | int | None = None,
        *,
        workspace: Any = None,
    ) -> PreparedRun:
        """A callable that runs ``solution`` (or ``solver`` on a problem) again and again at
        the least cost per call: ``run = handle.prepare(s); run(x=..., w=..., y=...)``.

        Built once: the invoker (compiled if needed), the workspace (``workspace``, or a new
        one of the solution's size) and the checked arguments of the last call.
        """
        if isinstance(solution, Solution):
            problem, name, config = solution.problem, solution.solver, solution.perf_config
            entry = self._invoker(problem, name, config)
        elif isinstance(solution, ConvProblem) and solver is not None:
            problem = solution
            reg = self.candidates.applicable(problem, solver)
            config = self.candidates.perf_config(reg, problem.canonical, use_perf_db=True)[0]
            entry = self._invoker(problem, reg.name, config)
        else:
            raise InvalidArgumentError(
                "expected a miocore Solution, or a ConvProblem and a solver",
                field="solution",
                value=type(solution).__name__,
            )
        return PreparedRun(self.runner, problem, entry, workspace)

    # -- immediate mode --------------------------------------------------------------------

    def get_solutions(
        self,
        problem: ConvProblem,
        *,
        workspace_limit: int | None = None,
        max_results: int | None = None,
        accuracy: Any = None,
        deterministic: bool = False,
    ) -> Solutions:
        """Every applicable solution without benchmarking: recorded ones first (FindDb), the
        rest ranked by the fallback chain (heuristic, then WTI, GEMM last).

        ``accuracy`` and ``deterministic`` leave solvers out as in :meth:`find_solutions`;
        nothing is measured here, so ``default`` allows what ``fast`` allows (the deny list
        still applies) and ``strict`` leaves out every solver with a lossy note."""
        problem = _check_problem(problem)
        limit = _check_limit(workspace_limit)
        _check_presentation("time", max_results)
        report = FindReport(key=problem.key, mode="IMMEDIATE", enforce="NONE")
        self.last_report = report
        if max_results is not None:  # the record alone may fill the list: ask only its solvers
            hit = recorded_hit(self, problem, report, limit, accuracy, deterministic)
            if len(hit) >= max_results:
                return _present(hit, report, "time", max_results, ordered=True)
        candidates = self.candidates.select(
            problem,
            report,
            limit,
            use_perf_db=True,
            accuracy=accuracy,
            deterministic=deterministic,
        )
        if not candidates:
            raise self.candidates.nothing_applies(problem, report, limit)
        recorded = self.ranker.recorded(problem, candidates, report)
        seen = {s.solver for s in recorded}
        rest = self.ranker.fallback(
            problem, [c for c in candidates if c.reg.name not in seen], report
        )
        if not recorded and not rest:  # every deferred setup refused
            raise self.candidates.nothing_applies(problem, report, limit)
        self._note_storage(report)
        return _present([*recorded, *rest], report, "time", max_results, ordered=True)

    def get_solution_count(
        self, problem: ConvProblem, *, workspace_limit: int | None = None
    ) -> int:
        """How many solutions :meth:`get_solutions` would return."""
        return len(self.get_solutions(problem, workspace_limit=workspace_limit))

    def get_solution_workspace_size(self, problem: ConvProblem, solver: str | int) -> int:
        """Workspace bytes ``solver`` needs for ``problem``, with the perf config it would use."""
        problem = _check_problem(problem)
        reg = self.candidates.applicable(problem, solver)
        config = self.candidates.perf_config(reg, problem.canonical, use_perf_db=True)[0]
        return self.candidates.workspace(reg, problem.canonical, config)

    def compile_solution(self, problem: ConvProblem, solver: str | int) -> Solution:
        """Build and cache the invoker of ``solver`` for ``problem``; return its solution."""
        problem = _check_problem(problem)
        reg = self.candidates.applicable(problem, solver)
        config = self.candidates.perf_config(reg, problem.canonical, use_perf_db=True)[0]
        entry = self._invoker(problem, reg.name, config)
        found = [s for s in self.get_solutions(problem) if s.solver == reg.name]
        if found:
            return found[0]
        return self.ranker.estimate(problem, reg, entry.workspace_size, config)

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
        key = (id(problem), solver) if isinstance(solver, (str, int)) else None
        known = self._known_lookup(key, problem) if key is not None else None
        if known is not None:
            self.runner.run(problem, known, x=x, w=w, y=y, workspace=workspace)
            return
        problem = _check_problem(problem)
        network_config = problem.network_config
        cache = self.invoker_cache
        entry = cache.get(network_config, solver) if isinstance(solver, str) else None
        if entry is None:
            entry = cache.get(network_config, self.registry.get(solver).name)
        if entry is None:
            reg = self.candidates.applicable(problem, solver)
            config = self.candidates.perf_config(reg, problem.canonical, use_perf_db=True)[0]
            entry = self._invoker(problem, reg.name, config)
        if key is not None:
            self._remember_lookup(key, problem, entry)
        self.runner.run(problem, entry, x=x, w=w, y=y, workspace=workspace)

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
        for field, value in (("alpha", alpha), ("beta", beta)):
            if not isinstance(value, (int, float)) or not _finite(value):
                raise InvalidArgumentError("must be a finite number", field=field, value=value)
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
            reg = self.candidates.applicable(problem, name)
            config = self.candidates.perf_config(reg, problem.canonical, use_perf_db=True)[0]
            entry = self._invoker(problem, reg.name, config)
        self.runner.run(
            problem, entry, x=x, w=w, y=y, workspace=workspace, alpha=float(alpha), beta=float(beta)
        )

    # -- internals -------------------------------------------------------------------------

    def _invoker(self, problem: ConvProblem, solver: str, config: Any) -> CachedInvoker:
        entry = self.runner.cached(problem, solver, config)
        if entry is not None:
            return entry
        reg = self.candidates.applicable(problem, solver)
        return self.runner.build(problem, reg, config)


def _present(
    solutions: list[Solution],
    report: FindReport,
    sort_by: str,
    max_results: int | None,
    *,
    ordered: bool,
) -> Solutions:
    """The caller's view of ``solutions``: by time (ties within noise kept in a stable order)
    or by workspace, cut to ``max_results``."""
    items = list(solutions) if ordered else order_with_ties(solutions)
    if sort_by == "workspace":
        items.sort(key=lambda s: s.workspace_size)  # stable: time order within equal sizes
    if max_results is not None:
        items = items[:max_results]
    return Solutions(items, report)


def _check_presentation(sort_by: Any, max_results: Any) -> None:
    if sort_by not in ("time", "workspace"):
        raise InvalidArgumentError("expected 'time' or 'workspace'", field="sort_by", value=sort_by)
    if max_results is not None and (
        isinstance(max_results, bool) or not isinstance(max_results, int) or max_results < 1
    ):
        raise InvalidArgumentError(
            "must be an integer >= 1", field="max_results", value=max_results
        )


def _finite(value: float) -> bool:
    """Whether a number is finite (an int too large for a float is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


#: Lookups run_solution and immediate keep (all forgotten at once past it).
_MAX_LOOKUPS = 256


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
