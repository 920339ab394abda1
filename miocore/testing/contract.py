"""The solver contract suite: the rules every solver must keep, checked on generated problems.

(One concept in one class, ``Contract``, one method per rule with its helpers: longer than
the house's ~500 lines, and kept whole so a plugin author reads every rule in one place. The
problems it checks on live in ``problems.py``, the spy in ``spy.py``.)

find trusts a solver on a handful of promises (``docs/authors/contract.md``); this module checks
them on small problems, without pytest, so any test runner (or a plugin's CI script) can use it::

    from miocore.testing.contract import Contract

    report = Contract(MySolver()).check_all()   # raises ContractViolation on the first broken rule

The rules, one method each:

- :meth:`Contract.check_registration`: a valid dotted name, an :class:`~miocore.Algorithm`,
  its backends, known numerical notes;
- :meth:`Contract.check_is_applicable`: pure (same answer for equal problems, in any order),
  fast, never raises, says why not;
- :meth:`Contract.check_workspace`: ``workspace_size`` is what ``get_solution`` reports, the
  solution runs correctly with exactly that many bytes, and with fewer it raises or still gets
  the right answer (never a wrong one);
- :meth:`Contract.check_perf_configs`: every config of a tunable solver's space is either
  rejected by ``is_valid_perf_config`` or runs correctly; the default is valid; a stale config
  is rejected without raising; configs survive the PerfDb's text round trip;
- :meth:`Contract.check_correctness`: results match :mod:`miocore.reference` in every direction
  the solver claims, run directly and through a :class:`~miocore.Handle`;
- :meth:`Contract.check_wti`: ``wti`` is finite and in (0, 1];
- :meth:`Contract.check_inapplicable_never_run`: a problem the solver declares inapplicable is
  never sized, built or run by find, immediate mode or the workspace query.

The problems come from :func:`generate_problems`: a built-in set covering every kind (2-D and
3-D, NCHW and NHWC, three data types, groups, depthwise, strides, dilations, 1xN filters) in
every direction, interleaved with the first rows of the real-problem corpus when it is found.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from miocore import reference
from miocore.backends.cpu import cpu_device_info, empty_for
from miocore.errors import (
    MiocoreError,
    NoApplicableSolverError,
    NotApplicableError,
)
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.dtypes import DataType
from miocore.solver.interface import (
    Applicability,
    ConvSolution,
    ExecutionContext,
    InvokeParams,
    PerfConfig,
    Solver,
    TunableSolver,
    normalize_applicability,
)
from miocore.testing.problems import (
    BUILTIN_SHAPES,
    CORPUS_HEAD_ROWS,
    DIRECTIONS,
    ProblemSet,
    builtin_problems,
    corpus_problems,
    generate_problems,
)
from miocore.testing.records import solver_under_test, subject_name
from miocore.testing.spy import spy_on
from miocore.values import define, evolve

#: Relative error bounds (max abs error / max abs reference) by data type, as
#: :data:`miocore.testing.TOLERANCES` (kept here so this module does not import it).
DEFAULT_TOLERANCES: Mapping[DataType, float] = {
    DataType.FLOAT32: 2e-5,
    DataType.FLOAT16: 2e-3,
    DataType.BFLOAT16: 1.6e-2,
}

#: A tolerance: one bound, a bound per data type, or ``f(problem, perf_config) -> bound``.
Tolerance = float | Mapping[DataType, float] | Callable[[ConvProblem, PerfConfig | None], float]


class ContractViolation(MiocoreError, AssertionError):
    """A solver broke a rule of the contract.

    ``solver`` and ``rule`` say who and what; ``problem`` is the problem it broke it on, when
    one is involved. An AssertionError too, so test runners report it as a failed test.
    """

    def __init__(self, solver: str, rule: str, message: str, problem: ConvProblem | None = None):
        self.solver = solver
        self.rule = rule
        self.problem = problem
        where = f" on {problem.direction.value} {problem.key}" if problem is not None else ""
        super().__init__(f"breaks the {rule} rule{where}: {message}", field="solver", value=solver)


# -- problems -----------------------------------------------------------------------------------


def _inputs(problem: ConvProblem, seed: int) -> dict[str, np.ndarray]:
    return reference.random_inputs(problem, seed)


def _expected(problem: ConvProblem, inputs: Mapping[str, np.ndarray]) -> np.ndarray:
    out_name = problem.direction.output_tensor
    return reference.convolution(problem, **{k: v for k, v in inputs.items() if k != out_name})


def _invoke(
    ctx: ExecutionContext,
    solution: ConvSolution,
    problem: ConvProblem,
    inputs: Mapping[str, np.ndarray],
    workspace: np.ndarray | None,
) -> np.ndarray:
    """Run ``solution`` of the canonical problem on copies of ``inputs``; return its output,
    which starts as NaN so that an element the solver forgets to write is caught."""
    canon = problem.canonical
    arrays: dict[str, Any] = {}
    for name, value in inputs.items():
        # Copies with the descriptor's strides (ndarray.copy() would make NHWC data NCHW).
        arrays[name] = empty_for(getattr(problem, name))
        arrays[name][...] = value
    if problem.is_transposed:
        arrays["x"], arrays["y"] = arrays["y"], arrays["x"]
    out_name = canon.direction.output_tensor
    out = empty_for(getattr(canon, out_name))
    out[...] = np.nan
    arrays[out_name] = out
    invoker = solution.invoker_factory(())
    invoker(None, InvokeParams(problem=canon, workspace=workspace, **arrays))  # type: ignore[arg-type]
    return out


def _garbage_workspace(nbytes: int) -> np.ndarray | None:
    """Exactly ``nbytes`` of 0xFF (NaN in every float type): a solver that reads workspace it
    did not write gets NaN."""
    return np.full(nbytes, 0xFF, dtype=np.uint8) if nbytes else None


# -- the contract ---------------------------------------------------------------------------------


@define
class ContractReport:
    """What a full run checked: counts per rule, for a summary line."""

    solver: str
    problems: int = 0
    directions: tuple[str, ...] = ()
    runs: int = 0
    perf_configs: int = 0
    rejected_perf_configs: int = 0
    inapplicable: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        """One line: what was checked, how much, how long."""
        return (
            f"{self.solver}: contract kept on {self.problems} problems "
            f"({', '.join(self.directions) or 'no direction'}), {self.runs} runs, "
            f"{self.perf_configs} perf configs ({self.rejected_perf_configs} rejected), "
            f"{self.inapplicable} inapplicable problems never run, {self.seconds:.2f} s"
        )


class Contract:
    """The contract checks of one solver on a generated :class:`ProblemSet`.

    ``solver``: the instance, or its ``SolverRecord`` or ``RegisteredSolver`` (a lazy one is
    made as the registry makes it, and a flaw of its declaration breaks the registration rule).

    ``tolerance`` overrides :data:`DEFAULT_TOLERANCES`: one bound, a bound per data type, or
    ``f(problem, perf_config) -> bound`` for solvers whose accuracy depends on the config.
    ``problems`` are asked first (a narrow solver brings its own); ``per_direction`` and
    ``inapplicable`` size the set; ``max_perf_configs`` caps the configs tried per problem;
    ``applicability_budget_ms`` is the mean time one ``is_applicable`` call may take.
    """

    def __init__(
        self,
        solver: Solver | Any,
        *,
        ctx: ExecutionContext | None = None,
        tolerance: Tolerance | None = None,
        problems: Sequence[ConvProblem] = (),
        per_direction: int = 6,
        inapplicable: int = 6,
        max_perf_configs: int = 16,
        perf_config_problems: int = 3,
        applicability_budget_ms: float = 2.0,
        use_corpus: bool = True,
        require_wti: bool = True,
        seed: int = 0,
    ) -> None:
        # A SolverRecord or a RegisteredSolver is made here, as the registry makes it: a lazy
        # record's flaw (import error, declaration mismatch) breaks the registration rule.
        self.solver, self._registration_flaw = solver_under_test(solver)
        self.name = subject_name(solver)
        self.ctx = ctx or ExecutionContext(device=cpu_device_info())
        self.tolerance = tolerance
        self.extra = tuple(problems)
        self.per_direction = per_direction
        self.inapplicable = inapplicable
        self.max_perf_configs = max_perf_configs
        self.perf_config_problems = perf_config_problems
        self.applicability_budget_ms = applicability_budget_ms
        self.use_corpus = use_corpus
        self.require_wti = require_wti
        self.seed = seed
        self._problems: ProblemSet | None = None

    def __repr__(self) -> str:
        return f"<Contract of {self.name}>"

    # -- shared -----------------------------------------------------------------------------

    @property
    def problems(self) -> ProblemSet:
        """The generated problem set (asked once, then kept)."""
        if self._problems is None:
            self._problems = generate_problems(
                self.solver,
                self.ctx,
                per_direction=self.per_direction,
                inapplicable=self.inapplicable,
                use_corpus=self.use_corpus,
                extra=self.extra,
                seed=self.seed,
            )
        return self._problems

    def fail(self, rule: str, message: str, problem: ConvProblem | None = None) -> None:
        """Raise the :class:`ContractViolation` of ``rule``."""
        __tracebackhide__ = True  # pytest shows the violation, not this helper
        raise ContractViolation(self.name, rule, message, problem)

    def bound(self, problem: ConvProblem, config: PerfConfig | None) -> float:
        """The relative error allowed for ``problem`` under ``config``."""
        tol = self.tolerance
        if tol is None:
            return DEFAULT_TOLERANCES[problem.dtype]
        if callable(tol):
            return float(tol(problem, config))
        if isinstance(tol, Mapping):
            return float(tol[problem.dtype])
        return float(tol)

    def _require_applicable(self) -> list[ConvProblem]:
        found = self.problems.applicable_problems()
        if not found:
            self.fail(
                "is_applicable",
                f"it applies to none of the {len(self.problems.all)} generated problems; pass "
                "problems=[...] that it does solve",
            )
        return found

    def _default_config(self, canon: ConvProblem) -> PerfConfig | None:
        if isinstance(self.solver, TunableSolver):
            return self.solver.default_perf_config(self.ctx, canon)
        return None

    def _call(
        self, rule: str, problem: ConvProblem | None, what: str, fn: Callable[[], Any]
    ) -> Any:
        try:
            return fn()
        except ContractViolation:
            raise
        except Exception as exc:
            self.fail(rule, f"{what} raised {type(exc).__name__}: {exc}", problem)

    def _solution(
        self, rule: str, problem: ConvProblem, config: PerfConfig | None
    ) -> tuple[ConvSolution, int]:
        """The solution and workspace size of ``problem``, checked for agreement and shape."""
        canon = problem.canonical
        size = self._call(
            rule,
            problem,
            "workspace_size",
            lambda: self.solver.workspace_size(self.ctx, canon, config),
        )
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            self.fail(rule, f"workspace_size returned {size!r}, expected an int >= 0", problem)
        again = self.solver.workspace_size(self.ctx, canon, config)
        if again != size:
            self.fail(rule, f"workspace_size answered {size} then {again}", problem)
        solution = self._call(
            rule, problem, "get_solution", lambda: self.solver.get_solution(self.ctx, canon, config)
        )
        if not isinstance(solution, ConvSolution):
            self.fail(
                rule,
                f"get_solution returned {type(solution).__name__}, expected miocore.ConvSolution",
                problem,
            )
        if solution.solver != self.name:
            self.fail(rule, f"its solution names solver {solution.solver!r}", problem)
        if not callable(solution.invoker_factory):
            self.fail(rule, "its solution's invoker_factory is not callable", problem)
        if solution.workspace_size != size:
            self.fail(
                "workspace_size",
                f"workspace_size says {size} B but its solution says {solution.workspace_size} B",
                problem,
            )
        if self.ctx.backend == "cpu" and solution.kernels:
            self.fail(rule, "a CPU solution must not list kernels to compile", problem)
        if config is not None and solution.perf_config not in (None, config):
            self.fail(
                rule,
                f"asked for {config.to_string()}, its solution carries "
                f"{solution.perf_config.to_string()}",
                problem,
            )
        return solution, size

    def _run_checked(
        self, rule: str, problem: ConvProblem, config: PerfConfig | None, seed: int
    ) -> tuple[int, float]:
        """Run with exactly the declared workspace and compare with the reference."""
        solution, size = self._solution(rule, problem, config)
        inputs = _inputs(problem, seed)
        got = self._call(
            rule,
            problem,
            "its invoker",
            lambda: _invoke(self.ctx, solution, problem, inputs, _garbage_workspace(size)),
        )
        err = reference.relative_error(got, _expected(problem, inputs))
        tol = self.bound(problem, config)
        if not (math.isfinite(err) and err <= tol):
            with_config = f" with {config.to_string()}" if config is not None else ""
            self.fail(
                rule,
                f"relative error {err:.3g} exceeds {tol:.3g}{with_config} (run with exactly "
                f"its {size} B of workspace)",
                problem,
            )
        return size, err

    # -- the rules ----------------------------------------------------------------------------

    def check_registration(self) -> None:
        """A valid record: dotted name, Algorithm, non-empty backends of known names."""
        from miocore.backends import KNOWN
        from miocore.solver.hookspecs import SolverRecord
        from miocore.solver.numerics import KNOWN_NOTES
        from miocore.solver.registry import _record_problem

        if self._registration_flaw:
            self.fail("registration", self._registration_flaw)
        if not isinstance(self.solver, Solver):
            self.fail("registration", f"{type(self.solver).__name__} is not a miocore.Solver")
        flaw = _record_problem(SolverRecord(solver=self.solver))
        if flaw:
            self.fail("registration", flaw)
        unknown = set(self.solver.backends) - set(KNOWN)
        if unknown:
            self.fail("registration", f"unknown backends {sorted(unknown)}; known: {KNOWN}")
        if not isinstance(self.solver.is_dynamic, bool):
            self.fail("registration", f"is_dynamic is {self.solver.is_dynamic!r}, not a bool")
        revision = getattr(self.solver, "revision", 0)
        if isinstance(revision, bool) or not isinstance(revision, int) or revision < 0:
            self.fail("registration", f"revision is {revision!r}, not a whole number >= 0")
        notes = getattr(self.solver, "numerical_notes", frozenset())
        if isinstance(notes, str) or not isinstance(notes, (set, frozenset, tuple, list)):
            self.fail("registration", f"numerical_notes is {notes!r}, not a set of note names")
        unknown_notes = set(notes) - KNOWN_NOTES
        if unknown_notes:
            self.fail(
                "registration",
                f"unknown numerical notes {sorted(unknown_notes)}; known: {sorted(KNOWN_NOTES)}",
            )

    def check_is_applicable(self) -> None:
        """Pure (equal problems, any order, same answer), fast, never raises, says why not."""
        problems = list(self.problems.all)
        first: list[Applicability] = []
        start = time.perf_counter()
        for p in problems:
            answer = self._call(
                "is_applicable",
                p,
                "is_applicable",
                lambda p=p: self.solver.is_applicable(self.ctx, p.canonical),
            )
            if not isinstance(answer, Applicability | bool):
                self.fail(
                    "is_applicable",
                    f"returned {type(answer).__name__}; expected Applicability or bool",
                    p,
                )
            answer = normalize_applicability(answer)
            if not answer and not answer.reason.strip():
                self.fail("is_applicable", "a negative answer must say why (reason is empty)", p)
            first.append(answer)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        mean_ms = elapsed_ms / max(1, len(problems))
        if mean_ms > self.applicability_budget_ms:
            self.fail(
                "is_applicable",
                f"takes {mean_ms:.3g} ms per call on average, over the "
                f"{self.applicability_budget_ms:g} ms budget: it runs for every solver on "
                "every problem, sizes only",
            )
        # Equal problems built anew, asked in reverse order: answers must not depend on object
        # identity, on earlier calls or on hidden state.
        for p, before in reversed(list(zip(problems, first, strict=True))):
            twin = evolve(p.canonical)
            after = normalize_applicability(self.solver.is_applicable(self.ctx, twin))
            if (after.ok, after.reason) != (before.ok, before.reason):
                self.fail(
                    "is_applicable",
                    f"answered {before} and then {after} for an equal problem: it must be pure",
                    p,
                )

    def check_workspace(self) -> int:
        """Runs right with exactly ``workspace_size`` bytes; with fewer, raises or is right.

        Returns the number of runs.
        """
        runs = 0
        for i, problem in enumerate(self._require_applicable()):
            config = self._default_config(problem.canonical)
            size, _ = self._run_checked("workspace_size", problem, config, seed=i)
            runs += 1
            if size == 0:
                continue
            solution, _ = self._solution("workspace_size", problem, config)
            inputs = _inputs(problem, seed=i)
            for short in sorted({size - 1, size // 2}):
                try:
                    got = _invoke(self.ctx, solution, problem, inputs, _garbage_workspace(short))
                except Exception:
                    continue  # failing cleanly is what a short workspace should do
                runs += 1
                err = reference.relative_error(got, _expected(problem, inputs))
                if not (math.isfinite(err) and err <= self.bound(problem, config)):
                    self.fail(
                        "workspace_size",
                        f"given {short} B of the {size} B it asks for, it neither raised nor "
                        f"computed the right answer (relative error {err:.3g})",
                        problem,
                    )
        return runs

    def check_perf_configs(self) -> tuple[int, int]:
        """Every config of the space is rejected by ``is_valid_perf_config`` or runs right.

        Returns ``(configs run, configs rejected)``; (0, 0) for a solver that is not tunable.
        """
        solver = self.solver
        if not isinstance(solver, TunableSolver):
            return 0, 0
        ran = rejected = 0
        stale = PerfConfig(__contract_stale__=1)
        for i, problem in enumerate(self._require_applicable()[: self.perf_config_problems]):
            canon = problem.canonical
            default = self._call(
                "perf_config",
                problem,
                "default_perf_config",
                lambda canon=canon: solver.default_perf_config(self.ctx, canon),
            )
            if not isinstance(default, PerfConfig):
                self.fail("perf_config", f"default_perf_config returned {default!r}", problem)
            if not solver.is_valid_perf_config(self.ctx, canon, default):
                self.fail(
                    "perf_config",
                    f"its default {default.to_string()} is rejected by is_valid_perf_config",
                    problem,
                )
            accepts_stale = self._call(
                "perf_config",
                problem,
                "is_valid_perf_config on a stale PerfDb entry",
                lambda canon=canon: solver.is_valid_perf_config(self.ctx, canon, stale),
            )
            if accepts_stale:
                self.fail(
                    "perf_config",
                    f"is_valid_perf_config accepts {stale.to_string()}, which is not in its "
                    "space: a stale PerfDb entry would be used",
                    problem,
                )
            space = self._call(
                "perf_config",
                problem,
                "perf_config_space",
                lambda canon=canon: list(solver.perf_config_space(self.ctx, canon)),
            )
            if not space:
                self.fail("perf_config", "perf_config_space is empty", problem)
            for config in _spread(space, self.max_perf_configs):
                if not isinstance(config, PerfConfig):
                    self.fail(
                        "perf_config",
                        f"perf_config_space yielded {config!r}, not a miocore.PerfConfig",
                        problem,
                    )
                if PerfConfig.from_string(config.to_string()) != config:
                    self.fail(
                        "perf_config",
                        f"{config!r} does not survive the PerfDb's text round trip",
                        problem,
                    )
                valid = self._call(
                    "perf_config",
                    problem,
                    f"is_valid_perf_config({config.to_string()})",
                    lambda canon=canon, config=config: solver.is_valid_perf_config(
                        self.ctx, canon, config
                    ),
                )
                if not valid:
                    rejected += 1
                    continue
                self._run_checked("perf_config", problem, config, seed=100 + i)
                ran += 1
        return ran, rejected

    def check_correctness(self, direction: Direction | str | None = None) -> int:
        """Results match the reference in ``direction`` (else every claimed direction).

        Each problem runs directly; the first of each direction also runs through a
        :class:`~miocore.Handle` holding only this solver, as users run it. Returns the runs.
        """
        if direction is not None:
            wanted = [Direction.parse(direction)]
        else:
            self._require_applicable()
            wanted = list(self.problems.claimed_directions)
        runs = 0
        for d in wanted:
            problems = self.problems.applicable.get(d, ())
            if not problems:
                self.fail(
                    "correctness",
                    f"it applies to no generated {d.value} problem, so it cannot be checked in "
                    "that direction; pass problems=[...] that it solves",
                )
            for i, problem in enumerate(problems):
                self._run_checked(
                    "correctness", problem, self._default_config(problem.canonical), i
                )
                runs += 1
            if self.ctx.backend == "cpu":
                self._through_handle(problems[0])
                runs += 1
        return runs

    def _through_handle(self, problem: ConvProblem) -> None:
        from miocore.find.handle import Handle
        from miocore.solver.registry import Registry

        with tempfile.TemporaryDirectory(prefix="miocore-contract-") as tmp:
            handle = Handle(
                "cpu",
                registry=Registry.from_solvers([self.solver]),
                user_db_path=Path(tmp) / "user",
                system_db_path=Path(tmp) / "system",
            )
            arrays = _inputs(problem, seed=7)
            expected = _expected(problem, arrays)
            self._call(
                "correctness",
                problem,
                "running through a Handle (immediate mode)",
                lambda: handle.immediate(problem, self.name, **arrays),
            )
            out = arrays[problem.direction.output_tensor]
            err = reference.relative_error(out, expected)
            tol = self.bound(problem, self._default_config(problem.canonical))
            if not (math.isfinite(err) and err <= tol):
                self.fail(
                    "correctness",
                    f"through a Handle: relative error {err:.3g} exceeds {tol:.3g}",
                    problem,
                )

    def check_wti(self) -> None:
        """``wti`` is a finite number in (0, 1] for every applicable problem, and stable."""
        for problem in self._require_applicable():
            canon = problem.canonical
            value = self._call(
                "wti", problem, "wti", lambda canon=canon: self.solver.wti(self.ctx, canon)
            )
            if isinstance(value, bool) or not isinstance(value, int | float):
                self.fail("wti", f"returned {value!r}, expected a float", problem)
            if not self.require_wti and value < 0:
                continue  # "unknown" allowed: immediate mode ranks it last
            if not (math.isfinite(value) and 0 < value <= 1):
                self.fail(
                    "wti",
                    f"returned {value!r}; expected a finite fraction of peak in (0, 1] "
                    "(immediate mode ranks solvers by it)",
                    problem,
                )
            again = self.solver.wti(self.ctx, canon)
            if again != value:
                self.fail("wti", f"answered {value!r} then {again!r}", problem)

    def check_notes_and_find_configs(self) -> None:
        """``notes_for`` names known notes for every applicable problem (with its default
        setting), and a tunable solver's ``find_configs`` are valid settings of the problem."""
        from miocore.solver.numerics import KNOWN_NOTES

        for problem in self._require_applicable():
            canon = problem.canonical
            config = self._default_config(canon)
            notes = self._call(
                "notes_for",
                problem,
                "notes_for",
                lambda canon=canon, config=config: self.solver.notes_for(self.ctx, canon, config),
            )
            if isinstance(notes, str) or not isinstance(notes, set | frozenset):
                self.fail("notes_for", f"returned {notes!r}, not a set of note names", problem)
            if set(notes) - KNOWN_NOTES:
                self.fail(
                    "notes_for",
                    f"unknown numerical notes {sorted(set(notes) - KNOWN_NOTES)}; known: "
                    f"{sorted(KNOWN_NOTES)}",
                    problem,
                )
            if not isinstance(self.solver, TunableSolver):
                continue
            listed = self._call(
                "find_configs",
                problem,
                "find_configs",
                lambda canon=canon: self.solver.find_configs(self.ctx, canon),
            )
            for listed_config in listed:
                if not self.solver.is_valid_perf_config(self.ctx, canon, listed_config):
                    self.fail(
                        "find_configs",
                        f"lists {listed_config!r}, which is_valid_perf_config refuses",
                        problem,
                    )

    def check_inapplicable_never_run(self, db_dir: str | Path | None = None) -> int:
        """find, immediate mode and the workspace query never size, build or run the solver on
        a problem it declines; they raise, naming its reason. Returns how many were checked.

        A spy wraps the solver and records every call; an applicable problem, when there is
        one, is found first as a positive control (the spy sees calls when they are due).
        """
        declined = self.problems.inapplicable
        if not declined:
            return 0
        with tempfile.TemporaryDirectory(prefix="miocore-contract-") as tmp:
            base = Path(db_dir) if db_dir is not None else Path(tmp)
            return self._never_run(declined, base)

    def _never_run(self, declined: Sequence[tuple[ConvProblem, str]], base: Path) -> int:
        from miocore.find.handle import Handle
        from miocore.solver.registry import Registry

        spy = spy_on(self.solver)
        handle = Handle(
            "cpu",
            registry=Registry.from_solvers([spy]),
            user_db_path=base / "user-db",
            system_db_path=base / "system-db",
        )
        control = self.problems.applicable_problems()[:1]
        for problem in control:
            self._call(
                "inapplicable",
                problem,
                "find on an applicable problem",
                # accuracy is the correctness rule's business: here only "was it run" counts
                lambda p=problem: handle.find_solutions(p, find_mode="NORMAL", accuracy="fast"),
            )
            if not spy.calls_for(problem.canonical, "invoker"):
                self.fail("inapplicable", "the spy saw no run of an applicable problem", problem)
        for problem, reason in declined:
            attempts: list[tuple[str, type[Exception], Callable[[], Any]]] = [
                (
                    "find_solutions",
                    NoApplicableSolverError,
                    lambda p=problem: handle.find_solutions(p, find_mode="NORMAL"),
                ),
                (
                    "get_solutions",
                    NoApplicableSolverError,
                    lambda p=problem: handle.get_solutions(p),
                ),
                (
                    "get_solution_workspace_size",
                    NotApplicableError,
                    lambda p=problem: handle.get_solution_workspace_size(p, self.name),
                ),
                (
                    "immediate",
                    NotApplicableError,
                    lambda p=problem: handle.immediate(
                        p, self.name, **reference.random_inputs(p, 0)
                    ),
                ),
            ]
            for what, expected, call in attempts:
                try:
                    call()
                except expected as exc:
                    if reason and reason not in str(exc):
                        self.fail(
                            "inapplicable", f"{what} did not pass on its reason: {exc}", problem
                        )
                else:
                    self.fail("inapplicable", f"{what} accepted a declined problem", problem)
            used = [
                stage
                for stage in ("workspace_size", "get_solution", "invoker")
                if spy.calls_for(problem.canonical, stage)
            ]
            if used:
                self.fail(
                    "inapplicable",
                    f"declined it ({reason!r}) but {', '.join(used)} was called anyway",
                    problem,
                )
        return len(declined)

    def check_all(self) -> ContractReport:
        """Every rule, in order; raises the first :class:`ContractViolation`."""
        start = time.perf_counter()
        report = ContractReport(solver=self.name)
        self.check_registration()
        self.check_is_applicable()
        report.runs += self.check_correctness()
        report.runs += self.check_workspace()
        report.perf_configs, report.rejected_perf_configs = self.check_perf_configs()
        report.runs += report.perf_configs
        self.check_wti()
        self.check_notes_and_find_configs()
        report.inapplicable = self.check_inapplicable_never_run()
        report.problems = len(self.problems.applicable_problems())
        report.directions = tuple(d.value for d in self.problems.claimed_directions)
        report.seconds = time.perf_counter() - start
        return report


def check_contract(solver: Solver | Any, **options: Any) -> ContractReport:
    """Run every rule of the contract on ``solver`` (a Solver, or its SolverRecord or
    RegisteredSolver; options as :class:`Contract`)."""
    return Contract(solver, **options).check_all()


def _spread(items: Sequence[Any], limit: int) -> list[Any]:
    """At most ``limit`` items, evenly spread, always with the first and the last."""
    if len(items) <= limit:
        return list(items)
    if limit <= 1:
        return list(items[:limit])
    step = (len(items) - 1) / (limit - 1)
    return [items[round(i * step)] for i in range(limit)]


# -- the spy -------------------------------------------------------------------------------------


__all__ = [
    "BUILTIN_SHAPES",
    "CORPUS_HEAD_ROWS",
    "DEFAULT_TOLERANCES",
    "DIRECTIONS",
    "Contract",
    "ContractReport",
    "ContractViolation",
    "ProblemSet",
    "Tolerance",
    "builtin_problems",
    "check_contract",
    "corpus_problems",
    "generate_problems",
    "spy_on",
]
