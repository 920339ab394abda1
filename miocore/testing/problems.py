"""The problems the contract suite checks a solver on: a built-in set covering every kind of
problem in every direction, interleaved with the first rows of the real-problem corpus."""

from __future__ import annotations

import gzip
import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from miocore.backends.cpu import cpu_device_info
from miocore.errors import (
    MiocoreError,
    NotApplicableError,
)
from miocore.problem.conv import ConvProblem, Direction
from miocore.solver.interface import (
    ExecutionContext,
    Solver,
    TunableSolver,
    normalize_applicability,
)
from miocore.values import frozen

DIRECTIONS: tuple[Direction, ...] = (
    Direction.FORWARD,
    Direction.BACKWARD_DATA,
    Direction.BACKWARD_WEIGHTS,
)

#: Corpus rows read from the start of the file: enough for every kind of row (about 90
#: strata) in a tenth of a second, where loading all 210,000 rows takes many seconds.
CORPUS_HEAD_ROWS = 6000


def _sizes(**kwargs: Any) -> dict[str, Any]:
    return kwargs


#: Built-in problem shapes (as ordinary convolutions; each is used in every direction). Small
#: enough that the float64 reference takes a millisecond, varied enough to hit every code path.
# fmt: off
BUILTIN_SHAPES: tuple[dict[str, Any], ...] = (
    _sizes(n=2, c=4, k=6, in_spatial=(8, 8), filter_spatial=(3, 3), pads=(1, 1)),
    _sizes(n=2, c=8, k=4, in_spatial=(5, 5), filter_spatial=(1, 1)),
    _sizes(n=1, c=6, k=8, in_spatial=(7, 7), filter_spatial=(1, 1), strides=(2, 2),
           layout="NHWC"),
    _sizes(n=2, c=4, k=4, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1), strides=(2, 2),
           layout="NHWC", dtype="float16"),
    _sizes(n=1, c=3, k=5, in_spatial=(9, 9), filter_spatial=(5, 5), pads=(2, 2),
           dtype="bfloat16"),
    _sizes(n=1, c=4, k=4, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(2, 2),
           dilations=(2, 2)),
    _sizes(n=2, c=8, k=4, in_spatial=(6, 6), filter_spatial=(3, 3), pads=(1, 1), groups=2),
    _sizes(n=1, c=4, k=4, in_spatial=(6, 6), filter_spatial=(3, 3), pads=(1, 1), groups=4),
    _sizes(n=1, c=4, k=4, in_spatial=(6, 9), filter_spatial=(1, 7), pads=(0, 3)),
    _sizes(n=1, c=2, k=3, in_spatial=(5, 5, 5), filter_spatial=(3, 3, 3), pads=(1, 1, 1)),
    _sizes(n=1, c=4, k=4, in_spatial=(3, 4, 5), filter_spatial=(1, 1, 1), layout="NDHWC",
           dtype="float16"),
    _sizes(n=2, c=4, k=4, in_spatial=(8, 8), filter_spatial=(2, 2), strides=(2, 2)),
    _sizes(n=1, c=3, k=4, in_spatial=(12, 12), filter_spatial=(7, 7), pads=(3, 3),
           strides=(2, 2)),
    _sizes(n=1, c=4, k=6, in_spatial=(7, 11), filter_spatial=(3, 3)),
    _sizes(n=2, c=8, k=8, in_spatial=(4, 4), filter_spatial=(1, 1), groups=2, layout="NHWC",
           dtype="float16"),
    _sizes(n=1, c=4, k=4, in_spatial=(6, 6), filter_spatial=(3, 3), pads=(1, 1),
           dtype="float16"),
    _sizes(n=1, c=4, k=4, in_spatial=(6, 6), filter_spatial=(3, 3), pads=(1, 1),
           dtype="bfloat16"),
)
# fmt: on


def builtin_problems(directions: Iterable[Direction | str] = DIRECTIONS) -> list[ConvProblem]:
    """:data:`BUILTIN_SHAPES` in each of ``directions`` (shape-major order)."""
    dirs = [Direction.parse(d) for d in directions]
    return [ConvProblem.from_sizes(d, **shape) for shape in BUILTIN_SHAPES for d in dirs]


