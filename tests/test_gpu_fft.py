"""``fft.gpu_rfft`` (cuFFT / hipFFT FFT convolution) against the float64 reference (marked
``gpu``).

Problems are corpus-derived: rows of the corpus sample in each direction that FFT applies to
(stride 1, undilated, groups 1: filters, pads, layouts NCHW/NHWC/NCDHW/NDHWC kept), shrunk
with 4, 8 or 16 channels and at most 20 samples per spatial side, re-typed to each dtype; plus
a few larger shapes whose reduction tiles are the widest (8 x 4) and whose FFT lengths are not
powers of two. Outputs are poisoned with NaN first. Tolerance: the larger of
``miocore.testing.TOLERANCES[dtype]`` (output rounding, fp32 arithmetic) and the solver's
``expected_error`` (the float32 FFT rounding bound, ``fft.gpu_rfft`` docstring).
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest
from test_gpu_solvers import _handle

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.testing import TOLERANCES

torch = pytest.importorskip("torch")  # at collection: a lazy import mid-session failed before

pytestmark = pytest.mark.gpu

SOLVER = "fft.gpu_rfft"
PER_CASE = int(os.environ.get("MIOCORE_GPU_FFT_PROBLEMS", "60"))
DIRS = {"F": "forward", "B": "backward_data", "W": "backward_weights"}


def _need() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip("no GPU device")
    if SOLVER not in h.registry:
        pytest.skip(f"{SOLVER} is not installed")
    return h


@functools.cache
def _rows(direction: str) -> list[dict]:
    if find_corpus() is None:
        return []
    return [r for r in sample_rows(8 * PER_CASE, seed=23) if r["dir"] == direction]


def _problems(h: miocore.Handle, direction: str, dtype: str) -> list[miocore.ConvProblem]:
    sol = h.registry.get(SOLVER).solver
    out = []
    for i, row in enumerate(_rows(direction)):
        p = shrink_row(
            {**row, "dtype": dtype},
            max_channels_per_group=(4, 8, 16)[i % 3],
            max_spatial=20,
        )
        if not p.is_transposed and sol.is_applicable(h.context, p.canonical):
            out.append(p)
        if len(out) >= PER_CASE:
            break
    return out


def _run(h: miocore.Handle, problem: miocore.ConvProblem, seed: int) -> tuple[np.ndarray, dict]:
    """Run on the device with the written tensor poisoned with NaN; (got, inputs)."""
    canon = problem.canonical
    solver = h.registry.get(SOLVER).solver
    sol = solver.get_solution(h.context, canon)
    compiled = h.backend.compile(sol.kernels)
    inputs = reference.random_inputs(problem, seed)
    written = {"forward": "y", "backward_data": "x", "backward_weights": "w"}[
        problem.direction.value
    ]
    dev = {}
    for name in ("x", "w", "y"):
        desc = getattr(problem, name)
        values = np.full(desc.lengths, np.nan, np.float32) if name == written else inputs[name]
        dev[name] = h.backend.from_host(desc, values)
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(
        h, miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws)
    )
    h.backend.synchronize()
    return h.backend.to_host(dev[written]), inputs


def _tolerance(h: miocore.Handle, problem: miocore.ConvProblem) -> float:
    solver = h.registry.get(SOLVER).solver
    bound = solver.expected_error(h.context, problem.canonical) or 0.0
    return max(TOLERANCES[problem.dtype], bound)


def _check(h: miocore.Handle, problem: miocore.ConvProblem, seed: int) -> str | None:
    got, inputs = _run(h, problem, seed)
    if not np.isfinite(got.astype(np.float64)).all():
        return "not all written (NaN left)"
    reads = {"forward": ("x", "w"), "backward_data": ("w", "y"), "backward_weights": ("x", "y")}
    expected = reference.convolution(
        problem, **{name: inputs[name] for name in reads[problem.direction.value]}
    )
    err = reference.relative_error(got, expected)
    tol = _tolerance(h, problem)
    return None if err <= tol else f"relative error {err:.3g} > {tol:.3g}"


@pytest.mark.parametrize("direction", list(DIRS))
@pytest.mark.parametrize("dtype", ["FP32", "FP16", "BF16"])
def test_fft_gpu_matches_reference_on_corpus(direction: str, dtype: str) -> None:
    h = _need()
    problems = _problems(h, direction, dtype)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    solver = h.registry.get(SOLVER).solver
    kernels = [k for p in problems for k in solver.get_solution(h.context, p.canonical).kernels]
    failures = h.backend.precompile(kernels)
    assert not failures, next(iter(failures.values()))
    bad = []
    layouts = set()
    for i, p in enumerate(problems):
        why = _check(h, p, seed=i)
        layouts.add(p.x.layout)
        if why:
            bad.append(f"{p.key}: {why}")
    print(f"{SOLVER} {direction} {dtype}: {len(problems)} problems, layouts {sorted(layouts)}")
    assert not bad, f"{len(bad)}/{len(problems)} failed:\n" + "\n".join(bad[:20])
    assert len(problems) >= min(20, PER_CASE)


_SHAPES = (
    # n, c, k, spatial, filter, pads, layout
    (4, 24, 40, (30, 27), (5, 5), (2, 2), "NCHW"),
    (3, 16, 33, (19, 23), (7, 3), (3, 0), "NHWC"),
    (9, 32, 12, (14, 14), (3, 3), (1, 1), "NHWC"),
    (2, 8, 10, (9, 7, 8), (3, 3, 3), (1, 1, 1), "NDHWC"),
)


@pytest.mark.parametrize("direction", list(DIRS.values()))
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
def test_fft_gpu_larger_shapes(direction: str, dtype: str, shape: int) -> None:
    h = _need()
    n, c, k, spatial, filt, pads, layout = _SHAPES[shape]
    p = miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=spatial,
        filter_spatial=filt,
        pads=pads,
        dtype=dtype,
        layout=layout,
    )
    assert h.registry.get(SOLVER).solver.is_applicable(h.context, p.canonical)
    why = _check(h, p, seed=shape)
    assert why is None, f"{p.key}: {why}"


def test_fft_gpu_runs_on_the_handles_stream_with_torch_tensors() -> None:
    """Through the public API (compile_solution / run_solution) on a non-default torch
    stream: the transforms (CuPy's ExternalStream) and the kernels must be ordered on it."""
    _need()
    stream = torch.cuda.Stream()
    h = miocore.Handle("cuda", stream=stream)
    p = miocore.ConvProblem.from_sizes(
        "forward",
        n=8,
        c=32,
        k=32,
        in_spatial=(64, 64),
        filter_spatial=(7, 7),
        pads=(3, 3),
        dtype="float32",
        layout="NHWC",
    )
    inputs = reference.random_inputs(p, 5)
    with torch.cuda.stream(stream):
        x = torch.from_numpy(inputs["x"]).cuda().to(memory_format=torch.channels_last)
        w = torch.from_numpy(inputs["w"]).cuda().to(memory_format=torch.channels_last)
        y = torch.full(p.y.lengths, float("nan"), device="cuda").to(
            memory_format=torch.channels_last
        )
        sol = h.compile_solution(p, SOLVER)
        ws = torch.empty(sol.workspace_size, dtype=torch.uint8, device="cuda")
        torch.cuda._sleep(50_000_000)  # the work must wait behind this on the stream
        h.run_solution(sol, x=x, w=w, y=y, workspace=ws)
        got = y.cpu().numpy()
    expected = reference.convolution(p, x=inputs["x"], w=inputs["w"])
    assert reference.relative_error(got, expected) <= _tolerance(h, p)
