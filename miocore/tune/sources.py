"""Where the problems to tune come from: the corpus, a MIOpen text FindDb's keys, a PyTorch model.

Every source returns :class:`~miocore.ConvProblem` values; :func:`expand` multiplies them by
data type and direction, and :func:`unique` drops repeats (by key, the identity a FindDb
uses). MIOpenDriver command-line files are read by the command line's own flag parser
(``miocore.cli.tune.problems_from_driver_file``), so there is one parser of those flags.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from miocore import corpus
from miocore.db.text import parse_lines
from miocore.errors import InvalidArgumentError
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.descriptors import LAYOUTS, TensorDescriptor

DTYPE_TOKENS = {"float32": "FP32", "float16": "FP16", "bfloat16": "BF16"}
_DTYPE_RE = re.compile(r"(?<=-)(FP32|FP16|BF16)(?=-)")


def problems_from_corpus(
    count_per_direction: int,
    *,
    seed: int = 0,
    shrink: bool = True,
    max_batch: int = 2,
    max_channels_per_group: int = 8,
    max_spatial: int | None = None,
    max_gflop: float | None = None,
    path: Path | None = None,
) -> list[ConvProblem]:
    """A stratified sample of the corpus (every stratum of :func:`miocore.corpus.row_stratum`:
    direction, layout, dtype, rank, dense/grouped/depthwise, strided, dilated).

    ``shrink`` cuts batch, channels and spatial sizes down (keeping the filter, pads, strides,
    dilations, groups, layout and dtype) so that a CPU can tune hundreds in minutes.
    ``max_gflop`` (full size only) cuts the batch of a problem whose work is above that many
    GFLOP until it is not (at least one image): channels and image sizes, which decide the
    algorithm, stay real, and a GPU tunes hundreds of problems in minutes.
    """
    if not isinstance(count_per_direction, int) or count_per_direction < 1:
        raise InvalidArgumentError(
            "must be an int >= 1", field="count_per_direction", value=count_per_direction
        )
    rows = corpus.sample_rows(count_per_direction, seed=seed, rows=corpus.load_rows(path))
    out = []
    for row in rows:
        if shrink:
            out.append(
                corpus.shrink_row(
                    row,
                    max_batch=max_batch,
                    max_channels_per_group=max_channels_per_group,
                    max_spatial=max_spatial,
                )
            )
        else:
            problem = corpus.problem_from_row(row)
            out.append(problem if max_gflop is None else cap_work(problem, max_gflop))
    return unique(out)


def cap_work(problem: ConvProblem, max_gflop: float) -> ConvProblem:
    """``problem`` with its batch cut until its work is at most ``max_gflop`` GFLOP (at least
    one image); every other size, the convolution, layout and dtype are kept."""
    if problem.flops <= max_gflop * 1e9 or problem.conv.mode != "conv":
        return problem
    n = max(1, int(problem.n * max_gflop * 1e9 / problem.flops))
    x = problem.x.with_lengths((n, *problem.x.lengths[1:]))
    y = problem.y.with_lengths((n, *problem.y.lengths[1:]))
    return ConvProblem(problem.direction, x=x, w=problem.w, y=y, conv=problem.conv)


def problems_from_finddb_text(path: Path | str) -> list[ConvProblem]:
    """One problem per key of a MIOpen text FindDb (``KEY=solver:time,...`` lines).

    Lines whose key does not parse are an error naming the line; the recorded times are
    ignored (they are another device's).
    """
    source = Path(path)
    if not source.is_file():
        raise InvalidArgumentError("no such file", field="finddb", value=str(source))
    with open(source, encoding="utf-8") as fh:
        good, _ = parse_lines(fh, source=str(source))
    return unique(ConvProblem.from_key(key) for _, key, _ in good)


def problems_from_torch(
    model: Any, example_input: Any, *, directions: Sequence[str] = ("forward",)
) -> list[ConvProblem]:
    """The convolutions a PyTorch model runs on ``example_input``, as the torch front end
    (:mod:`miocore.torch`) runs them: the model's ``torch.nn`` convolutions (``Conv1d`` to
    ``Conv3d``, ``ConvTranspose1d`` to ``ConvTranspose3d``) are switched to miocore's for one
    pass under ``torch.no_grad`` and switched back, and the problems they would have found are
    recorded instead of run (:func:`miocore.torch.runtime.collect`). So the keys are the ones
    the converted model's calls look up: its layouts, string padding, 1-D and transposed
    layers, as the front end reads them. Only shapes are taken (outputs are left unwritten).
    Needs torch; refuses a model the front end cannot convert, naming the layer.
    """
    try:
        import torch
    except ImportError as exc:  # torch is optional
        raise InvalidArgumentError(
            "problems from a model need PyTorch (pip install torch)", field="model", value=model
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError("expected a torch.nn.Module", field="model", value=model)
    from miocore.torch import convert
    from miocore.torch.runtime import collect

    classes = [(m, type(m)) for m in model.modules()]
    convert(model)  # in place (a class switch), undone below
    try:
        with torch.no_grad():
            found = collect(lambda: model(example_input))
    finally:
        for m, cls in classes:
            m.__class__ = cls
    return unique(expand([problem for _, problem in found], directions=directions))


def with_dtype(problem: ConvProblem, dtype: str) -> ConvProblem:
    """``problem`` with every tensor in ``dtype`` (float32, float16 or bfloat16)."""
    token = DTYPE_TOKENS.get(dtype)
    if token is None:
        raise InvalidArgumentError(
            f"expected one of {', '.join(DTYPE_TOKENS)}", field="dtype", value=dtype
        )
    if problem.conv.mode != "conv":  # a key describes the canonical problem
        problem = problem.canonical
    return ConvProblem.from_key(_DTYPE_RE.sub(token, problem.key))


def with_direction(problem: ConvProblem, direction: str) -> ConvProblem:
    """``problem`` in another direction (the same tensors and convolution)."""
    d = Direction.parse(direction)
    return ConvProblem(d, x=problem.x, w=problem.w, y=problem.y, conv=problem.conv)


def with_layout(problem: ConvProblem, layout: str) -> ConvProblem:
    """``problem`` with every tensor packed channels-first (``NCHW``) or channels-last
    (``NHWC``); a 3-D problem takes the layout of its rank (``NCDHW``, ``NDHWC``)."""
    order = {"NCHW": 0, "NHWC": 1}.get(layout.upper() if isinstance(layout, str) else "")
    if order is None:
        raise InvalidArgumentError("expected NCHW or NHWC", field="layout", value=layout)

    def packed(desc: TensorDescriptor) -> TensorDescriptor:
        return TensorDescriptor(
            desc.dtype, desc.lengths, layout=LAYOUTS[len(desc.lengths) - 2][order]
        )

    x, w, y = (packed(d) for d in (problem.x, problem.w, problem.y))
    return ConvProblem(problem.direction, x=x, w=w, y=y, conv=problem.conv)


def expand(
    problems: Iterable[ConvProblem],
    *,
    dtypes: Sequence[str] | None = None,
    directions: Sequence[str] | None = None,
    layouts: Sequence[str] | None = None,
) -> list[ConvProblem]:
    """Every problem in each of ``dtypes``, ``directions`` and ``layouts`` (``NCHW``,
    ``NHWC``; None keeps the problem's own)."""
    out = []
    for problem in problems:
        variants = [problem]
        if directions is not None:
            variants = [with_direction(p, d) for p in variants for d in directions]
        if dtypes is not None:
            variants = [with_dtype(p, t) for p in variants for t in dtypes]
        if layouts is not None:
            variants = [with_layout(p, lay) for p in variants for lay in layouts]
        out.extend(variants)
    return unique(out)


def unique(problems: Iterable[ConvProblem]) -> list[ConvProblem]:
    """``problems`` without repeated keys, in first-seen order."""
    seen: dict[str, ConvProblem] = {}
    for problem in problems:
        seen.setdefault(problem.key, problem)
    return list(seen.values())
