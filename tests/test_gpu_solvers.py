"""Every GPU solver against the float64 reference on corpus-derived problems (marked ``gpu``).

For each direction, 200 corpus rows (stratified: layouts, 2-D/3-D, groups, depthwise, strides,
dilations) are cut down to test size and run in each of fp32, fp16 and bf16, so every solver
sees at least 200 problems per direction and dtype where it applies. Outputs are poisoned with
NaN first, so an element a kernel forgets to write fails the check.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pytest

import miocore
from miocore import reference
from miocore.corpus import find_corpus, sample_rows, shrink_row
from miocore.errors import BackendUnavailableError
from miocore.testing import TOLERANCES

pytestmark = pytest.mark.gpu

DEVICE = os.environ.get("MIOCORE_TEST_GPU", "cuda")
PER_DIRECTION = int(os.environ.get("MIOCORE_GPU_TEST_PROBLEMS", "200"))
GPU_SOLVERS = ("direct.gpu_naive", "gemm.gpu_im2col")
DTYPES = ("FP32", "FP16", "BF16")
DIRECTIONS = ("F", "B", "W")


@functools.cache
def _handle() -> miocore.Handle | None:
    try:
        return miocore.Handle(DEVICE)
    except BackendUnavailableError:
        return None


@pytest.fixture
def handle() -> miocore.Handle:
    h = _handle()
    if h is None:
        pytest.skip(f"no {DEVICE} device")
    return h


@functools.cache
def _rows() -> list[dict]:
    if find_corpus() is None:
        return []
    return sample_rows(PER_DIRECTION, seed=7)


def _problems(direction: str, dtype: str) -> list[miocore.ConvProblem]:
    out = []
    for row in _rows():
        if row["dir"] != direction:
            continue
        out.append(shrink_row({**row, "dtype": dtype}))
    return out


def run_on_device(
    h: miocore.Handle, solver: str, problem: miocore.ConvProblem, seed: int
) -> tuple[float, bool]:
    """Run ``solver`` through immediate mode on device copies; return (error, all written)."""
    inputs = reference.random_inputs(problem, seed)
    out_name = problem.direction.output_tensor
    dev = {}
    for name, values in inputs.items():
        desc = getattr(problem, name)
        fill = np.full(desc.lengths, np.nan, dtype=desc.dtype.numpy) if name == out_name else values
        dev[name] = h.backend.from_host(desc, fill)
    size = h.get_solution_workspace_size(problem, solver)
    workspace = h.backend.allocate_workspace(size)
    h.immediate(problem, solver, workspace=workspace, **dev)
    got = h.backend.to_host(dev[out_name])
    expected = reference.convolution(problem, **{k: v for k, v in inputs.items() if k != out_name})
    written = bool(np.isfinite(got.astype(np.float64)).all())
    return reference.relative_error(got, expected), written


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("solver", GPU_SOLVERS)
def test_solver_matches_reference_on_corpus(
    handle: miocore.Handle, solver: str, direction: str, dtype: str
) -> None:
    if solver not in handle.registry:
        pytest.skip(f"{solver} is not installed")
    problems = _problems(direction, dtype)
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    ran = check_problems(handle, solver, problems, tol)
    print(f"{solver} {direction} {dtype}: {ran} problems checked")
    if solver == "direct.gpu_naive":
        assert ran >= min(200, PER_DIRECTION)


def check_channels_last(
    h: miocore.Handle, solver: str, direction: str, dtype: str, count: int, tol: float,
    declined_by: miocore.Handle | None = None,
) -> None:  # fmt: skip
    """``solver`` on ``count`` sampled rows of ``direction`` in their channels-last twins
    (NHWC / NDHWC) against the reference; each must also be declined by ``declined_by``."""
    if solver not in h.registry:
        pytest.skip(f"{solver} is not installed")
    rows = [r for r in _rows() if r["dir"] == direction][:count]
    if not rows:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    twins = {"NCHW": "NHWC", "NCDHW": "NDHWC"}
    problems = [
        shrink_row({**row, "dtype": dtype, "layout": twins.get(row["layout"], row["layout"])})
        for row in rows
    ]
    ran = check_problems(h, solver, problems, tol, declined_by)
    print(f"{solver} {direction} {dtype}: {ran} channels-last problems checked")
    assert ran >= len(rows) * 0.9


def check_problems(
    h: miocore.Handle, solver: str, problems: list, tol: float,
    declined_by: miocore.Handle | None = None,
) -> int:  # fmt: skip
    """``solver`` on each of ``problems`` it applies to against the reference (each seeded by
    its place in the list), every output written and within ``tol``; each must also be
    declined by ``declined_by``. Returns how many ran."""
    reg = h.registry.get(solver).solver
    ran, failures = 0, []
    for i, problem in enumerate(problems):
        if not reg.is_applicable(h.context, problem.canonical):
            continue
        if declined_by is not None:
            assert not reg.is_applicable(declined_by.context, problem.canonical)
        err, written = run_on_device(h, solver, problem, seed=i)
        ran += 1
        if not written or not np.isfinite(err) or err > tol:
            failures.append(f"{problem.key}: error {err:.3g}, all written: {written}")
    assert not failures, f"{len(failures)}/{ran} failed:\n" + "\n".join(failures[:20])
    return ran


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_channels_last_gemm_on_corpus(handle: miocore.Handle, direction: str, dtype: str) -> None:
    """``gemm.gpu_nhwc`` on every sampled row in its channels-last twin (NHWC / NDHWC)."""
    tol = TOLERANCES[miocore.DataType.parse(dtype)]
    check_channels_last(handle, "gemm.gpu_nhwc", direction, dtype, PER_DIRECTION // 2, tol)


#: TF32 products (10-bit mantissas, fp32 accumulation) against the float64 reference,
#: relative to the largest output: some 2**-10 per product, averaging down over the sum.
TF32_TOLERANCE = 5e-3


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_channels_last_gemm_tf32_on_corpus(handle: miocore.Handle, direction: str) -> None:
    """``gemm.gpu_nhwc_tf32`` in the tf32 math mode on channels-last corpus rows; the exact
    handle declines every one of them."""
    tf32 = miocore.Handle(DEVICE, math_mode="tf32")
    check_channels_last(
        tf32, "gemm.gpu_nhwc_tf32", direction, "FP32", PER_DIRECTION // 4, TF32_TOLERANCE,
        declined_by=handle,
    )  # fmt: skip


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_nchw_gemm_tf32_on_corpus(handle: miocore.Handle, direction: str) -> None:
    """``gemm.gpu_im2col_tf32`` in the tf32 math mode on the sampled NCHW / NCDHW rows (1x1
    layers as one GEMM per chunk, the rest through its column buffer), against the TF32
    bound; the exact handle declines every one of them."""
    tf32 = miocore.Handle(DEVICE, math_mode="tf32")
    name = "gemm.gpu_im2col_tf32"
    if name not in tf32.registry:
        pytest.skip(f"{name} is not installed")
    problems = _problems(direction, "FP32")[: PER_DIRECTION // 4]
    if not problems:
        pytest.skip("the corpus is not available (set MIOCORE_CORPUS)")
    ran = check_problems(tf32, name, problems, TF32_TOLERANCE, declined_by=handle)
    print(f"{name} {direction}: {ran} problems checked")
    assert ran >= 10


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_channels_last_gemm_downsampling(
    handle: miocore.Handle, direction: str, dtype: str
) -> None:
    """ResNet's 1x1 stride-2 downsampling shape (in place, no rows) and an odd-sized one."""
    for hw in ((12, 10), (11, 9)):
        p = miocore.ConvProblem.from_sizes(
            direction, n=3, c=16, k=24, in_spatial=hw, filter_spatial=(1, 1), strides=(2, 2),
            dtype=dtype, layout="NHWC",
        )  # fmt: skip
        err, written = run_on_device(handle, "gemm.gpu_nhwc", p, seed=hw[0])
        assert written and err <= TOLERANCES[p.dtype], (hw, err)


def test_transposed_problems(handle: miocore.Handle) -> None:
    conv = miocore.ConvolutionDescriptor(
        pads=(1, 1), strides=(2, 2), mode="transpose", output_pads=(1, 1)
    )
    x = miocore.TensorDescriptor("float32", (2, 6, 5, 5))
    w = miocore.TensorDescriptor("float32", (6, 4, 3, 3))
    y = conv.output_descriptor(x, w)
    for direction in ("forward", "backward_data", "backward_weights"):
        p = miocore.ConvProblem(direction, x=x, w=w, y=y, conv=conv)
        err, written = run_on_device(handle, "direct.gpu_naive", p, seed=1)
        assert written and err < 2e-5, (direction, err)
