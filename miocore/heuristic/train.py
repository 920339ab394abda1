"""Training a heuristic from any FindDb: per-solver gradient-boosted trees on log time.

scikit-learn is the learning library (``pip install miocore[train]``), imported only here:
its ``GradientBoostingRegressor`` exposes every fitted tree as plain public arrays
(``tree_.feature``, ``threshold``, ``children_left/right``, ``value``), which is exactly what
the pickle-free model format stores, and it installs as a wheel everywhere numpy does.
Run time needs numpy alone (:mod:`miocore.heuristic.model`).

Held-out problems are chosen by a hash of their key (:func:`is_held_out`), so every tool
(training, ``miocore heuristic eval``, ``benchmarks/find_quality.py``) agrees on the split.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from miocore.db._common import miocore_version
from miocore.db._sqlite import utc_now_iso
from miocore.db.finddb import FindDb, FindDbRecord
from miocore.db.mathkeys import split_record_key
from miocore.db.packed import device_of, readable_db_file
from miocore.errors import InvalidArgumentError, MiocoreError
from miocore.heuristic.features import problem_features
from miocore.heuristic.model import WITHIN, WITHIN_CLIP, TreeModel, pack_forests
from miocore.problem.conv import ConvProblem
from miocore.values import field, frozen


class TrainUnavailableError(MiocoreError):
    """Training needs scikit-learn (``pip install miocore[train]``)."""


@frozen(kw_only=True)
class Sample:
    """One problem of a FindDb: its key, features and each recorded solver's time."""

    key: str
    features: np.ndarray = field(eq=False)
    times: dict[str, float]


#: The log-odds of a classifier that saw one class only: as sure as a model may say.
_SURE = WITHIN_CLIP

#: The forest of a relative model that predicts the problem's fastest time (not a solver).
SCALE = "(fastest)"


def is_held_out(key: str, share: float) -> bool:
    """Whether ``key`` is in the held-out ``share`` (0..1) of problems: a stable hash split
    of the MIOpen key (a problem's records of both math modes fall on the same side)."""
    base = split_record_key(key)[0]
    return (zlib.crc32(base.encode()) % 10_000) < share * 10_000


#: The layer :func:`open_db_file` reads its file as.
DB_FILE_LAYER = "system"


def open_db_file(path: Path | str) -> FindDb:
    """The FindDb whose read-only layer (:data:`DB_FILE_LAYER`) is the SQLite file ``path``
    (``<folder>/<device>.db``, or its packed ``.db.xz``). Read-only: opened as a user layer,
    SQLite's write-ahead mode was switched on in the file, which rewrote a shipped database the
    tools only read."""
    src = readable_db_file(Path(path))  # a packed <device>.db.xz is expanded into the cache
    if not src.is_file():
        raise InvalidArgumentError("no such database file", field="db", value=str(path))
    # The user layer's file would only be made by a write, and nothing here writes.
    return FindDb(src.stem, user_dir=src.parent / "no-user-layer", system_dir=src.parent)


def read_samples(records: Iterable[FindDbRecord]) -> Iterator[Sample]:
    """A :class:`Sample` per record whose key parses and that has a positive time."""
    for record in records:
        base, math_mode = split_record_key(record.key)
        try:
            problem = ConvProblem.from_key(base)
        except MiocoreError:
            continue
        times = {e.solver: e.time_ms for e in record.entries if e.time_ms > 0}
        if times:
            features = problem_features(problem, math_mode)
            yield Sample(key=record.key, features=features, times=times)


