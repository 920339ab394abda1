"""The BLAS runs on the handle's stream, whichever binding serves it (needs a GPU).

A solver that mixes kernels and cuBLAS calls on a non-default stream must see its inputs
written by earlier work on that stream, even while the stream is still busy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import miocore
from miocore import reference

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 200_000_000  # ~0.1 s: far longer than launching everything below


@pytest.fixture(scope="module")
def torch() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch


@pytest.mark.parametrize("solver", ["gemm.gpu_nhwc", "winograd.gpu_f4x3"])
@pytest.mark.parametrize("prepared", [False, True])
def test_blas_solvers_respect_a_busy_side_stream(torch: Any, solver: str, prepared: bool) -> None:
    side = torch.cuda.Stream()
    h = miocore.Handle("cuda", stream=side)
    if solver not in {s.name for s in h.registry.solvers}:
        pytest.skip(f"{solver} is not installed")
    p = miocore.ConvProblem.from_sizes(
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
    host = reference.random_inputs(p, 1)
    with torch.cuda.stream(side):
        x, w, y = (
            torch.empty(getattr(p, n).element_space, dtype=torch.float16, device="cuda").as_strided(
                getattr(p, n).lengths, getattr(p, n).strides
            )
            for n in ("x", "w", "y")
        )
        w.copy_(torch.from_numpy(host["w"].astype(np.float32)))
        x.zero_()
    torch.cuda.synchronize()
    run = h.prepare(p, solver) if prepared else None
    for _ in range(3):  # prepared: direct, recorded, replayed
        with torch.cuda.stream(side):
            x.zero_()
            y.fill_(float("nan"))
            torch.cuda._sleep(SLEEP_CYCLES)  # the side stream stays busy...
            x.copy_(torch.from_numpy(host["x"].astype(np.float32)))  # ...then writes x
            if run is not None:
                run(x=x, w=w, y=y)
            else:
                h.immediate(p, solver, x=x, w=w, y=y)
        torch.cuda.synchronize()
        expected = reference.convolution(p, x=host["x"], w=host["w"])
        err = reference.relative_error(y.float().cpu().numpy(), expected)
        assert err < (3e-2 if solver.startswith("winograd") else 5e-3), (solver, err)
