"""``winograd.gpu_f2x3`` and ``winograd.gpu_f4x3`` against the float64 reference (marked ``gpu``).

Problems are corpus-derived: the sampled rows (every direction) whose shrunk problem the
solvers take (2-D, 3x3, stride 1, dilation 1, groups up to 32), in NCHW and NHWC (the row's
layout, or the other one every second row), with 4, 8 or 16 channels per group, run as FP32,
FP16 and BF16. The direction's output is poisoned with NaN first. Tolerance per problem:
``max(TOLERANCES[dtype], solver.expected_error(problem))`` (the Winograd transforms lose a few
bits; their bound grows with the reduction). Also: larger channel counts through several image
chunks (the workspace budget shrunk), and tensors with padded (non-packed) strides.
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

pytestmark = pytest.mark.gpu

SOLVERS = ("winograd.gpu_f2x3", "winograd.gpu_f4x3")
DTYPES = ("FP32", "FP16", "BF16")
SAMPLE = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "600"))


@pytest.fixture
def handle() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip("no GPU device")
    for name in SOLVERS:
        if name not in h.registry:
            pytest.skip(f"{name} is not installed")
    return h


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    return sample_rows(SAMPLE, seed=23)


def _problems(h: miocore.Handle, solver: str, direction: str, dtype: str) -> list:
    impl = h.registry.get(solver).solver
    out = []
    for i, row in enumerate(_rows()):
        if row["dir"] != direction:
            continue
        layout = row["layout"]
        if i % 2 and layout in ("NCHW", "NHWC"):
            layout = "NHWC" if layout == "NCHW" else "NCHW"
        p = shrink_row(
            {**row, "dtype": dtype, "layout": layout}, max_channels_per_group=(4, 8, 16)[i % 3]
        )
        if impl.is_applicable(h.context, p.canonical):
            out.append(p)
    return out


def _run(h: miocore.Handle, solver: str, problem: miocore.ConvProblem, seed: int) -> str | None:
    """Run with the output poisoned; None when it matches the reference, else why not."""
    impl = h.registry.get(solver).solver
    canon = problem.canonical
    sol = impl.get_solution(h.context, canon)
    compiled = h.backend.compile(sol.kernels)
    inputs = reference.random_inputs(problem, seed)
    out_name = problem.direction.output_tensor
    dev = {}
    for name, values in inputs.items():
        desc = getattr(problem, name)
        fill = np.full(desc.lengths, np.nan, np.float32) if name == out_name else values
        dev[name] = h.backend.from_host(desc, fill)
    ws = h.backend.allocate_workspace(sol.workspace_size)
    sol.invoker_factory(compiled)(
        h, miocore.InvokeParams(problem=canon, x=dev["x"], w=dev["w"], y=dev["y"], workspace=ws)
    )
    got = h.backend.to_host(dev[out_name])
    if not np.isfinite(got.astype(np.float64)).all():
        return "not all written (NaN left)"
    expected = reference.convolution(problem, **{k: v for k, v in inputs.items() if k != out_name})
    err = reference.relative_error(got, expected)
    tol = max(TOLERANCES[problem.dtype], impl.expected_error(h.context, canon) or 0.0)
    return None if err <= tol else f"relative error {err:.3g} > {tol:.3g}"


def _precompile(h: miocore.Handle, solver: str, problems: list) -> None:
    impl = h.registry.get(solver).solver
    kernels = {k for p in problems for k in impl.get_solution(h.context, p.canonical).kernels}
    failures = h.backend.precompile(list(kernels))
    assert not failures, next(iter(failures.values()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", ("F", "B", "W"))
@pytest.mark.parametrize("solver", SOLVERS)
def test_winograd_gpu_matches_reference_on_corpus(
    handle: miocore.Handle, solver: str, direction: str, dtype: str
) -> None:
    problems = _problems(handle, solver, direction, dtype)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    _precompile(handle, solver, problems)
    failures = []
    for i, p in enumerate(problems):
        why = _run(handle, solver, p, seed=i)
        if why:
            failures.append(f"{p.key}: {why}")
    layouts = {p.x.layout for p in problems}
    print(f"{solver} {direction} {dtype}: {len(problems)} problems checked, layouts {layouts}")
    assert not failures, f"{len(failures)}/{len(problems)} failed:\n" + "\n".join(failures[:20])
    assert len(problems) >= 20


_SHAPES = (
    # n, c, k, hw, pads, groups, layout
    (5, 96, 128, (14, 15), (1, 1), 1, "NHWC"),
    (4, 64, 48, (9, 20), (0, 2), 2, "NCHW"),
)


@pytest.mark.parametrize("dtype", ("float32", "float16"))
@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
@pytest.mark.parametrize("shape", range(len(_SHAPES)))
@pytest.mark.parametrize("solver", SOLVERS)
def test_winograd_gpu_chunks_and_channels(
    handle: miocore.Handle,
    monkeypatch: pytest.MonkeyPatch,
    solver: str,
    shape: int,
    direction: str,
    dtype: str,
) -> None:
    """Wider channels (the tensor-core GEMM paths) through 2-3 image chunks."""
    from miocore_winograd import gpu

    n, c, k, hw, pads, groups, layout = _SHAPES[shape]
    p = miocore.ConvProblem.from_sizes(
        direction,
        n=n,
        c=c,
        k=k,
        in_spatial=hw,
        filter_spatial=(3, 3),
        pads=pads,
        groups=groups,
        dtype=dtype,
        layout=layout,
    )
    full = gpu._Plan(p.canonical, handle.registry.get(solver).solver.m)
    monkeypatch.setattr(gpu, "WORKSPACE_BUDGET", full.workspace // 2)
    assert len(gpu._Plan(p.canonical, full.m).chunks) >= 2
    why = _run(handle, solver, p, seed=shape)
    assert why is None, f"{p.key}: {why}"


@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
@pytest.mark.parametrize("solver", SOLVERS)
def test_winograd_gpu_padded_strides(handle: miocore.Handle, solver: str, direction: str) -> None:
    """Tensors whose strides are not packed (a padded NHWC row pitch, a padded NCHW plane)."""
    n, c, k, h, w = 2, 12, 20, 11, 9
    x = miocore.TensorDescriptor(
        "float32", (n, c, h, w), "NHWC", strides=(h * (w + 2) * c, 1, (w + 2) * c, c)
    )
    wd = miocore.TensorDescriptor("float32", (k, c, 3, 3), "NCHW")
    y = miocore.TensorDescriptor(
        "float32", (n, k, h, w), "NCHW", strides=(k * (h * w + 7), h * w + 7, w, 1)
    )
    conv = miocore.ConvolutionDescriptor(pads=(1, 1))
    p = miocore.ConvProblem(direction, x=x, w=wd, y=y, conv=conv)
    why = _run(handle, solver, p, seed=1)
    assert why is None, f"{p.key}: {why}"


@pytest.mark.parametrize("direction", ("forward", "backward_data", "backward_weights"))
@pytest.mark.parametrize("solver", SOLVERS)
def test_winograd_gpu_channels_last_odd_pitch(
    handle: miocore.Handle, solver: str, direction: str
) -> None:
    """NHWC float16 with 16 channels (several channels per thread) but an odd row pitch: the
    kernels must fall back from vector to element accesses."""
    n, c, k, h, w = 2, 16, 16, 10, 7
    x = miocore.TensorDescriptor(
        "float16", (n, c, h, w), "NHWC", strides=(h * (w * c + 1), 1, w * c + 1, c)
    )
    wd = miocore.TensorDescriptor("float16", (k, c, 3, 3), "NHWC")
    y = miocore.TensorDescriptor(
        "float16", (n, k, h, w), "NHWC", strides=(h * (w * k + 3), 1, w * k + 3, k)
    )
    conv = miocore.ConvolutionDescriptor(pads=(1, 1))
    p = miocore.ConvProblem(direction, x=x, w=wd, y=y, conv=conv)
    why = _run(handle, solver, p, seed=2)
    assert why is None, f"{p.key}: {why}"