def train(
    db_path: Path | str,
    *,
    holdout: float = 0.2,
    trees: int = 60,
    depth: int = 3,
    learning_rate: float = 0.15,
    min_samples: int = 8,
    seed: int = 0,
    target: str = "absolute",
    within_weight: float = 0.1,
    within_tolerance: float = 0.10,
) -> TreeModel:
    """A :class:`TreeModel` for the device of the FindDb file ``db_path``.

    One ensemble per solver with at least ``min_samples`` recorded times among the training
    problems (those not :func:`is_held_out`); a solver with fewer is left out, so the model
    says it does not know it and immediate mode ranks it by WTI.

    ``target="relative"`` trains each solver's forest on how much slower than the
    problem's fastest recorded solver it is (``log(t / t_fastest)``), plus one forest, named
    :data:`SCALE`, on the fastest time: ranking then depends only on the relative forests,
    which do not spend their splits on the problem's overall size. ``"absolute"`` (default)
    trains on ``log(t)`` directly; on the shipped CPU data both pick within 10% of the best on
    85-86% of held-out problems (recorded times).

    ``within_weight > 0`` (default 0.1; 0 trains the time forests alone) adds a classifier per
    solver (named ``solver`` + :data:`WITHIN`): the log-odds that the solver runs within
    ``within_tolerance`` of the problem's fastest recorded time; :meth:`TreeModel.rank_log_ms`
    ranks by predicted log time less
    ``within_weight`` times those log-odds. 5-fold cross-validation with a weight of 0.1
    (docs/tuning.md): sm90 (2,340 problems) 88.3% -> 90.1% within 10% of the fastest, mean
    regret 6.2% -> 6.0%; CPU (3,105 problems) 96.3% -> 97.7%, 1.1% -> 0.7%. The classifier
    alone ranks about as often within 10% but with a mean regret over 60% (it cannot tell a
    near miss from a disaster).
    """
    if target not in ("relative", "absolute"):
        raise InvalidArgumentError(
            "expected 'relative' or 'absolute'", field="target", value=target
        )
    if not 0 <= holdout < 1:
        raise InvalidArgumentError("must be in [0, 1)", field="holdout", value=holdout)
    if not (math.isfinite(within_weight) and within_weight >= 0):
        raise InvalidArgumentError("must be >= 0", field="within_weight", value=within_weight)
    if not (math.isfinite(within_tolerance) and within_tolerance > 0):
        raise InvalidArgumentError("must be > 0", field="within_tolerance", value=within_tolerance)
    for name, value in (("trees", trees), ("depth", depth), ("min_samples", min_samples)):
        if not isinstance(value, int) or value < 1:
            raise InvalidArgumentError("must be an int >= 1", field=name, value=value)
    try:
        from sklearn.ensemble import GradientBoostingRegressor
    except ImportError as exc:
        raise TrainUnavailableError(
            "training needs scikit-learn: pip install 'miocore[train]'", field="db", value=db_path
        ) from exc
    db = open_db_file(db_path)
    try:
        samples = [
            s for s in read_samples(db.items(DB_FILE_LAYER)) if not is_held_out(s.key, holdout)
        ]
    finally:
        db.close()
    if not samples:
        raise InvalidArgumentError(
            "has no training problems (empty, or all held out)", field="db", value=str(db_path)
        )
    by_solver: dict[str, tuple[list[np.ndarray], list[float]]] = {}
    within: dict[str, list[bool]] = {}
    for s in samples:
        fastest = min(s.times.values())
        offset = math.log(fastest) if target == "relative" else 0.0
        for solver, ms in s.times.items():
            xs, ys = by_solver.setdefault(solver, ([], []))
            xs.append(s.features)
            ys.append(math.log(ms) - offset)
            within.setdefault(solver, []).append(ms <= (1 + within_tolerance) * fastest)
        if target == "relative":
            xs, ys = by_solver.setdefault(SCALE, ([], []))
            xs.append(s.features)
            ys.append(offset)
    forests: dict[str, tuple[float, list[dict[str, np.ndarray]]]] = {}
    counts: dict[str, int] = {}
    boosting = {
        "n_estimators": trees,
        "max_depth": depth,
        "learning_rate": learning_rate,
        "subsample": 0.8,
        "random_state": seed,
    }
    for solver, (xs, ys) in sorted(by_solver.items()):
        if len(ys) < min_samples:
            continue
        features = np.vstack(xs)
        gbr = GradientBoostingRegressor(**boosting).fit(features, np.asarray(ys))
        forests[solver] = (float(gbr.init_.constant_.ravel()[0]), _trees(gbr, learning_rate))
        counts[solver] = len(ys)
        if within_weight and solver in within:
            labels = np.asarray(within[solver])
            if labels.all() or not labels.any():  # one class: a constant, sure answer
                forests[solver + WITHIN] = (_SURE if labels.all() else -_SURE, [])
            else:
                forests[solver + WITHIN] = _classifier(features, labels, boosting)
    packed = pack_forests(forests)
    return TreeModel(
        device=device_of(db_path),
        scale=SCALE if target == "relative" else None,
        provenance={
            "trained_at": utc_now_iso(),
            "miocore": miocore_version(),
            "learner": f"scikit-learn {_sklearn_version()} GradientBoostingRegressor"
            + (" and GradientBoostingClassifier" if within_weight else ""),
            "trees": trees,
            "depth": depth,
            "learning_rate": learning_rate,
            "holdout": holdout,
            "target": target,
            "within_weight": within_weight,
            "within_tolerance": within_tolerance,
            "db": Path(db_path).name,
            "problems": len(samples),
            "samples_per_solver": counts,
        },
        within_weight=within_weight,
        **packed,
    )


def _classifier(
    xs: np.ndarray, labels: np.ndarray, boosting: dict[str, Any]
) -> tuple[float, list[dict[str, np.ndarray]]]:
    """A boosted classifier's (starting log-odds, trees) for ``labels``, with the regressors'
    ``boosting`` settings: its trees add to the log-odds of a True label as a regressor's add
    to a log time."""
    from sklearn.ensemble import GradientBoostingClassifier

    gbc = GradientBoostingClassifier(**boosting).fit(xs, labels)
    rate = boosting["learning_rate"]
    # The starting log-odds: the decision on one sample less what the trees add to it.
    first = xs[:1]
    added = sum(rate * est.predict(first)[0] for est in gbc.estimators_[:, 0])
    return float(gbc.decision_function(first)[0] - added), _trees(gbc, rate)


def _trees(gbr: Any, learning_rate: float) -> list[dict[str, np.ndarray]]:
    out = []
    for est in gbr.estimators_[:, 0]:
        t = est.tree_
        out.append(
            {
                "feature": t.feature.astype(np.int64),
                "threshold": t.threshold.astype(np.float64),
                "left": t.children_left.astype(np.int64),
                "right": t.children_right.astype(np.int64),
                "value": learning_rate * t.value[:, 0, 0].astype(np.float64),
            }
        )
    return out


def _sklearn_version() -> str:
    import sklearn

    return str(sklearn.__version__)
