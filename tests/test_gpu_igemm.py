"""``igemm.gpu_mma`` (fp16/bf16 tensor cores) and ``igemm.gpu_tf32`` against the float64
reference (marked ``gpu``), forward and backward data.

Problems are corpus-derived: 2-D rows of the corpus (filters, pads, strides, dilations, groups
kept) run as forward and as backward data, in NHWC (the fast layout), shrunk with 4, 8 or 16
channels per group so that both the scalar-load path (channels not a multiple of 16 bytes) and
the 16-byte cp.async path run; at least ``MIOCORE_GPU_TEST_PROBLEMS`` (200) per dtype and
direction; a smaller NCHW set checks the any-layout scalar path. Outputs (y forward, x
backward data) are poisoned with NaN first. Tolerances: fp16/bf16,
``miocore.testing.TOLERANCES`` (output rounding plus fp32 accumulation); TF32, elementwise
``|y - ref| <= (2**-10 + R * 2**-23) * sum(|x| * |w|) + 1e-30`` with R the reduction length
(each input rounded to 10 mantissa bits, products exact in fp32, fp32 accumulation). Also:
configs spread over the tuning space (tiles, depth, bk, split-K) on a few shapes, and the math
mode: an exact handle never gets ``igemm.gpu_tf32``.
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

MMA = "igemm.gpu_mma"
TF32 = "igemm.gpu_tf32"
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
    rows = sample_rows(2 * PER_DTYPE, seed=11)
    return [r for r in rows if len(r["x"]) == 2]


def _problems(
    h: miocore.Handle, solver: str, dtype: str, direction: str, layout: str = "NHWC", count=None
) -> list[miocore.ConvProblem]:
    sol = h.registry.get(solver).solver
    want = PER_DTYPE if count is None else count
    out = []
    for i, row in enumerate(_rows()):
        p = shrink_row(
            {**row, "dtype": dtype, "layout": layout},
            max_channels_per_group=(4, 8, 16)[i % 3],
            direction=direction,
        )
        if sol.is_applicable(h.context, p.canonical):
            out.append(p)
        if len(out) >= want + 20:
            break
    return out


def _output(problem: miocore.ConvProblem) -> str:
    """The tensor the direction writes: y forward, x backward data."""
    return "x" if problem.canonical.direction.value == "backward_data" else "y"


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
    """Run on device with NaN-poisoned output (kernels built with ``options`` added); return
    (got, inputs)."""
    canon = problem.canonical
    reg = h.registry.get(solver).solver
    sol = reg.get_solution(h.context, canon, cfg)
    compiled = h.backend.compile(with_options(sol.kernels, options))
    inputs = reference.random_inputs(problem, seed)
    out = _output(problem)
    dev = {}
    for name in ("x", "w", "y"):
        desc = getattr(problem, name)
        host = np.full(desc.lengths, np.nan, np.float32) if name == out else inputs[name]
        dev[name] = h.backend.from_host(desc, host)
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(
        h, miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws)
    )
    return h.backend.to_host(dev[out]), inputs


def _read(problem: miocore.ConvProblem, inputs: dict, absolute: bool = False) -> dict:
    """The two tensors the direction reads (float64 magnitudes for the TF32 bound)."""
    names = ("y", "w") if _output(problem) == "x" else ("x", "w")
    if absolute:
        return {n: np.abs(inputs[n].astype(np.float64)) for n in names}
    return {n: inputs[n] for n in names}


def _check(problem: miocore.ConvProblem, got: np.ndarray, inputs: dict, tf32: bool) -> str | None:
    expected = reference.convolution(problem, **_read(problem, inputs))
    got64 = got.astype(np.float64)
    if not np.isfinite(got64).all():
        return "not all written (NaN left)"
    if tf32:
        absref = reference.convolution(problem, **_read(problem, inputs, absolute=True))
        # reduction length: FY*FX*Cg forward, FY*FX*Kg backward data
        c = problem.canonical
        per_group = c.k // c.groups if _output(problem) == "x" else c.c // c.groups
        r = int(np.prod(problem.w.lengths[2:])) * per_group
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


def corpus_case(
    solver: str,
    dtype: str,
    direction: str,
    layout: str,
    count=None,
    options: tuple[str, ...] = (),
    exact_fp32: bool = False,
) -> None:
    """Corpus-derived problems of one solver, dtype, direction and layout against the float64
    reference, the kernels built with ``options`` added; ``exact_fp32``: fp32 held to the exact
    fp32 tolerance instead of the TF32 bound (the MFMA path multiplies in full fp32)."""
    h = _need(_tf32_handle() if solver == TF32 else _handle(), solver)
    problems = _problems(h, solver, dtype, direction, layout, count)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    _precompile(h, solver, problems, options)
    failures = []
    vec = 0
    for i, p in enumerate(problems):
        got, inputs = _run(h, solver, p, seed=i, options=options)
        why = _check(p, got, inputs, tf32=solver == TF32 and not exact_fp32)
        if why:
            failures.append(f"{p.key}: {why}")
        vec += gpu_module().vector_width(p.canonical) > 1
    print(
        f"{solver} {' '.join(options)} {dtype} {direction} {layout}: {len(problems)} problems "
        f"checked ({vec} on the 16-byte path)"
    )
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= min(200, count or PER_DTYPE)


def gpu_module():
    """The solver module (for its vector-width rule)."""
    from miocore_igemm import gpu

    return gpu


_CASES = [(MMA, "FP16"), (MMA, "BF16"), (TF32, "FP32")]


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize(("solver", "dtype"), _CASES, ids=str)
def test_igemm_gpu_matches_reference_on_corpus(solver: str, dtype: str, direction: str) -> None:
    corpus_case(solver, dtype, direction, "NHWC")


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize(("solver", "dtype"), _CASES, ids=str)
def test_igemm_gpu_nchw_scalar_path(solver: str, dtype: str, direction: str) -> None:
    corpus_case(solver, dtype, direction, "NCHW", count=max(10, PER_DTYPE // 5))


_SHAPES = (
    # n, c, k, hw, filter, pads, strides, dilations, groups
    (2, 64, 96, (13, 19), (3, 3), (1, 1), (1, 1), (1, 1), 1),
    (3, 32, 40, (17, 11), (5, 3), (2, 0), (2, 3), (1, 2), 2),
    (2, 128, 256, (7, 7), (1, 1), (0, 0), (1, 1), (1, 1), 1),
    (1, 24, 20, (10, 10), (1, 7), (0, 3), (3, 1), (2, 1), 1),
    (2, 256, 256, (12, 12), (3, 3), (1, 1), (1, 1), (1, 1), 1),  # 256-wide tiles both ways
    (2, 128, 64, (9, 9), (1, 1), (0, 0), (2, 2), (1, 1), 1),  # strided 1x1 (downsample)
)


@pytest.mark.parametrize("direction", ("forward", "backward_data"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_igemm_gpu_configs(dtype: str, shape: int, direction: str) -> None:
    configs_case(dtype, shape, direction)


def configs_case(
    dtype: str,
    shape: int,
    direction: str,
    options: tuple[str, ...] = (),
    shared_ok: Callable[[int], bool] | None = None,
    exact_fp32: bool = False,
    sample: int = 10,
) -> None:
    """About ``sample`` configs spread over the tuning space of one of ``_SHAPES`` (plus two
    split-K and two 256 x 128 ones), each against the float64 reference, the kernels built with
    ``options`` added; ``shared_ok`` (given) keeps only configs whose dynamic shared memory
    (bytes) it accepts; ``exact_fp32`` as in :func:`corpus_case`."""
    solver = TF32 if dtype == "float32" else MMA
    h = _need(_tf32_handle() if solver == TF32 else _handle(), solver)
    n, c, k, hw, f, pads, strides, dils, groups = _SHAPES[shape]
    problem = miocore.ConvProblem.from_sizes(
        direction,
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
        layout="NHWC",
    )
    reg = h.registry.get(solver).solver
    canon = problem.canonical
    space = reg.perf_config_space(h.context, canon)
    assert space
    configs = space[:: max(1, len(space) // sample)]
    configs += [c for c in space if c["split"] > 1][:2]
    configs += [c for c in space if c["bm"] * c["bn"] == 256 * 128][:2]
    if shared_ok is not None:
        configs = [c for c in configs if shared_ok(gpu_module().shared_bytes(canon, c))]
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


def test_exact_handle_never_gets_tf32_on_device() -> None:
    h = _need(_handle(), TF32)
    problem = miocore.ConvProblem.from_sizes(
        "forward",
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
    # the exact handle, reading the record the tf32 handle just wrote, still excludes it
    assert TF32 not in {s.solver for s in h.find_solutions(problem, find_mode="FAST")}


def test_find_tunes_gpu_mma() -> None:
    h = _need(_handle(), MMA)
    problem = miocore.ConvProblem.from_sizes(
        "forward",
        n=4,
        c=64,
        k=64,
        in_spatial=(14, 14),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
        layout="NHWC",
    )
    sols = h.find_solutions(problem, find_mode="NORMAL", exhaustive=True)
    assert MMA in {s.solver for s in sols}
