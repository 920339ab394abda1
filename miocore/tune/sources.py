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
    """The convolutions a PyTorch model runs on ``example_input``, found with forward hooks on
    its ``Conv1d``/``Conv2d``/``Conv3d`` modules (1-D ones become 2-D with height 1).

    Only shapes are taken; the model runs once under ``torch.no_grad``. Needs torch.
    """
    try:
        import torch
    except ImportError as exc:  # torch is optional
        raise InvalidArgumentError(
            "problems from a model need PyTorch (pip install torch)", field="model", value=model
        ) from exc
    if not isinstance(model, torch.nn.Module):
        raise InvalidArgumentError("expected a torch.nn.Module", field="model", value=model)
    found: list[ConvProblem] = []

    def hook(module: Any, args: tuple[Any, ...], output: Any) -> None:
        found.append(_problem_from_module(module, args[0], output))

    handles = [
        m.register_forward_hook(hook)
        for m in model.modules()
        if isinstance(m, torch.nn.Conv1d | torch.nn.Conv2d | torch.nn.Conv3d)
    ]
    try:
        with torch.no_grad():
            model(example_input)
    finally:
        for h in handles:
            h.remove()
    return unique(expand(found, directions=directions))


def _problem_from_module(module: Any, x: Any, y: Any) -> ConvProblem:
    import torch

    dtype = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}.get(
        x.dtype
    )
    if dtype is None:
        raise InvalidArgumentError(
            "miocore tunes float32, float16 and bfloat16", field="example_input.dtype", value=x
        )
    if isinstance(module.padding, str):
        raise InvalidArgumentError(
            "string padding is not supported; give numbers", field="padding", value=module.padding
        )
    sizes = list(x.shape[2:])
    filt = list(module.kernel_size)
    pads, strides, dils = list(module.padding), list(module.stride), list(module.dilation)
    if len(sizes) == 1:  # Conv1d as a 2-D convolution of height 1
        sizes, filt, pads, strides, dils = (
            [1, *sizes],
            [1, *filt],
            [0, *pads],
            [1, *strides],
            [
                1,
                *dils,
            ],
        )
    # The front end's own rule (miocore.torch.tensors), so that a tuned key is the one its
    # calls look up: a tensor stored both ways (one pixel, as a squeeze-and-excitation layer's
    # 1x1 map, or one channel) is NCHW there, and 5-D channels-last is NDHWC
    from miocore.torch.tensors import is_channels_last, layout_name

    # (Conv1d: the front end runs it as 2-D of height 1, channels-first)
    layout = "NCHW" if x.dim() == 3 else layout_name(x.dim(), is_channels_last(x))
    return ConvProblem.from_sizes(
        "forward",
        n=int(x.shape[0]),
        c=int(x.shape[1]),
        k=int(y.shape[1]),
        in_spatial=tuple(int(s) for s in sizes),
        filter_spatial=tuple(int(f) for f in filt),
        pads=tuple(int(p) for p in pads),
        strides=tuple(int(s) for s in strides),
        dilations=tuple(int(d) for d in dils),
        groups=int(module.groups),
        dtype=dtype,
        layout=layout,
    )


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
