"""A learned heuristic's model: per-solver regression forests in an NPZ file, evaluated with numpy.

The file is ``np.savez_compressed`` output read with ``allow_pickle=False``: plain arrays and
one JSON text (metadata), never a pickle. Each solver has an ensemble of binary trees that
predicts ``log(time_ms)``; all trees of all solvers are packed into flat node arrays so one
prediction is ``depth`` vectorized steps, whatever the number of trees.

Arrays (``T`` trees, ``M`` nodes in all, ``S`` solvers):

- ``feature`` (M,) int32: the feature a node splits on; -1 for a leaf.
- ``threshold`` (M,) float64: go left when ``x[feature] <= threshold``.
- ``left``, ``right`` (M,) int32: child node indices (a leaf points at itself).
- ``value`` (M,) float64: a leaf's contribution (already scaled by the learning rate).
- ``roots`` (T,) int32: each tree's root node; ``tree_solver`` (T,) int32: its solver.
- ``base`` (S,) float64: each solver's starting prediction.
- ``meta``: UTF-8 JSON: ``format``, ``version``, ``device``, ``features``, ``solvers``,
  ``depth``, ``provenance``, ``metrics``.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from miocore.errors import DatabaseError, InvalidArgumentError
from miocore.heuristic.features import FEATURES
from miocore.values import field, frozen

FORMAT = "miocore-heuristic"
VERSION = 1
#: Suffix of a solver's second forest in a model trained with ``within_weight``: the log-odds
#: that the solver runs within the training tolerance of the problem's fastest.
WITHIN = " (within)"
#: Log-odds are clipped to +-this (p in [0.007, 0.993]) before they are weighed: a boosted
#: classifier on nearly one-class data (a solver that is almost always, or never, near the
#: fastest) takes Newton steps over p(1 - p) -> 0 and reaches log-odds over 100, which would
#: outweigh every predicted time (on one fold of the CPU data: 96.6% -> 82.8% within 10%).
WITHIN_CLIP = 5.0
#: Solver lists whose tree plans a model keeps (each a few KB).
_MAX_PLANS = 256
_ARRAYS = ("feature", "threshold", "left", "right", "value", "roots", "tree_solver", "base")


class ModelFormatError(DatabaseError):
    """A heuristic model file that is not one, or of another format version."""


@frozen(kw_only=True, eq=False, slots=False)
class TreeModel:
    """Per-solver tree ensembles predicting ``log(time_ms)`` from :data:`FEATURES`."""

    device: str
    solvers: tuple[str, ...]
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    tree_solver: np.ndarray
    base: np.ndarray
    depth: int
    scale: str | None = None
    features: tuple[str, ...] = FEATURES
    provenance: Mapping[str, Any] = field(factory=dict)
    metrics: Mapping[str, Any] = field(factory=dict)
    within_weight: float = 0.0

    def __post_init__(self) -> None:
        m = len(self.feature)
        for name in ("threshold", "left", "right", "value"):
            if len(getattr(self, name)) != m:
                raise ModelFormatError(
                    f"has {len(getattr(self, name))} entries, expected {m}", field=name, value=m
                )
        if len(self.base) != len(self.solvers):
            raise ModelFormatError(
                f"has {len(self.base)} entries for {len(self.solvers)} solvers",
                field="base",
                value=len(self.base),
            )
        for name, arr, bound in (
            ("left", self.left, m),
            ("right", self.right, m),
            ("roots", self.roots, m),
            ("tree_solver", self.tree_solver, len(self.solvers)),
        ):
            if len(arr) and (arr.min() < 0 or arr.max() >= bound):
                raise ModelFormatError(f"indices out of [0, {bound})", field=name, value=arr.max())
        if len(self.feature) and self.feature.max() >= len(self.features):
            raise ModelFormatError(
                "names a feature the model does not list", field="feature", value=self.feature.max()
            )
        index = {name: i for i, name in enumerate(self.solvers)}
        object.__setattr__(self, "_index", index)
        # Per solver, the slice of its trees (trees are stored grouped by solver).
        order = np.argsort(self.tree_solver, kind="stable")
        if not np.array_equal(order, np.arange(len(order))):
            raise ModelFormatError("trees must be grouped by solver", field="tree_solver", value=0)
        counts = np.bincount(self.tree_solver, minlength=len(self.solvers))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        object.__setattr__(self, "_starts", starts)
        object.__setattr__(self, "_counts", counts)
        # A leaf's feature (-1) read as feature 0: a leaf's children are itself either way.
        object.__setattr__(self, "_feature0", np.maximum(self.feature, 0).astype(np.intp))
        # Node i's children at 2i (left: x <= threshold) and 2i + 1.
        children = np.stack([self.left, self.right], axis=1).ravel().astype(np.intp)
        object.__setattr__(self, "_children", children)
        object.__setattr__(self, "_plans", {})

    def knows(self, solver: str) -> bool:
        """Whether the model was trained on ``solver``."""
        return (
            solver in self._index  # type: ignore[attr-defined]
            and solver != self.scale
            and not solver.endswith(WITHIN)
        )

    def predict_log_ms(self, x: np.ndarray, solvers: Sequence[str]) -> np.ndarray:
        """Predicted ``log(time_ms)`` of each of ``solvers`` (all known) on features ``x``.

        With a ``scale`` forest (relative models), each solver's forest predicts how much
        slower than the problem's fastest solver it is, and the scale forest predicts the
        fastest time: the sum is the solver's time.
        """
        if self.scale is not None:
            out = self._raw(x, [*solvers, self.scale])
            return out[:-1] + out[-1]
        return self._raw(x, solvers)

    def rank_log_ms(self, x: np.ndarray, solvers: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(predicted ``log(time_ms)``, ranking score) of each of ``solvers`` (all known).

        Lower scores rank first. The score is the predicted log time, less ``within_weight``
        times the log-odds (from the solver's :data:`WITHIN` forest, clipped to
        :data:`WITHIN_CLIP`) that the solver runs within the training tolerance of the
        fastest: a regression on time alone ranks neighbours whose predicted times differ by
        less than its error at random, and the classifier is trained on exactly the question
        immediate mode is judged by. A model without those forests scores by time.
        """
        if not self.within_weight:
            log_ms = self.predict_log_ms(x, solvers)
            return log_ms, log_ms
        index = self._index  # type: ignore[attr-defined]
        has = np.array([s + WITHIN in index for s in solvers], dtype=bool)
        scale = [self.scale] if self.scale is not None else []
        # One walk over every forest asked for: the solvers', the scale's, the classifiers'.
        within = [s + WITHIN for s, h in zip(solvers, has, strict=True) if h]
        raw = self._raw(x, [*solvers, *scale, *within])
        n = len(solvers)
        log_ms = raw[:n] + (raw[n] if scale else 0.0)
        odds = np.zeros(n)
        odds[has] = np.clip(raw[n + len(scale) :], -WITHIN_CLIP, WITHIN_CLIP)
        return log_ms, log_ms - self.within_weight * odds

    def _raw(self, x: np.ndarray, solvers: Sequence[str]) -> np.ndarray:
        idx, node, owner = self._plan(tuple(solvers))
        feature, threshold = self._feature0, self.threshold  # type: ignore[attr-defined]
        children = self._children  # type: ignore[attr-defined]
        # ``take`` and one children array: half the time of fancy indexing and np.where.
        for _ in range(self.depth):  # leaves point at themselves, so extra steps are harmless
            right = x.take(feature.take(node)) > threshold.take(node)
            node = children.take(2 * node + right)
        sums = np.bincount(owner, weights=self.value.take(node), minlength=len(idx))
        return self.base[idx] + sums

    def _plan(self, solvers: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(solver indices, their trees' roots, which requested solver each tree serves) for
        ``solvers``: worked out once per list (immediate mode asks with the same few lists)."""
        plans = self._plans  # type: ignore[attr-defined]
        plan = plans.get(solvers)
        if plan is None:
            idx = np.array([self._index[s] for s in solvers], dtype=np.int64)  # type: ignore[attr-defined]
            counts = self._counts[idx]  # type: ignore[attr-defined]
            starts = self._starts[idx]  # type: ignore[attr-defined]
            trees = np.concatenate(
                [np.arange(0, dtype=np.int64)]
                + [np.arange(a, a + c, dtype=np.int64) for a, c in zip(starts, counts, strict=True)]
            )
            roots = self.roots[trees].astype(np.intp)
            plan = (idx, roots, np.repeat(np.arange(len(idx)), counts))
            if len(plans) < _MAX_PLANS:
                plans[solvers] = plan
        return plan

    def predict_ms(self, x: np.ndarray, solvers: Sequence[str]) -> np.ndarray:
        """Predicted time in milliseconds of each of ``solvers`` on features ``x``."""
        return np.exp(self.predict_log_ms(x, solvers))

    # -- files ------------------------------------------------------------------------------

    def save(self, path: Path | str) -> Path:
        """Write the model (NPZ, no pickle) atomically; returns the path."""
        dest = Path(path)
        meta = {
            "format": FORMAT,
            "version": VERSION,
            "device": self.device,
            "features": list(self.features),
            "solvers": list(self.solvers),
            "depth": self.depth,
            "scale": self.scale,
            "provenance": dict(self.provenance),
            "metrics": dict(self.metrics),
            "within_weight": self.within_weight,
        }
        buf = io.BytesIO()
        np.savez_compressed(
            buf,
            meta=np.frombuffer(json.dumps(meta, sort_keys=True).encode(), dtype=np.uint8),
            feature=self.feature.astype(np.int32),
            threshold=self.threshold.astype(np.float64),
            left=self.left.astype(np.int32),
            right=self.right.astype(np.int32),
            value=self.value.astype(np.float64),
            roots=self.roots.astype(np.int32),
            tree_solver=self.tree_solver.astype(np.int32),
            base=self.base.astype(np.float64),
        )
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        tmp.write_bytes(buf.getvalue())
        tmp.replace(dest)
        return dest

    @classmethod
    def load(cls, path: Path | str) -> TreeModel:
        """Read a model written by :meth:`save` (``allow_pickle=False``); a file of another
        format or feature list is a :class:`ModelFormatError` naming it."""
        src = Path(path)
        if not src.is_file():
            raise InvalidArgumentError("no such file", field="model", value=str(src))
        try:
            with np.load(src, allow_pickle=False) as npz:
                arrays = {name: np.array(npz[name]) for name in (*_ARRAYS, "meta")}
            meta = json.loads(arrays.pop("meta").tobytes().decode())
        except (OSError, ValueError, KeyError) as exc:
            raise ModelFormatError(
                f"not a miocore heuristic model: {exc}", field="model", value=str(src)
            ) from exc
        if meta.get("format") != FORMAT or meta.get("version") != VERSION:
            raise ModelFormatError(
                f"format {meta.get('format')!r} version {meta.get('version')!r}; this miocore "
                f"reads {FORMAT!r} version {VERSION}",
                field="model",
                value=str(src),
            )
        features = tuple(meta["features"])
        if FEATURES[: len(features)] != features:  # a model trained before newer features: ok
            raise ModelFormatError(
                "was trained on another feature list; retrain it with this miocore",
                field="model",
                value=str(src),
            )
        return cls(
            device=str(meta["device"]),
            features=features,
            solvers=tuple(meta["solvers"]),
            depth=int(meta["depth"]),
            scale=meta.get("scale"),
            provenance=meta.get("provenance", {}),
            metrics=meta.get("metrics", {}),
            within_weight=float(meta.get("within_weight", 0.0)),
            **arrays,
        )


def pack_forests(
    forests: Mapping[str, tuple[float, Sequence[Mapping[str, np.ndarray]]]],
) -> dict[str, Any]:
    """Pack ``{solver: (base, [tree, ...])}`` into :class:`TreeModel`'s flat arrays.

    A tree is a mapping of node arrays ``feature`` (-1 at a leaf), ``threshold``, ``left``,
    ``right`` (-1 at a leaf) and ``value`` (already scaled); indices are local to the tree.
    """
    parts: dict[str, list[np.ndarray]] = {
        k: [] for k in ("feature", "threshold", "left", "right", "value")
    }
    roots, tree_solver, base, solvers = [], [], [], []
    offset = 0
    depth = 0
    for s_index, (solver, (solver_base, trees)) in enumerate(sorted(forests.items())):
        solvers.append(solver)
        base.append(solver_base)
        for tree in trees:
            n = len(tree["feature"])
            own = np.arange(n, dtype=np.int64) + offset
            leaf = np.asarray(tree["left"]) < 0
            parts["feature"].append(np.where(leaf, -1, tree["feature"]))
            parts["threshold"].append(np.where(leaf, 0.0, tree["threshold"]))
            parts["left"].append(np.where(leaf, own, np.asarray(tree["left"]) + offset))
            parts["right"].append(np.where(leaf, own, np.asarray(tree["right"]) + offset))
            parts["value"].append(np.where(leaf, tree["value"], 0.0))
            roots.append(offset)
            tree_solver.append(s_index)
            depth = max(depth, _depth(tree))
            offset += n
    out: dict[str, Any] = {k: np.concatenate(v) if v else np.zeros(0) for k, v in parts.items()}
    out.update(
        roots=np.asarray(roots, dtype=np.int64),
        tree_solver=np.asarray(tree_solver, dtype=np.int64),
        base=np.asarray(base, dtype=np.float64),
        solvers=tuple(solvers),
        depth=depth,
    )
    return out


def _depth(tree: Mapping[str, np.ndarray]) -> int:
    left, right = np.asarray(tree["left"]), np.asarray(tree["right"])
    deepest, stack = 0, [(0, 0)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if left[node] >= 0:
            stack.extend(((int(left[node]), d + 1), (int(right[node]), d + 1)))
    return deepest


def finite_or_none(value: float) -> float | None:
    """``value`` for JSON metadata, None when it is not finite."""
    return value if math.isfinite(value) else None
