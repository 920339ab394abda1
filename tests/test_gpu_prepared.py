"""``Handle.prepare`` on a GPU: recorded graphs replay the right computation (needs a GPU)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import miocore
from miocore import reference

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


def _device(torch: Any, host: np.ndarray, dtype: Any) -> Any:
    return torch.from_numpy(np.ascontiguousarray(host.astype(np.float32))).to("cuda", dtype)


@pytest.mark.parametrize("solver", ["gemm.gpu_nhwc", "winograd.gpu_f4x3", "direct.gpu_naive"])
def test_prepared_runs_and_replays_match_the_reference(torch: Any, solver: str) -> None:
    h = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    if solver not in {s.name for s in h.registry.solvers}:
        pytest.skip(f"{solver} is not installed")
    p = miocore.ConvProblem.from_sizes(
        "forward",
        n=2,
        c=32,
        k=48,
        in_spatial=(12, 12),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
        layout="NCHW",
    )
    host = reference.random_inputs(p, 0)
    x = _device(torch, host["x"], torch.float16)
    w = _device(torch, host["w"], torch.float16)
    y = torch.full(p.y.lengths, float("nan"), dtype=torch.float16, device="cuda")
    run = h.prepare(p, solver)
    ws = run.workspace
    for seed in range(4):  # same memory, new values each call: the replays must read them
        values = reference.random_inputs(p, seed)
        x.copy_(torch.from_numpy(values["x"].astype(np.float32)))
        y.fill_(float("nan"))
        run(x=x, w=w, y=y)
        torch.cuda.synchronize()
        expected = reference.convolution(p, x=values["x"], w=host["w"])
        err = reference.relative_error(y.float().cpu().numpy(), expected)
        # Winograd's transforms in fp16 lose more than a GEMM's fp32 sums (docs/numerics.md).
        assert err < (3e-2 if solver.startswith("winograd") else 5e-3), (solver, seed, err)
    assert ws is run.workspace
    if solver == "direct.gpu_naive":
        assert run._graph is None  # one launch: nothing to gain from a graph
