"""Fitted WTI: each solver's WTI estimate corrected by its measured ratio on tuned data.

A solver's WTI says what fraction of the roofline it reaches; the estimate it implies is
``ideal_ms / wti``. On a tuned FindDb the measured time differs from that estimate by a factor
``exp(correction)``. The table (JSON beside the model, ``<device>.wti.json``) stores two kinds
of correction of ``log(measured / estimate)``:

- per (solver, direction) with enough samples, a ridge regression on a few problem features
  (:data:`LINEAR_FEATURES`: sizes, arithmetic intensity, filter, layout, type), clipped to the
  range it was fitted on: a WTI is off by a factor that moves with the problem (a GEMM-based
  solver's WTI is too hopeful on small problems, a direct one's on large ones), and one
  factor per solver ranked worse than no correction on sm90's tuned problems;
- the median per (solver, direction) and per solver, for the rest and for older readers.

The corrected estimate is ``ideal_ms / wti * exp(correction)``.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from miocore.db._common import miocore_version
from miocore.db._sqlite import utc_now_iso
from miocore.errors import InvalidArgumentError
from miocore.heuristic.features import FEATURES, problem_features
from miocore.heuristic.model import ModelFormatError
from miocore.problem.conv import ConvProblem
from miocore.solver.interface import ExecutionContext
from miocore.values import evolve, field, frozen

FORMAT = "miocore-wti-corrections"
#: The problem features a linear correction reads (names of :data:`FEATURES`).
LINEAR_FEATURES: tuple[str, ...] = (
    "log2_flops",
    "log2_flops_per_byte",
    "pointwise",
    "depthwise",
    "log2_c_per_group",
    "log2_k_per_group",
    "log2_out_spatial",
    "log2_n",
    "channels_last",
    "dtype_float16",
    "dtype_bfloat16",
    "rank3",
    "log2_filter_taps",
    "stride_max",
)
#: Samples a (solver, direction) needs for a linear correction (fewer: the median).
MIN_LINEAR_SAMPLES = 20
#: Ridge penalty per sample on the standardized coefficients (the intercept is free). Chosen
#: on held-out records (docs/tuning.md section 3): 0.001-0.03 ranked alike on the CPU
#: database, 0.03-0.1 best on sm90's and on 2,868 network layers timed on an H200.
RIDGE = 0.03


@frozen(kw_only=True)
class WtiTable:
    """Per-solver (and per solver and direction) log corrections of WTI estimates."""

    device: str
    by_solver: Mapping[str, float]
    by_direction: Mapping[str, Mapping[str, float]]
    provenance: Mapping[str, Any] = field(factory=dict)
    #: Per solver and direction: the intercept and one coefficient per feature of
    #: ``linear_features`` (raw feature units), then the low and high correction fitted.
    linear: Mapping[str, Mapping[str, tuple[float, ...]]] = field(factory=dict)
    linear_features: tuple[str, ...] = LINEAR_FEATURES

    def correction(self, solver: str, direction: str) -> float | None:
        """The median log correction of ``solver`` in ``direction``; None when it was not
        fitted."""
        per_dir = self.by_direction.get(solver, {})
        if direction in per_dir:
            return per_dir[direction]
        return self.by_solver.get(solver)

    def correction_for(self, solver: str, problem: ConvProblem, math_mode: str) -> float | None:
        """The log correction of ``solver`` on ``problem`` found in ``math_mode``: linear where
        fitted for its direction, else the median; None when neither was fitted."""
        entry = self.linear.get(solver, {}).get(problem.direction.value)
        if entry is None:
            return self.correction(solver, problem.direction.value)
        x = _linear_inputs(problem, math_mode, self.linear_features)
        m = len(self.linear_features)
        value = entry[0] + sum(map(operator.mul, entry[1 : m + 1], x))
        return min(max(value, entry[m + 1]), entry[m + 2])  # no extrapolation past the fit

    def estimate_ms(self, ctx: ExecutionContext, solver: Any, problem: ConvProblem) -> float | None:
        """``solver``'s fitted estimate for the canonical ``problem``, or None."""
        corr = self.correction_for(solver.name, problem, ctx.math_mode)
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
            "linear_features": list(self.linear_features),
            "linear": {
                k: {d: list(c) for d, c in sorted(per.items())}
                for k, per in sorted(self.linear.items())
            },
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
        names = tuple(str(n) for n in data.get("linear_features", LINEAR_FEATURES))
        unknown = [n for n in names if n not in FEATURES]
        if unknown:  # a table of a newer miocore: its features are not computed here
            raise ModelFormatError(
                f"features {unknown} unknown to this miocore", field="wti_table", value=str(src)
            )
        linear = {
            str(s): {str(d): tuple(float(c) for c in coef) for d, coef in per.items()}
            for s, per in data.get("linear", {}).items()
        }
        if any(len(c) != len(names) + 3 for per in linear.values() for c in per.values()):
            raise ModelFormatError(
                "a linear correction of the wrong length", field="wti_table", value=str(src)
            )
        return cls(
            device=str(data["device"]),
            by_solver={str(k): float(v) for k, v in data["by_solver"].items()},
            by_direction={
                str(s): {str(d): float(v) for d, v in per.items()}
                for s, per in data["by_direction"].items()
            },
            provenance=data.get("provenance", {}),
            linear=linear,
            linear_features=names,
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
    rows: dict[tuple[str, str], list[np.ndarray]] = {}
    columns = _columns(LINEAR_FEATURES)
    contexts = {ctx.math_mode: ctx}
    for problem, times, *mode in samples:
        math_mode = mode[0] if mode else ctx.math_mode
        here = contexts.get(math_mode)
        if here is None:
            here = contexts[math_mode] = evolve(ctx, math_mode=math_mode)
        canon = problem.canonical
        ideal = here.ideal_ms(canon)
        x = problem_features(canon, math_mode)[columns]
        for name, ms in times.items():
            solver = solvers.get(name)
            if solver is None or ms <= 0:
                continue
            try:
                score = float(solver.wti(here, canon))
            except Exception:  # a solver whose WTI raises is simply not fitted
                continue
            if math.isfinite(score) and score > 0:
                key = (name, canon.direction.value)
                ratios.setdefault(key, []).append(math.log(ms) - math.log(ideal / score))
                rows.setdefault(key, []).append(x)
    by_direction: dict[str, dict[str, float]] = {}
    pooled: dict[str, list[float]] = {}
    for (name, direction), values in ratios.items():
        pooled.setdefault(name, []).extend(values)
        if len(values) >= min_samples:
            by_direction.setdefault(name, {})[direction] = statistics.median(values)
    by_solver = {n: statistics.median(v) for n, v in pooled.items() if len(v) >= min_samples}
    linear: dict[str, dict[str, tuple[float, ...]]] = {}
    for (name, direction), values in ratios.items():
        if len(values) >= max(min_samples, MIN_LINEAR_SAMPLES):
            coef = fit_linear(np.array(rows[(name, direction)]), np.array(values))
            linear.setdefault(name, {})[direction] = coef
    return WtiTable(
        device=device,
        by_solver=by_solver,
        by_direction=by_direction,
        linear=linear,
        provenance={
            "fitted_at": utc_now_iso(),
            "miocore": miocore_version(),
            "samples": sum(len(v) for v in pooled.values()),
        },
    )


@functools.cache
def _columns(names: tuple[str, ...]) -> list[int]:
    """The positions of ``names`` in :data:`FEATURES` (asked at every estimate: kept)."""
    return [FEATURES.index(n) for n in names]


@functools.lru_cache(maxsize=64)
def _linear_inputs(
    problem: ConvProblem, math_mode: str, names: tuple[str, ...]
) -> tuple[float, ...]:
    """The ``names`` features of ``problem`` as Python floats: one ranking asks them once per
    solver, so the last few problems' are kept, and a dot product of 14 numbers is 6x
    faster on floats than through numpy (a linear correction took 6.7 µs a solver before,
    0.1 ms over a GPU's applicable solvers)."""
    return tuple(problem_features(problem, math_mode)[_columns(names)].tolist())


def fit_linear(x: np.ndarray, y: np.ndarray, ridge: float = RIDGE) -> tuple[float, ...]:
    """Ridge regression of ``y`` on the columns of ``x`` (standardized, the intercept not
    penalized), returned in raw units: intercept, one coefficient per column, then the
    lowest and highest ``y`` (the range a prediction is clipped to)."""
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale == 0] = 1.0  # a constant column: its coefficient stays 0
    z = np.hstack([np.ones((len(y), 1)), (x - mean) / scale])
    penalty = ridge * len(y) * np.eye(z.shape[1])
    penalty[0, 0] = 0.0
    beta = np.linalg.solve(z.T @ z + penalty, z.T @ y)
    coef = beta[1:] / scale
    intercept = beta[0] - float(np.dot(coef, mean))
    return (float(intercept), *map(float, coef), float(y.min()), float(y.max()))
