"""Fitted WTI: each solver's WTI estimate corrected by its measured ratio on tuned data.

A solver's WTI says what fraction of the roofline it reaches; the estimate it implies is
``ideal_ms / wti``. On a tuned FindDb the measured time differs from that estimate by a factor
that is fairly stable per solver and direction, plus a fixed cost that a roofline does not
see (launches, a library's setup, a pass over a workspace) and that dominates small problems.
The table stores, per (solver, direction) and per solver, a log correction ``c`` and a fixed
time ``f`` in ms, as JSON beside the model (``<device>.wti.json``); the corrected estimate is
``ideal_ms / wti * exp(c) + f``. ``f`` is the value, among a few candidates taken from the
solver's fastest measured times, that leaves the smallest median log error; ``c`` is then the
median of ``log((measured - f) / estimate)``. Tables written before the fixed term load with
``f = 0``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from miocore.db._common import miocore_version
from miocore.db._sqlite import utc_now_iso
from miocore.errors import InvalidArgumentError
from miocore.heuristic.model import ModelFormatError
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import ExecutionContext
from miocore.values import evolve, field, frozen

FORMAT = "miocore-wti-corrections"


@frozen(kw_only=True)
class WtiTable:
    """Per-solver (and per solver and direction) log corrections of WTI estimates and fixed
    times: ``fixed_ms[solver][direction]``, ``fixed_ms[solver][""]`` for the pooled fit."""

    device: str
    by_solver: Mapping[str, float]
    by_direction: Mapping[str, Mapping[str, float]]
    fixed_ms: Mapping[str, Mapping[str, float]] = field(factory=dict)
    provenance: Mapping[str, Any] = field(factory=dict)

    def correction(self, solver: str, direction: str) -> float | None:
        """The log correction of ``solver`` in ``direction``; None when it was not fitted."""
        per_dir = self.by_direction.get(solver, {})
        if direction in per_dir:
            return per_dir[direction]
        return self.by_solver.get(solver)

    def fixed(self, solver: str, direction: str) -> float:
        """The fixed time (ms) fitted with :meth:`correction`'s value (0 where none was)."""
        fixed = self.fixed_ms.get(solver, {})
        key = direction if direction in self.by_direction.get(solver, {}) else ""
        return fixed.get(key, 0.0)

    def estimate_ms(self, ctx: ExecutionContext, solver: Any, problem: ConvProblem) -> float | None:
        """``solver``'s fitted estimate for the canonical ``problem``, or None."""
        direction = problem.direction.value
        corr = self.correction(solver.name, direction)
        if corr is None:
            return None
        score = float(solver.wti(ctx, problem))
        if not math.isfinite(score) or score <= 0:
            return None
        return ctx.ideal_ms(problem) / score * math.exp(corr) + self.fixed(solver.name, direction)

    def save(self, path: Path | str) -> Path:
        """Write the table as JSON, atomically."""
        dest = Path(path)
        data = {
            "format": FORMAT,
            "device": self.device,
            "by_solver": dict(sorted(self.by_solver.items())),
            "by_direction": {
                k: dict(sorted(v.items())) for k, v in sorted(self.by_direction.items())
            },
            "fixed_ms": {k: dict(sorted(v.items())) for k, v in sorted(self.fixed_ms.items())},
            "provenance": dict(self.provenance),
        }
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(dest)
        return dest

    @classmethod
    def load(cls, path: Path | str) -> WtiTable:
        """Read a table written by :meth:`save`."""
        src = Path(path)
        try:
            data = json.loads(src.read_text())
        except FileNotFoundError as exc:
            raise InvalidArgumentError("no such file", field="wti_table", value=str(src)) from exc
        except (OSError, ValueError) as exc:
            raise ModelFormatError(f"not JSON: {exc}", field="wti_table", value=str(src)) from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ModelFormatError(f"not a {FORMAT} file", field="wti_table", value=str(src))
        return cls(
            device=str(data["device"]),
            by_solver={str(k): float(v) for k, v in data["by_solver"].items()},
            by_direction={
                str(s): {str(d): float(v) for d, v in per.items()}
                for s, per in data["by_direction"].items()
            },
            fixed_ms={
                str(s): {str(d): float(v) for d, v in per.items()}
                for s, per in data.get("fixed_ms", {}).items()
            },
            provenance=data.get("provenance", {}),
        )


