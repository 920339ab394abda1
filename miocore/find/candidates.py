"""The candidates step: which installed solvers may solve a problem on this device, and with
which performance config and workspace.

Applicability, the environment switches (``MIOCORE_FIND_ONLY_SOLVER``,
``MIOCORE_DEBUG_CONV_*``), the workspace limit and the PerfDb's tuned config are decided here,
once per (network config, limit, switches): solvers are stateless and pure, so their answers for
one problem never change. Everything left out is written into the report with the reason.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from miocore import env
from miocore.errors import (
    InvalidArgumentError,
    NoApplicableSolverError,
    NotApplicableError,
    PluginError,
    UnknownSolverError,
)
from miocore.find.accuracy import check_not_denied, filter_candidates
from miocore.find.accuracy import policy_of as accuracy_policy
from miocore.find.blame import naming_culprit, record_failure
from miocore.find.state import FindState
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import Algorithm, PerfConfig, TunableSolver, normalize_applicability
from miocore.solver.registry import RegisteredSolver
from miocore.solver.results import FindReport
from miocore.values import define

log = logging.getLogger("miocore.find")

#: The report tables a memoized candidate list restores.
_LEFT_OUT = ("not_applicable", "skipped")


@define
class Candidate:
    """A solver that applies, with the perf config it would use and the workspace it needs.

    A solver with ``deferred_setup`` is selected with ``pending`` set instead: its config and
    workspace are asked for (and may turn out refused) only when :func:`settle` is called,
    by find for the candidates it measures, by immediate mode for all."""

    reg: RegisteredSolver
    perf_config: PerfConfig | None
    workspace_size: int
    perf_db_entry: bool
    #: What asks for (perf config, workspace, from the PerfDb) when the setup was deferred.
    pending: Callable[[], tuple[PerfConfig | None, int, bool]] | None = None
    #: Why the solver refused once its setup was asked for (it is skipped from then on).
    refused: str | None = None


#: Held while a deferred setup is asked for: candidates are shared by the finds of one
#: handle (its memo), and a second thread must wait for the setup, not read it half made.
_SETTLING = threading.Lock()


def settle(cand: Candidate, report: FindReport | None) -> bool:
    """Ask for ``cand``'s deferred setup (once); False when it is unusable, with the reason in
    ``report``: not applicable when the solver refused (remembered: solvers are pure), failed
    when it raised anything else (asked again next time: a failure may be transient)."""
    if cand.pending is not None:
        with _SETTLING:
            pending = cand.pending
            if pending is not None:
                try:
                    cand.perf_config, cand.workspace_size, cand.perf_db_entry = pending()
                except NotApplicableError as exc:
                    cand.refused = str(exc)
                except Exception as exc:
                    if report is not None:
                        record_failure(report, cand.reg, "workspace_size", exc)
                    return False
                cand.pending = None
    if cand.refused is not None:
        if report is not None:
            report.not_applicable[cand.reg.name] = cand.refused
        return False
    return True


def settled(candidates: list[Candidate], report: FindReport | None) -> list[Candidate]:
    """The candidates whose setup is known (every deferred one asked for), in order."""
    return [c for c in candidates if settle(c, report)]


class Candidates:
    """Selects the candidate solvers of a problem (memoized per handle)."""

    def __init__(self, state: FindState, max_memo: int = 1024) -> None:
        self.state = state
        self.max_memo = max_memo
        self._memo: dict[tuple[Any, ...], tuple[tuple[Candidate, ...], dict[str, Any]]] = {}
        state.forget_hooks.append(lambda _key: self._memo.clear())

    def select(
        self,
        problem: ConvProblem,
        report: FindReport,
        limit: int | None,
        *,
        use_perf_db: bool,
        accuracy: Any = None,
        deterministic: bool = False,
        among: frozenset[str] | None = None,
    ) -> list[Candidate]:
        """The candidates of ``problem`` within ``limit`` bytes that the deny list, the
        accuracy policy (``accuracy``, else ``MIOCORE_ACCURACY``) and ``deterministic`` allow;
        the rest go into ``report``. ``among``: only the solvers of these names are looked at
        (a FindDb hit asks only the solvers its record names; the others are not made)."""
        policy = accuracy_policy(accuracy)
        return filter_candidates(
            self.state,
            problem,
            self._memoized(problem, report, limit, use_perf_db=use_perf_db, among=among),
            report,
            policy=policy,
            deterministic=deterministic,
        )

    def _memoized(
        self,
        problem: ConvProblem,
        report: FindReport,
        limit: int | None,
        *,
        use_perf_db: bool,
        among: frozenset[str] | None = None,
    ) -> list[Candidate]:
        registry_id = id(self.state.registry)
        memo_key = (problem.network_config, limit, use_perf_db, registry_id, switches(), among)
        found = self._memo.get(memo_key)
        if found is not None:
            candidates, left_out = found
            for name, table in left_out.items():
                getattr(report, name).update(table)
            log.debug("candidates of %s from memory: %d", problem.key, len(candidates))
            return list(candidates)
        candidates = self._select(problem, report, limit, use_perf_db=use_perf_db, among=among)
        if not report.failed:  # a failure may be transient: ask again next time
            left_out = {name: dict(getattr(report, name)) for name in _LEFT_OUT}
            self._memo[memo_key] = (tuple(candidates), left_out)
            while len(self._memo) > self.max_memo:
                self._memo.pop(next(iter(self._memo)))
        log.debug(
            "candidates of %s: %s", problem.key, ", ".join(c.reg.name for c in candidates) or "none"
        )
        return candidates

    def _select(
        self,
        problem: ConvProblem,
        report: FindReport,
        limit: int | None,
        *,
        use_perf_db: bool,
        among: frozenset[str] | None = None,
    ) -> list[Candidate]:
        state = self.state
        canon = problem.canonical
        registry = state.registry
        only = env.only_solver()
        if only is not None:
            try:
                only = registry.get(only).name
            except UnknownSolverError as exc:
                raise UnknownSolverError(
                    str(exc).split(": ", 1)[-1], field="MIOCORE_FIND_ONLY_SOLVER", value=only
                ) from None
        backend = state.backend.name
        out = []
        # Name, family and backends are known without the solver: a lazy one is made (its
        # module imported) only when it runs here and is enabled.
        for reg in registry.solvers:
            if only is not None and reg.name != only:
                continue
            if among is not None and reg.name not in among:
                continue
            if backend not in reg.backends:
                report.not_applicable[reg.name] = (
                    f"runs on {', '.join(sorted(reg.backends))}, not {backend}"
                )
                continue
            algo = reg.algorithm.value
            if not env.algorithm_enabled(algo):
                report.skipped[reg.name] = f"disabled by MIOCORE_DEBUG_CONV_{algo.upper()}=0"
                continue
            try:
                solver = reg.solver
            except PluginError as exc:  # its module failed to import: the others go on
                record_failure(report, reg, "loading the solver", exc)
                continue
            try:
                answer = normalize_applicability(solver.is_applicable(state.context, canon))
            except Exception as exc:
                record_failure(report, reg, "is_applicable", exc)
                continue
            if not answer:
                report.not_applicable[reg.name] = answer.reason or "not applicable"
                continue
            setup = functools.partial(self._setup, reg, canon, use_perf_db)
            cand = Candidate(reg=reg, perf_config=None, workspace_size=0, perf_db_entry=False)
            if solver.deferred_setup:
                cand.pending = setup
                if limit is None:  # nothing asks for the size yet
                    out.append(cand)
                    continue
                if not settle(cand, report):
                    continue
            else:
                try:
                    cand.perf_config, cand.workspace_size, cand.perf_db_entry = setup()
                except Exception as exc:
                    record_failure(report, reg, "workspace_size", exc)
                    continue
            if limit is not None and cand.workspace_size > limit:
                report.skipped[reg.name] = (
                    f"needs {cand.workspace_size} B of workspace, limit is {limit} B"
                )
                continue
            out.append(cand)
        return out

    def _setup(
        self, reg: RegisteredSolver, canon: ConvProblem, use_perf_db: bool
    ) -> tuple[PerfConfig | None, int, bool]:
        """(perf config, workspace bytes, whether the config came from the PerfDb)."""
        config, from_db = self.perf_config(reg, canon, use_perf_db=use_perf_db)
        return config, self.workspace(reg, canon, config), from_db

    def applicable(self, problem: ConvProblem, solver: str | int) -> RegisteredSolver:
        """The registered ``solver`` (name or id), which must apply to ``problem`` here."""
        state = self.state
        reg = state.registry.get(solver)
        check_not_denied(state, problem, reg)
        if state.backend.name not in reg.backends:
            raise NotApplicableError(
                f"runs on {sorted(reg.backends)}, not {state.backend.name}",
                field="solver",
                value=reg.name,
            )
        with naming_culprit(reg, "is_applicable"):
            answer = normalize_applicability(
                reg.solver.is_applicable(state.context, problem.canonical)
            )
        if not answer:
            raise NotApplicableError(
                f"does not apply to {problem.key}: {answer.reason}", field="solver", value=reg.name
            )
        return reg

    def perf_config(
        self, reg: RegisteredSolver, canon: ConvProblem, *, use_perf_db: bool
    ) -> tuple[PerfConfig | None, bool]:
        """The config ``reg`` runs ``canon`` with (tuned from the PerfDb, else its default) and
        whether it came from the PerfDb; None for a solver that is not tunable."""
        solver = reg.solver
        context = self.state.context
        if not isinstance(solver, TunableSolver):
            return None, False
        if use_perf_db:
            entry = self.state.perf_db.get(self.state.record_key(canon), reg.name)
            if entry is not None:
                try:
                    config = PerfConfig.from_string(entry.perf_config)
                    if solver.is_valid_perf_config(context, canon, config):
                        return config, True
                except Exception as exc:  # a stale or foreign entry must not break find
                    log.warning("ignoring PerfDb entry of %s for %s: %s", reg.name, canon.key, exc)
        return solver.default_perf_config(context, canon), False

    def workspace(
        self, reg: RegisteredSolver, canon: ConvProblem, config: PerfConfig | None
    ) -> int:
        """Workspace bytes ``reg`` needs for ``canon`` with ``config`` (checked)."""
        size = reg.solver.workspace_size(self.state.context, canon, config)
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidArgumentError(
                "workspace_size must return an integer >= 0",
                field=f"{reg.name}.workspace_size",
                value=size,
            )
        return size

    def nothing_applies(
        self, problem: ConvProblem, report: FindReport, limit: int | None
    ) -> NoApplicableSolverError:
        """The error for a problem no candidate survived, with every reason."""
        if not len(self.state.registry):
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


#: The environment switches that change which solvers find considers, with their MIOpen names.
_SWITCHES = tuple(
    name
    for own in (
        "MIOCORE_FIND_ONLY_SOLVER",
        *(f"MIOCORE_DEBUG_CONV_{a.value.upper()}" for a in Algorithm),
    )
    for name in (own, env.MIOPEN_ALIASES.get(own))
    if name is not None
)


def switches() -> tuple[str | None, ...]:
    """The raw values of the switches (a memo key: any change means ask the solvers again;
    which name wins is decided where they are read, through ``env.get``)."""
    environ = os.environ
    return tuple(environ.get(n) for n in _SWITCHES)