def corpus_problems(
    directions: Iterable[Direction | str] = DIRECTIONS, *, count: int = 12, seed: int = 0
) -> list[ConvProblem]:
    """Up to ``count`` real corpus rows per direction, shrunk to test size; [] without corpus.

    Reads only the first :data:`CORPUS_HEAD_ROWS` rows, which hold every kind of row, so the
    suite stays fast; the corpus helpers (:mod:`miocore.corpus`) sample and shrink them.
    """
    from miocore.corpus import find_corpus, sample_rows, shrink_row

    path = find_corpus()
    if path is None:
        return []
    with gzip.open(path, "rt") as handle:
        rows = [json.loads(line) for line in itertools.islice(handle, CORPUS_HEAD_ROWS)]
    out: list[ConvProblem] = []
    picked = sample_rows(count, seed=seed, rows=rows)
    for d in directions:
        direction = Direction.parse(d)
        for row in picked:
            try:
                out.append(shrink_row(row, direction=direction.value))
            except MiocoreError:  # a row that cannot be shrunk consistently: not a test case
                continue
    return out


@frozen(kw_only=True)
class ProblemSet:
    """The problems a contract run uses, split by the solver's own answers.

    ``applicable[direction]``: problems the solver accepts (the directions it claims are the
    non-empty keys); ``inapplicable``: problems it declines, with its reasons; ``all``: every
    problem asked about.
    """

    applicable: Mapping[Direction, tuple[ConvProblem, ...]]
    inapplicable: tuple[tuple[ConvProblem, str], ...]
    all: tuple[ConvProblem, ...]

    @property
    def claimed_directions(self) -> tuple[Direction, ...]:
        """Directions with at least one applicable problem."""
        return tuple(d for d in DIRECTIONS if self.applicable.get(d))

    def applicable_problems(self) -> list[ConvProblem]:
        """Every applicable problem, directions interleaved (so a prefix covers all of them)."""
        groups = [list(self.applicable.get(d, ())) for d in DIRECTIONS]
        return [p for row in itertools.zip_longest(*groups) for p in row if p is not None]


def generate_problems(
    solver: Solver,
    ctx: ExecutionContext | None = None,
    *,
    per_direction: int = 6,
    inapplicable: int = 6,
    use_corpus: bool = True,
    extra: Sequence[ConvProblem] = (),
    seed: int = 0,
) -> ProblemSet:
    """Ask ``solver`` about the built-in (and corpus) problems; keep a modest, varied set.

    ``extra`` problems are asked first, so a solver with a narrow domain can bring its own.
    Built-in and corpus problems are interleaved, so both kinds are represented.
    """
    ctx = ctx or ExecutionContext(device=cpu_device_info())
    builtin = builtin_problems()
    corpus = corpus_problems(seed=seed) if use_corpus else []
    mixed = [p for pair in itertools.zip_longest(builtin, corpus) for p in pair if p is not None]
    candidates = [*extra, *mixed]
    applicable: dict[Direction, list[ConvProblem]] = {d: [] for d in DIRECTIONS}
    declined: dict[Direction, list[tuple[ConvProblem, str]]] = {d: [] for d in DIRECTIONS}
    asked: list[ConvProblem] = []
    seen: set[tuple[str, str]] = set()
    for problem in candidates:
        canon = problem.canonical
        ident = (canon.key, canon.network_config)
        if ident in seen:
            continue
        seen.add(ident)
        d = canon.direction
        if len(applicable[d]) >= per_direction and len(declined[d]) >= inapplicable:
            continue
        asked.append(problem)
        try:
            answer = normalize_applicability(solver.is_applicable(ctx, canon))
        except Exception:  # check_is_applicable reports it; here the problem just is not used
            continue
        if (
            answer
            and getattr(solver, "deferred_setup", False)
            and _setup_refused(solver, ctx, canon)
        ):
            continue  # listed, refused at setup: neither an applicable nor a declined example
        if answer and len(applicable[d]) < per_direction:
            applicable[d].append(problem)
        elif not answer and len(declined[d]) < inapplicable:
            declined[d].append((problem, answer.reason))
    # Inapplicable problems round-robin over directions, at most ``inapplicable`` in all.
    mixed_declined = [
        p for row in itertools.zip_longest(*declined.values()) for p in row if p is not None
    ][:inapplicable]
    return ProblemSet(
        applicable={d: tuple(v) for d, v in applicable.items()},
        inapplicable=tuple(mixed_declined),
        all=tuple(asked),
    )


def _setup_refused(solver: Solver, ctx: ExecutionContext, canon: ConvProblem) -> bool:
    """Whether a ``deferred_setup`` solver refuses ``canon`` when its setup is asked for (find
    then counts it not applicable); other faults are left to the contract's checks."""
    try:
        config = (
            solver.default_perf_config(ctx, canon) if isinstance(solver, TunableSolver) else None
        )
        solver.workspace_size(ctx, canon, config)
    except NotApplicableError:
        return True
    except Exception:
        return False
    return False


# -- running one solution -------------------------------------------------------------------------