def fit_wti(
    samples: Iterable[
        tuple[ConvProblem, Mapping[str, float]] | tuple[ConvProblem, Mapping[str, float], str]
    ],
    ctx: ExecutionContext,
    solvers: Mapping[str, Any],
    *,
    device: str,
    min_samples: int = 5,
) -> WtiTable:
    """Fit the table from ``(problem, {solver: measured ms})`` pairs on the device ``ctx``
    describes; ``solvers`` maps names to solver objects (unknown names are skipped). A sample
    may name the math mode its times were measured in (a third item, default ``ctx``'s): its
    solvers' WTI are asked in that mode."""
    pairs: dict[tuple[str, str], list[tuple[float, float]]] = {}
    contexts = {ctx.math_mode: ctx}
    for problem, times, *mode in samples:
        math_mode = mode[0] if mode else ctx.math_mode
        here = contexts.get(math_mode)
        if here is None:
            here = contexts[math_mode] = evolve(ctx, math_mode=math_mode)
        canon = problem.canonical
        ideal = here.ideal_ms(canon)
        for name, ms in times.items():
            solver = solvers.get(name)
            if solver is None or ms <= 0:
                continue
            try:
                score = float(solver.wti(here, canon))
            except Exception:  # a solver whose WTI raises is simply not fitted
                continue
            if math.isfinite(score) and score > 0:
                pairs.setdefault((name, canon.direction.value), []).append((ideal / score, ms))
    by_direction: dict[str, dict[str, float]] = {}
    fixed_ms: dict[str, dict[str, float]] = {}
    pooled: dict[str, list[tuple[float, float]]] = {}
    for (name, direction), values in pairs.items():
        pooled.setdefault(name, []).extend(values)
        if len(values) >= min_samples:
            corr, fixed = fit_pairs(values)
            by_direction.setdefault(name, {})[direction] = corr
            fixed_ms.setdefault(name, {})[direction] = fixed
    by_solver = {}
    for name, values in pooled.items():
        if len(values) >= min_samples:
            by_solver[name], fixed_ms.setdefault(name, {})[""] = fit_pairs(values)
    return WtiTable(
        device=device,
        by_solver=by_solver,
        by_direction=by_direction,
        fixed_ms=fixed_ms,
        provenance={
            "fitted_at": utc_now_iso(),
            "miocore": miocore_version(),
            "samples": sum(len(v) for v in pooled.values()),
        },
    )


#: The fixed-time candidates: 0 and these shares of the solver's fastest measured time (a
#: fixed cost cannot exceed the fastest run). Candidates from higher quantiles too (up to the
#: 25th percentile) fitted large fixed times and slopes that collapsed on the problems the
#: WTI misjudges most (a depthwise layer's backward weights on `igemm.wrw`: 0.11 ms estimated,
#: 4.6 measured). On the shipped CPU database, held-out problems ranked by the fitted table
#: alone: 73-75% within 10% of the best, mean regret 19-23%, against 32-34% and 189-211% fitted
#: without a fixed time on the same day (docs/tuning.md).
FIXED_QUANTILES = (0.0,)
FIXED_SHARES = (0.25, 0.5, 0.9)


def fit_pairs(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    """(log correction, fixed ms) of ``(estimate, measured)`` pairs: the candidate fixed time
    (see :data:`FIXED_QUANTILES`) whose fit leaves the smallest median ``|log error|``, the
    correction the median of ``log((measured - fixed) / estimate)`` (the difference floored
    at a thousandth of the measured time)."""
    times = sorted(t for _, t in pairs)
    candidates = {0.0} | {
        times[int(q * (len(times) - 1))] * share for q in FIXED_QUANTILES for share in FIXED_SHARES
    }
    best: tuple[float, float, float] | None = None
    for fixed in sorted(candidates):
        corr = statistics.median(math.log(max(t - fixed, 1e-3 * t) / e) for e, t in pairs)
        scale = math.exp(corr)
        error = statistics.median(abs(math.log(t) - math.log(scale * e + fixed)) for e, t in pairs)
        if best is None or error < best[0]:
            best = (error, corr, fixed)
    assert best is not None
    return best[1], best[2]
