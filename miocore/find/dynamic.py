"""DYNAMIC_HYBRID's selection on a FindDb miss: which candidates find measures.

Ready candidates (dynamic solvers, and solvers whose kernels for the problem are already in
the binary cache) are measured; a candidate that needs a compile for this problem is measured
only where it is predicted to beat every ready one (design guide §4, docs/find-modes.md): by
the learned heuristic's estimate where it knows the candidates; a candidate it does not know
(a solver newer than the model) by its WTI time, doubted as immediate mode doubts a newcomer,
against the heuristic's best ready estimate; with no estimate of a ready one, by WTI against
WTI. A dynamic solver
whose library still compiles for the problem (``Solver.compiles_for``) counts as needing a
compile.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from miocore.find.candidates import Candidate, settle
from miocore.find.ranker import NEWCOMER_DOUBT
from miocore.find.settings import alternatives_factor, estimate_prune_factor
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import TunableSolver
from miocore.solver.results import FindReport

if TYPE_CHECKING:
    from miocore.find.engine import FindEngine

log = logging.getLogger("miocore.find")

#: A candidate that needs a compile (its own kernel, or a library's run-time compiled engine)
#: is measured where the learned estimate puts it within this factor of the best ready
#: candidate's estimate, not only below it: the estimates err by tens of percent, and a
#: compile missed costs its layer up to 2-5x (cuDNN's depthwise engines; miocore's own
#: depthwise kernels against the one-thread-per-output fallback, ~10x). Replayed on recorded
#: times (docs/performance-gpu-first-find.md), 1.0 kept 108 of 115 EfficientNet-B0 and 123 of
#: 129 MobileNetV3-L choices within 5% of the best, 1.5 kept 114 and 127 (all, with a model
#: trained on more fp16 depthwise layers).
COMPILE_MARGIN = 1.5


def dynamic_only(
    engine: FindEngine, problem: ConvProblem, candidates: list[Candidate], report: FindReport
) -> list[Candidate]:
    """DYNAMIC_HYBRID's miss: the candidates that need no compile for this problem, and
    the ones that do but are predicted to beat them.

    Ready are the dynamic solvers and those whose kernels for this problem are already
    built (in memory or in the binary cache: kernels compiled for a filter geometry serve
    every layer of that geometry). A solver that would need a compile (its own kernel or
    its library's) is measured too when it is predicted to beat every ready one (see
    :func:`_worth_compiling`); the rest are left out, with the reason in the report.
    """
    state = engine.state
    canon = problem.canonical
    ready: list[Candidate] = []
    to_compile: list[Candidate] = []
    library: list[Candidate] = []  # dynamic, but their library compiles for the problem
    left_out: list[Candidate] = []
    for cand in candidates:
        solver = cand.reg.solver
        if solver.is_dynamic:
            (library if _compiles(engine, cand, canon) else ready).append(cand)
            continue
        if not settle(cand, report):
            continue
        kernels = _kernels(engine, canon, cand)
        if not kernels:  # declared not dynamic and nothing to tell from its kernels
            left_out.append(cand)
        elif _binaries_ready(engine, kernels):
            ready.append(cand)
        else:
            to_compile.append(cand)
    if not ready and not to_compile and not library:
        log.info("no dynamic solver applies to %s; benchmarking all", problem.key)
        return candidates
    ideal = state.context.ideal_ms(canon)
    to_compile += library
    heuristic, estimates = engine.estimates(canon, [c.reg.name for c in ready + to_compile])
    worth = _worth_compiling(engine, canon, ready, to_compile, ideal, estimates)
    for cand in left_out:
        report.skipped[cand.reg.name] = (
            "DYNAMIC_HYBRID find benchmarks only dynamic solvers on a miss"
        )
    for cand in to_compile:
        if cand not in worth:
            report.skipped[cand.reg.name] = (
                "DYNAMIC_HYBRID: needs a compile for this problem and a ready solver is "
                "predicted at least as fast"
            )
    chosen = _drop_hopeless(ready + worth, estimates, heuristic, report)
    log.debug("%s: DYNAMIC_HYBRID measures %s", problem.key, ", ".join(c.reg.name for c in chosen))
    return chosen


def _worth_compiling(
    engine: FindEngine,
    canon: ConvProblem,
    ready: list[Candidate],
    to_compile: list[Candidate],
    ideal: float,
    estimates: dict[str, float],
) -> list[Candidate]:
    """The candidates needing a compile that are predicted to beat every ready one: by the
    first applicable heuristic's estimates where it knows the candidate and a ready one
    (within :data:`COMPILE_MARGIN` of the best ready estimate it knows); a candidate it does
    not know by its WTI time times :data:`~miocore.find.ranker.NEWCOMER_DOUBT` against the
    same bar (the heuristic's estimates of the ready ones are better than their WTI, which
    flatters a TF32 GEMM on a 3-channel stem 7x: replayed on the H200's stem finds, the
    default find's choice within 5% of NORMAL's in 34 of 36 where WTI against WTI kept 31,
    worst 1.54x instead of 3.67x); without a known ready one, by WTI (below the best ready WTI
    prediction).

    One rule for a solver's own kernels and a library's run-time compiled engines: raw WTI
    is blind where a learned model is not (a TF32 GEMM's WTI rated it above the depthwise
    kernels on depthwise layers it ran 50x slower; the WTI of an engine's rank in its
    library's list says nothing of where it wins).
    """
    if not to_compile:
        return []
    best_ready = min((engine.predicted(ideal, c, canon) for c in ready), default=float("inf"))
    best_known = min(
        (estimates[c.reg.name] for c in ready if c.reg.name in estimates), default=None
    )
    worth = []
    for cand in to_compile:
        guess = estimates.get(cand.reg.name)
        if guess is not None and best_known is not None:
            if guess < COMPILE_MARGIN * best_known:
                worth.append(cand)
        elif best_known is not None:
            newcomer = NEWCOMER_DOUBT * engine.predicted(ideal, cand, canon)
            if newcomer < COMPILE_MARGIN * best_known:
                worth.append(cand)
        elif engine.predicted(ideal, cand, canon) < best_ready:
            worth.append(cand)
    return worth


def _drop_hopeless(
    chosen: list[Candidate], estimates: dict[str, float], heuristic: str, report: FindReport
) -> list[Candidate]:
    """``chosen`` less the candidates the heuristic estimates over
    ``MIOCORE_FIND_ESTIMATE_PRUNE`` times its best estimate among them (those it cannot
    estimate stay). Each measured candidate costs a warm-up and several runs, and a library
    engine a plan built first; a first find with every plugin has 30-60 candidates, most of
    them hopeless. Replayed on the live finds of 408 problems (every plugin, H200,
    2026-11-29), 4x leaves out 51% of the candidates and keeps the fastest in every one; on
    2,868 network layers' recorded finds it keeps the fastest in 99.9%
    (docs/performance-gpu-first-find.md)."""
    factor = estimate_prune_factor()
    known = [estimates[c.reg.name] for c in chosen if c.reg.name in estimates]
    if not factor or len(known) < 2:
        return chosen
    best = min(known)
    kept = []
    for cand in chosen:
        guess = estimates.get(cand.reg.name)
        if guess is not None and guess > factor * best:
            report.skipped[cand.reg.name] = (
                f"DYNAMIC_HYBRID: {heuristic} estimates {guess:.4g} ms, over {factor:g}x its "
                f"best estimate {best:.4g} ms"
            )
            continue
        kept.append(cand)
    return kept


def _compiles(engine: FindEngine, cand: Candidate, canon: ConvProblem) -> bool:
    method = getattr(cand.reg.solver, "compiles_for", None)
    if method is None:  # a solver written before the method existed
        return False
    try:
        return bool(method(engine.state.context, canon))
    except Exception:  # measured as a dynamic solver; a real fault surfaces there
        return False


def candidate_kernels(
    engine: FindEngine, problem: ConvProblem, candidates: list[Candidate]
) -> list[Any]:
    """The kernels of every candidate's solution of ``problem`` (its setting), and of a
    dynamic solver's ``find_configs`` too (a normal find may measure them, and their
    binaries serve every problem: built in the same parallel pass, not one by one inside
    the find); those that cannot say left out."""
    canon = problem.canonical
    out: list[Any] = []
    alternatives = alternatives_factor() > 0
    for cand in candidates:
        if not settle(cand, None):
            continue
        out += _kernels(engine, canon, cand)
        if alternatives and cand.reg.solver.is_dynamic:
            for config in _listed(engine, canon, cand):
                out += _kernels(engine, canon, cand, config)
    return out


def _listed(engine: FindEngine, canon: ConvProblem, cand: Candidate) -> list[Any]:
    """A tunable candidate's ``find_configs`` (none where it is not tunable or cannot say)."""
    solver = cand.reg.solver
    if not isinstance(solver, TunableSolver):
        return []
    try:
        listed = solver.find_configs(engine.state.context, canon)
        return [c for c in listed if c != cand.perf_config]
    except Exception:  # reported when the find measures them
        return []


def _kernels(
    engine: FindEngine, canon: ConvProblem, cand: Candidate, config: Any = None
) -> tuple[Any, ...]:
    try:
        setting = cand.perf_config if config is None else config
        solution = cand.reg.solver.get_solution(engine.state.context, canon, setting)
        return tuple(solution.kernels)
    except Exception:  # reported by the build when it is measured
        return ()


def _binaries_ready(engine: FindEngine, kernels: tuple[Any, ...]) -> bool:
    ready = getattr(engine.state.backend, "binaries_ready", None)
    if ready is None:
        return False
    try:
        return bool(ready(kernels))
    except Exception:  # an unreadable source or cache: treat as not built
        return False
