"""The real-problem corpus: convolution layers real networks ran, with MIOpen's keys.

The corpus lives beside the project (``../shared/corpus/miopen_problems.jsonl.gz``), never
inside it. :func:`find_corpus` looks for it through ``MIOCORE_CORPUS`` and then upwards from the
working directory; tests skip with a clear message when it is absent.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from miocore import env
from miocore.problem.conv import ConvProblem

CORPUS_NAME = "miopen_problems.jsonl.gz"
_DTYPES = {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16"}


def find_corpus() -> Path | None:
    """The corpus file, from ``MIOCORE_CORPUS`` or ``shared/corpus/`` beside a parent folder."""
    override = env.get("MIOCORE_CORPUS")
    if override:
        path = Path(override)
        return path if path.is_file() else None
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        candidate = folder / "shared" / "corpus" / CORPUS_NAME
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def load_rows(path: Path | None = None) -> tuple[dict[str, Any], ...]:
    """Every row of the corpus (about 210,000), parsed once per process."""
    path = path or find_corpus()
    if path is None:
        raise FileNotFoundError(
            f"the problem corpus ({CORPUS_NAME}) was not found; set MIOCORE_CORPUS to its path"
        )
    with gzip.open(path, "rt") as handle:
        return tuple(json.loads(line) for line in handle)


def problem_from_row(row: dict[str, Any]) -> ConvProblem:
    """The problem a corpus row describes, in the row's direction (raises if inconsistent)."""
    return ConvProblem.from_sizes(
        row["dir"],
        n=row["n"],
        c=row["c"],
        k=row["k"],
        in_spatial=tuple(row["x"]),
        filter_spatial=tuple(row["filt"]),
        pads=tuple(row["pad"]),
        strides=tuple(row["stride"]),
        dilations=tuple(row["dil"]),
        groups=row["groups"],
        dtype=_DTYPES[row["dtype"]],
        layout=row["layout"],
        out_spatial=tuple(row["y"]),
    )


def shrink_row(
    row: dict[str, Any],
    *,
    max_batch: int = 2,
    max_channels_per_group: int = 4,
    max_spatial: int | None = None,
    direction: str | None = None,
) -> ConvProblem:
    """A small problem that keeps a row's filter, pads, strides, dilations, groups, layout and
    dtype, with batch, channels (divisible by groups) and spatial sizes cut down so that a
    CPU test can run it against the float64 reference in milliseconds.
    """
    rank = len(row["x"])
    cap = max_spatial if max_spatial is not None else (10 if rank == 2 else 6)
    g = row["groups"]
    c_per_group = min(row["c"] // g, max_channels_per_group)
    k_per_group = min(row["k"] // g, max_channels_per_group)
    in_spatial = []
    for size, f, p, d in zip(row["x"], row["filt"], row["pad"], row["dil"], strict=True):
        smallest = max(1, d * (f - 1) + 1 - 2 * p)  # output must stay >= 1
        in_spatial.append(max(min(size, cap), smallest))
    return ConvProblem.from_sizes(
        direction or row["dir"],
        n=min(row["n"], max_batch),
        c=c_per_group * g,
        k=k_per_group * g,
        in_spatial=tuple(in_spatial),
        filter_spatial=tuple(row["filt"]),
        pads=tuple(row["pad"]),
        strides=tuple(row["stride"]),
        dilations=tuple(row["dil"]),
        groups=g,
        dtype=_DTYPES[row["dtype"]],
        layout=row["layout"],
    )


def row_stratum(row: dict[str, Any]) -> tuple[Any, ...]:
    """The kind of a row: direction, layout, dtype, rank, grouped/depthwise, strided, dilated."""
    g = row["groups"]
    grouping = (
        "depthwise" if g > 1 and g == row["c"] == row["k"] else ("grouped" if g > 1 else "dense")
    )
    return (
        row["dir"],
        row["layout"],
        row["dtype"],
        len(row["x"]),
        grouping,
        any(s > 1 for s in row["stride"]),
        any(d > 1 for d in row["dil"]),
    )


def sample_rows(
    count_per_direction: int,
    *,
    seed: int = 0,
    rows: Iterable[dict[str, Any]] | None = None,
    consistent_only: bool = True,
) -> list[dict[str, Any]]:
    """A deterministic sample with every stratum of :func:`row_stratum` represented.

    Strata are visited round-robin per direction, so rare kinds (NHWC, depthwise 3-D, dilated)
    appear even in a small sample.
    """
    pool = rows if rows is not None else load_rows()
    strata: dict[str, dict[tuple[Any, ...], list[dict[str, Any]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for row in pool:
        if consistent_only and not row.get("consistent", True):
            continue
        strata[row["dir"]][row_stratum(row)].append(row)
    rng = random.Random(seed)
    picked: list[dict[str, Any]] = []
    for direction in sorted(strata):
        buckets = [
            list(b) for _, b in sorted(strata[direction].items(), key=lambda kv: repr(kv[0]))
        ]
        for bucket in buckets:
            rng.shuffle(bucket)
        taken = 0
        while taken < count_per_direction and any(buckets):
            for bucket in buckets:
                if bucket and taken < count_per_direction:
                    picked.append(bucket.pop())
                    taken += 1
    return picked


def iter_consistent_problems(
    rows: Iterable[dict[str, Any]] | None = None,
) -> Iterator[tuple[dict[str, Any], ConvProblem]]:
    """Every consistent row with its full-size problem (sizes only; nothing is allocated)."""
    for row in rows if rows is not None else load_rows():
        if row.get("consistent", True):
            yield row, problem_from_row(row)
