"""Fitted WTI: each solver's WTI estimate corrected by its measured ratio on tuned data.

A solver's WTI says what fraction of the roofline it reaches; the estimate it implies is
``ideal_ms / wti``. On a tuned FindDb the measured time differs from that estimate by a factor
that is fairly stable per solver and direction; the table stores the median of
``log(measured / estimate)`` per (solver, direction) and per solver, as JSON beside the model
(``<device>.wti.json``). The corrected estimate is ``ideal_ms / wti * exp(correction)``.
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
    """Per-solver (and per solver and direction) log corrections of WTI estimates."""

    device: str
    by_solver: Mapping[str, float]
    by_direction: Mapping[str, Mapping[str, float]]
    provenance: Mapping[str, Any] = field(factory=dict)

    def correction(self, solver: str, direction: str) -> float | None:
        """The log correction of ``solver`` in ``direction``; None when it was not fitted."""
        per_dir = self.by_direction.get(solver, {})
        if direction in per_dir:
            return per_dir[direction]
        return self.by_solver.get(solver)

    def estimate_ms(self, ctx: ExecutionContext, solver: Any, problem: ConvProblem) -> float | None:
        """``solver``'s fitted estimate for the canonical ``problem``, or None."""
        corr = self.correction(solver.name, problem.direction.value)
        if corr is None:
            return None
        score = float(solver.wti(ctx, problem))
        if not math.isfinite(score) or score <= 0:
            return None
        return ctx.ideal_ms(problem) / score * math.exp(corr)

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
    ratios: dict[tuple[str, str], list[float]] = {}
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
                ratios.setdefault((name, canon.direction.value), []).append(
                    math.log(ms) - math.log(ideal / score)
                )
    by_direction: dict[str, dict[str, float]] = {}
    pooled: dict[str, list[float]] = {}
    for (name, direction), values in ratios.items():
        pooled.setdefault(name, []).extend(values)
        if len(values) >= min_samples:
            by_direction.setdefault(name, {})[direction] = statistics.median(values)
    by_solver = {n: statistics.median(v) for n, v in pooled.items() if len(v) >= min_samples}
    return WtiTable(
        device=device,
        by_solver=by_solver,
        by_direction=by_direction,
        provenance={
            "fitted_at": utc_now_iso(),
            "miocore": miocore_version(),
            "samples": sum(len(v) for v in pooled.values()),
        },
    )
