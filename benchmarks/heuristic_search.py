"""Hyperparameters of a learned heuristic, chosen on a validation band of the training keys.

The held-out share that ``miocore heuristic eval`` scores (``is_held_out(key, 0.2)``) is left
alone: each setting is trained without the keys of ``is_held_out(key, 0.4)`` and scored on the
band between the two (recorded times, ``miocore.heuristic.evaluate.quality``), so the choice
never sees the held-out problems.

    python benchmarks/heuristic_search.py --db miocore/data/db/sm90_132.db
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

from miocore.heuristic.evaluate import quality
from miocore.heuristic.train import (
    DB_FILE_LAYER,
    Sample,
    is_held_out,
    open_db_file,
    read_samples,
    train,
)

#: (trees, depth, learning rate, min samples, target, within weight) of each setting tried;
#: the first is the shipped one. The within weight scales the per-solver "within 10% of the
#: fastest" classifiers in the ranking score (0: time forests alone).
SETTINGS = (
    (100, 4, 0.1, 5, "relative", 0.1),
    (100, 4, 0.1, 5, "relative", 0.0),
    (100, 4, 0.1, 5, "relative", 0.3),
    (100, 4, 0.1, 5, "relative", 1.0),
    (200, 6, 0.05, 5, "relative", 0.1),
    (200, 6, 0.05, 5, "relative", 0.3),
    (100, 6, 0.1, 5, "relative", 0.3),
    (100, 4, 0.1, 5, "absolute", 0.1),
)


def ranking(model: Any) -> Any:
    """Rank a sample's recorded solvers as immediate mode does: by the model's score (predicted
    log time less the within-classifiers' weighted log-odds), among the solvers it knows."""

    def rank(sample: Sample) -> Sequence[str]:
        known = [n for n in sample.times if model.knows(n)]
        if not known:
            return []
        _, score = model.rank_log_ms(sample.features, known)
        return [n for n, _ in sorted(zip(known, score, strict=True), key=lambda p: (p[1], p[0]))]

    return rank


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a FindDb file: <folder>/<device>.db")
    parser.add_argument("--held-out", type=float, default=0.2, help="share eval scores")
    parser.add_argument("--band", type=float, default=0.2, help="validation share beyond it")
    args = parser.parse_args()
    outer = args.held_out + args.band
    samples = list(read_samples(open_db_file(args.db).items(DB_FILE_LAYER)))
    band = [
        s for s in samples if is_held_out(s.key, outer) and not is_held_out(s.key, args.held_out)
    ]
    print(f"{len(samples)} problems; validation band {len(band)}", flush=True)
    for trees, depth, rate, min_samples, target, within in SETTINGS:
        start = time.perf_counter()
        model = train(
            args.db,
            holdout=outer,
            trees=trees,
            depth=depth,
            learning_rate=rate,
            min_samples=min_samples,
            target=target,
            within_weight=within,
        )
        q = quality(band, ranking(model))
        print(
            f"{trees} trees, depth {depth}, rate {rate}, min {min_samples}, {target}, "
            f"within {within}: "
            f"{q.line()} [{time.perf_counter() - start:.0f} s]",
            flush=True,
        )


if __name__ == "__main__":
    main()
