"""``igemm.gpu_mma_wrw`` (fp16/bf16 tensor cores) and ``igemm.gpu_tf32_wrw`` (backward weights)
against the float64 reference (marked ``gpu``).

Problems are corpus-derived: 2-D rows of the corpus (filters, pads, strides, dilations, groups
kept) as backward-weights problems, shrunk to at most 3 images of 16 x 16 with 4, 8, 16 or 24
channels per group so that both the scalar-load path and the 16-byte cp.async path run, and
the reduction (N*Ho*Wo) is long enough for the default split-K; three in four in NHWC, one in
four in NCHW (the scalar path); at least ``MIOCORE_GPU_TEST_PROBLEMS`` (200) per dtype. The
output dw is poisoned with NaN first. Tolerances: fp16/bf16, ``miocore.testing.TOLERANCES``
(output rounding plus fp32 accumulation); TF32, elementwise
``|dw - ref| <= (2**-10 + R * 2**-23) * sum(|x| * |dy|) + 1e-30`` with R = N*Ho*Wo the
reduction length (each input rounded to 10 mantissa bits, products exact in fp32, fp32
accumulation). Also: configs spread over the tuning space (tiles, depth, bk, split-K atomic and
slabs) on a few shapes, and the math mode: an exact handle never gets ``igemm.gpu_tf32_wrw``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import attrs
import numpy as np
import pytest
from test_gpu_solvers import DEVICE, _handle

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.errors import BackendUnavailableError
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.gpu

MMA = "igemm.gpu_mma_wrw"
TF32 = "igemm.gpu_tf32_wrw"
PER_DTYPE = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "200"))


@functools.cache
def _tf32_handle() -> miocore.Handle | None:
    try:
        return miocore.Handle(DEVICE, math_mode="tf32")
    except BackendUnavailableError:
        return None


def _need(h: miocore.Handle | None, solver: str) -> miocore.Handle:
    if h is None:
        pytest.skip("no GPU device")
    if solver not in h.registry:
        pytest.skip(f"{solver} is not installed")
    return h


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    rows = [r for r in sample_rows(2 * PER_DTYPE, seed=13) if len(r["x"]) == 2]
    return sorted(rows, key=lambda r: r["dir"] != "W")  # backward-weights rows first


def _problems(
    h: miocore.Handle, solver: str, dtype: str, count: int | None = None
) -> list[miocore.ConvProblem]:
    sol = h.registry.get(solver).solver
    want = PER_DTYPE if count is None else count
    out = []
    for i, row in enumerate(_rows()):
        layout = "NCHW" if i % 4 == 3 else "NHWC"
        p = shrink_row(
            {**row, "dtype": dtype, "layout": layout},
            direction="backward_weights",
            max_batch=3,
            max_spatial=16,
            max_channels_per_group=(4, 8, 16, 24)[i % 4],
        )
        if sol.is_applicable(h.context, p.canonical):
            out.append(p)
        if len(out) >= want + 20:
            break
    return out


def with_options(kernels, options: tuple[str, ...]) -> tuple:
    """The kernels with extra compile options (``-DMIO_MFMA_EMULATE``: the MFMA path)."""
    return tuple(attrs.evolve(k, options=(*k.options, *options)) for k in kernels)


def _run(
    h: miocore.Handle,
    solver: str,
    problem: miocore.ConvProblem,
    seed: int,
    cfg=None,
    options: tuple[str, ...] = (),
):
    """Run on device with NaN-poisoned dw (kernels built with ``options`` added); return (got,
    inputs)."""
    canon = problem.canonical
    reg = h.registry.get(solver).solver
    sol = reg.get_solution(h.context, canon, cfg)
    compiled = h.backend.compile(with_options(sol.kernels, options))
    inputs = reference.random_inputs(problem, seed)
    dev = {
        "x": h.backend.from_host(problem.x, inputs["x"]),
        "y": h.backend.from_host(problem.y, inputs["y"]),
        "w": h.backend.from_host(problem.w, np.full(problem.w.lengths, np.nan, np.float32)),
    }
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(
        h, miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws)
    )
    return h.backend.to_host(dev["w"]), inputs


def _check(problem: miocore.ConvProblem, got: np.ndarray, inputs: dict, tf32: bool) -> str | None:
    expected = reference.convolution(problem, x=inputs["x"], y=inputs["y"])
    got64 = got.astype(np.float64)
    if not np.isfinite(got64).all():
        return "not all written (NaN left)"
    if tf32:
        absref = reference.convolution(
            problem, x=np.abs(inputs["x"].astype(np.float64)), y=np.abs(inputs["y"])
        )
        r = problem.n * int(np.prod(problem.y.lengths[2:]))
        bound = (2.0**-10 + r * 2.0**-23) * absref + 1e-30
        excess = float(np.max(np.abs(got64 - expected) - bound))
        return None if excess <= 0 else f"exceeds the TF32 bound by {excess:.3g}"
    err = reference.relative_error(got, expected)
    tol = TOLERANCES[problem.dtype]
    return None if err <= tol else f"relative error {err:.3g} > {tol}"


def _precompile(
    h: miocore.Handle,
    solver: str,
    problems: list[miocore.ConvProblem],
    options: tuple[str, ...] = (),
) -> None:
    reg = h.registry.get(solver).solver
    kernels = [k for p in problems for k in reg.get_solution(h.context, p.canonical).kernels]
    failures = h.backend.precompile(with_options(kernels, options))
    assert not failures, next(iter(failures.values()))


@pytest.mark.parametrize(
    ("solver", "dtype"), [(MMA, "FP16"), (MMA, "BF16"), (TF32, "FP32")], ids=str
)
def test_igemm_wrw_gpu_matches_reference_on_corpus(solver: str, dtype: str) -> None:
    corpus_case(solver, dtype)


def corpus_case(
    solver: str,
    dtype: str,
    options: tuple[str, ...] = (),
    exact_fp32: bool = False,
    count: int | None = None,
) -> None:
    """Corpus-derived backward-weights problems against the float64 reference, the kernels
    built with ``options`` added; ``exact_fp32``: fp32 held to the exact fp32 tolerance instead
    of the TF32 bound (the MFMA path multiplies in full fp32); ``count``: problems wanted
    (``MIOCORE_GPU_TEST_PROBLEMS`` when None)."""
    h = _need(_tf32_handle() if solver == TF32 else _handle(), solver)
    problems = _problems(h, solver, dtype, count)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    _precompile(h, solver, problems, options)
    reg = h.registry.get(solver).solver
    failures = []
    split = 0
    for i, p in enumerate(problems):
        got, inputs = _run(h, solver, p, seed=i, options=options)
        why = _check(p, got, inputs, tf32=solver == TF32 and not exact_fp32)
        if why:
            failures.append(f"{p.key}: {why}")
        split += reg.default_perf_config(h.context, p.canonical)["split"] > 1
    print(
        f"{solver} {' '.join(options)} {dtype}: {len(problems)} problems checked "
        f"({split} with split-K)"
    )
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= min(200, PER_DTYPE if count is None else count)
    assert split > 0


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations, groups, layout
    (4, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NHWC"),
    (3, 32, 48, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2), 2, "NHWC"),
    (8, 128, 256, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1), 1, "NHWC"),
    (2, 24, 20, (10, 10), (1, 7), (0, 3), (3, 1), (2, 1), 1, "NHWC"),
    (3, 16, 24, (12, 9), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NCHW"),
    (2, 256, 160, (6, 7), (3, 3), (1, 1), (1, 1), (1, 1), 1, "NHWC"),  # 256-wide tiles
)


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_igemm_wrw_gpu_configs(dtype: str, shape: int) -> None:
    configs_case(dtype, shape)


def configs_case(
    dtype: str,
    shape: int,
    options: tuple[str, ...] = (),
    shared_ok: Callable[[int], bool] | None = None,
    exact_fp32: bool = False,
    sample: int = 8,
) -> None:
    """About ``sample`` configs spread over the tuning space of one of ``_SHAPES`` plus every
    tile shape and split-K atomic and slabs, each against the float64 reference, the kernels
    built with ``options`` added; ``shared_ok`` (given) keeps only configs whose dynamic shared
    memory (bytes) it accepts; ``exact_fp32`` as in :func:`corpus_case`."""
    solver = TF32 if dtype == "float32" else MMA
    h = _need(_tf32_handle() if solver == TF32 else _handle(), solver)
    n, c, k, hw, f, pads, strides, dils, groups, layout = _SHAPES[shape]
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights",
        n=n,
        c=c,
        k=k,
        in_spatial=hw,
        filter_spatial=f,
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=groups,
        dtype=dtype,
        layout=layout,
    )
    reg = h.registry.get(solver).solver
    space = reg.perf_config_space(h.context, problem.canonical)
    assert space
    configs = space[:: max(1, len(space) // sample)]
    configs += list({(c["bm"], c["bn"]): c for c in space}.values())  # every tile shape
    configs += [c for c in space if c["split"] > 1 and c["atomic"]][-1:]
    configs += [c for c in space if c["split"] > 1 and not c["atomic"]][-1:]
    configs = list(dict.fromkeys(configs))
    if shared_ok is not None:
        from miocore_igemm.gpu_wrw import shared_bytes

        configs = [c for c in configs if shared_ok(shared_bytes(problem.canonical, c))]
    kernels = [
        kk for cfg in configs for kk in reg.get_solution(h.context, problem.canonical, cfg).kernels
    ]
    assert not h.backend.precompile(with_options(kernels, options))
    bad = []
    for i, cfg in enumerate(configs):
        got, inputs = _run(h, solver, problem, seed=i, cfg=cfg, options=options)
        why = _check(problem, got, inputs, tf32=solver == TF32 and not exact_fp32)
        if why:
            bad.append(f"{dict(cfg)}: {why}")
    assert not bad, f"{len(bad)}/{len(configs)} configs failed:\n" + "\n".join(bad[:10])


def test_exact_handle_never_gets_tf32_wrw_on_device() -> None:
    h = _need(_handle(), TF32)
    problem = miocore.ConvProblem.from_sizes(
        "backward_weights",
        n=2,
        c=32,
        k=32,
        in_spatial=(9, 9),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float32",
        layout="NHWC",
    )
    sols = h.find_solutions(problem, find_mode="NORMAL")
    assert TF32 not in {s.solver for s in sols}
    assert "math mode" in h.last_report.not_applicable[TF32]
    t = _need(_tf32_handle(), TF32)
    assert TF32 in {s.solver for s in t.find_solutions(problem, find_mode="NORMAL")}
