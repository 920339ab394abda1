"""torch CPU tensors on the CPU backend: ``run_solution`` and ``prepare`` take them as they are
(channels_last and bfloat16 included), read and write their memory without a copy, and agree
with the float64 reference; the core imports torch only when it is handed a tensor."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from fake_solvers import TimedSolver

import miocore
from miocore import reference
from miocore.backends.cpu import check_array
from miocore.problem.dtypes import VERIFY_TOLERANCE

torch = pytest.importorskip("torch")

CASES = [
    (torch.float32, "NCHW"),
    (torch.float32, "NHWC"),
    (torch.float16, "NHWC"),
    (torch.bfloat16, "NCHW"),
    (torch.bfloat16, "NHWC"),
]


def _tensors(p: miocore.ConvProblem, dtype: Any, seed: int = 0) -> dict[str, Any]:
    """Random x, w, y for ``p`` in its layout; the tensor the direction writes is NaN."""
    gen = torch.Generator().manual_seed(seed)
    fmt = torch.channels_last if p.x.layout == "NHWC" else torch.contiguous_format
    out = {}
    for name in ("x", "w", "y"):
        desc = getattr(p, name)
        t = torch.rand(desc.lengths, generator=gen) * 2 - 1
        if name == p.direction.output_tensor:
            t.fill_(float("nan"))
        out[name] = t.to(dtype).contiguous(memory_format=fmt)
    return out


def _expected(p: miocore.ConvProblem, arrays: dict[str, Any]) -> Any:
    inputs = {k: v.double().numpy() for k, v in arrays.items() if k != p.direction.output_tensor}
    return reference.convolution(p, **inputs)


def _problem(direction: str, dtype: Any, layout: str) -> miocore.ConvProblem:
    return miocore.ConvProblem.from_sizes(
        direction,
        n=2,
        c=8,
        k=6,
        in_spatial=(9, 7),
        filter_spatial=(3, 3),
        pads=(1, 1),
        strides=(2, 1),
        dtype=dtype,
        layout=layout,
    )


def _handle() -> miocore.Handle:
    """A CPU handle with the tests' reference-backed solver: runs without any plugin."""
    return miocore.Handle("cpu", registry=miocore.Registry.from_solvers([TimedSolver("t.ref")]))


@pytest.mark.parametrize(("dtype", "layout"), CASES)
@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_run_solution_writes_the_callers_tensor(direction: str, dtype: Any, layout: str) -> None:
    p = _problem(direction, dtype, layout)
    h = _handle()
    arrays = _tensors(p, dtype)
    out = arrays[p.direction.output_tensor]
    storage, strides = out.untyped_storage().data_ptr(), out.stride()
    h.run_solution(h.get_solutions(p)[0], **arrays)
    # Written in place: the same storage, strides unchanged, every element set.
    assert out.untyped_storage().data_ptr() == storage and out.stride() == strides
    assert not out.isnan().any()
    error = reference.relative_error(out.double().numpy(), _expected(p, arrays))
    assert error <= VERIFY_TOLERANCE[p.dtype]


@pytest.mark.parametrize(("dtype", "layout"), CASES)
def test_installed_solvers_run_on_tensors(dtype: Any, layout: str) -> None:
    """Every installed solver that applies (the plugins' real kernels: BLAS, FFT, Winograd)
    reads and writes torch memory through the host view."""
    p = _problem("forward", dtype, layout)
    h = miocore.Handle("cpu")
    try:
        solutions = h.get_solutions(p)
    except miocore.NoApplicableSolverError:
        pytest.skip("no installed solver applies (no plugin installed)")
    arrays = _tensors(p, dtype)
    expected = _expected(p, arrays)
    for solution in solutions:
        arrays["y"].fill_(float("nan"))
        h.run_solution(solution, **arrays)
        error = reference.relative_error(arrays["y"].double().numpy(), expected)
        assert error <= VERIFY_TOLERANCE[p.dtype], solution.solver


@pytest.mark.parametrize(("dtype", "layout"), [(torch.float32, "NHWC"), (torch.bfloat16, "NHWC")])
def test_prepared_runs_take_tensors_again_and_again(dtype: Any, layout: str) -> None:
    p = _problem("forward", dtype, layout)
    h = _handle()
    run = h.prepare(h.get_solutions(p)[0])
    for seed in range(3):  # new tensors each step: only their addresses change
        arrays = _tensors(p, dtype, seed)
        run(**arrays)
        error = reference.relative_error(arrays["y"].double().numpy(), _expected(p, arrays))
        assert error <= VERIFY_TOLERANCE[p.dtype]
        arrays["x"].mul_(-1)  # the same tensors again, changed in place: read anew
        arrays["y"].fill_(float("nan"))
        run(**arrays)
        assert not arrays["y"].isnan().any()
        error = reference.relative_error(arrays["y"].double().numpy(), _expected(p, arrays))
        assert error <= VERIFY_TOLERANCE[p.dtype]


def test_the_host_view_is_the_tensors_memory() -> None:
    p = _problem("forward", torch.bfloat16, "NHWC")
    t = torch.zeros(p.x.lengths, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    view = check_array(p.x, t, "x")
    assert view.__array_interface__["data"][0] == t.data_ptr()
    assert view.dtype == p.dtype.numpy and view.strides == tuple(s * 2 for s in t.stride())
    view[1, 2, 3, 4] = 1.5
    assert t[1, 2, 3, 4].item() == 1.5
    # A tensor that requires grad is viewed too (its memory, not a copy).
    leaf = torch.zeros(p.w.lengths, dtype=torch.bfloat16, requires_grad=True)
    leaf = leaf.detach().contiguous(memory_format=torch.channels_last).requires_grad_()
    assert check_array(p.w, leaf, "w").__array_interface__["data"][0] == leaf.data_ptr()


def test_tensors_that_do_not_match_are_refused_by_field() -> None:
    p = _problem("forward", torch.float32, "NHWC")
    h = _handle()
    solution = h.get_solutions(p)[0]
    good = _tensors(p, torch.float32)
    bad_cases = [
        ("x", good["x"].double(), "x.dtype", "float64"),
        ("x", good["x"].contiguous(), "x.strides", "layout NHWC"),
        ("w", torch.empty(p.w.lengths, device="meta"), "w.device", "CPU tensors"),
        ("y", good["y"][:, :, :4], "y.shape", "logical order"),
    ]
    for name, tensor, field, words in bad_cases:
        with pytest.raises(miocore.InvalidArgumentError) as info:
            h.run_solution(solution, **{**good, name: tensor})
        assert info.value.field == field and words in str(info.value), field


def test_problem_from_tensors_runs_on_those_tensors() -> None:
    x = torch.randn(1, 4, 6, 6).to(torch.bfloat16, memory_format=torch.channels_last)
    w = torch.randn(5, 4, 3, 3).to(torch.bfloat16, memory_format=torch.channels_last)
    p = miocore.ConvProblem.from_tensors(x, w, padding=1)
    y = torch.empty(p.y.lengths, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    h = _handle()
    h.run_solution(h.get_solutions(p)[0], x=x, w=w, y=y)
    expected = reference.convolution(p, x=x.double().numpy(), w=w.double().numpy())
    assert reference.relative_error(y.double().numpy(), expected) <= VERIFY_TOLERANCE[p.dtype]


def test_the_core_runs_numpy_without_importing_torch() -> None:
    code = (
        "import sys, miocore\n"
        "from miocore.backends.cpu import CpuBackend\n"
        "p = miocore.ConvProblem.from_sizes('F', n=1, c=2, k=2, in_spatial=(4, 4),"
        " filter_spatial=(1, 1))\n"
        "b = CpuBackend()\n"
        "a = miocore.reference.random_inputs(p, seed=0)\n"
        "[b.check_array(getattr(p, k), a[k], k) for k in 'xwy']\n"
        "miocore.ConvProblem.from_tensors(a['x'], a['w'])\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
