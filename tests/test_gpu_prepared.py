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


def _device(torch: Any, host: np.ndarray, desc: Any) -> Any:
    """A float16 device tensor with ``desc``'s strides holding ``host``."""
    storage = torch.empty(desc.element_space, dtype=torch.float16, device="cuda")
    view = torch.as_strided(storage, desc.lengths, desc.strides)
    view.copy_(torch.from_numpy(host.astype(np.float32)))
    return view


#: Whether a prepared run of each solver ends up replaying a graph: multi-launch solutions do,
#: those calling the BLAS only where its binding is recorded by a capture; one launch never.
GRAPHED = {
    "igemm.gpu_mma": True,
    "fft.gpu_rfft": True,
    "gemm.gpu_nhwc": "blas",
    "winograd.gpu_f4x3": "blas",
    # One launch: kept where the driver replays a graph for less than a launch (CUDA).
    "direct.gpu_naive": "single",
}


@pytest.mark.parametrize("call", ["prepare", "immediate"])
@pytest.mark.parametrize("solver", sorted(GRAPHED))
def test_prepared_runs_and_replays_match_the_reference(torch: Any, solver: str, call: str) -> None:
    """A prepared run, and ``immediate`` (``run_solution``'s path: the runner remembers the
    last call), record the second call alike as a graph and replay it after."""
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
        layout="NHWC",
    )
    host = reference.random_inputs(p, 0)
    x = _device(torch, host["x"], p.x)
    w = _device(torch, host["w"], p.w)
    y = _device(torch, host["y"], p.y)
    run = h.prepare(p, solver)
    ws = run.workspace
    for seed in range(4):  # same memory, new values each call: the replays must read them
        values = reference.random_inputs(p, seed)
        x.copy_(torch.from_numpy(values["x"].astype(np.float32)))
        y.fill_(float("nan"))
        if call == "prepare":
            run(x=x, w=w, y=y)
        else:
            h.immediate(p, solver, x=x, w=w, y=y)
        torch.cuda.synchronize()
        expected = reference.convolution(p, x=values["x"], w=host["w"])
        err = reference.relative_error(y.float().cpu().numpy(), expected)
        # Winograd's transforms in fp16 lose more than a GEMM's fp32 sums (docs/numerics.md).
        assert err < (3e-2 if solver.startswith("winograd") else 5e-3), (solver, seed, err)
    assert ws is run.workspace
    expected = GRAPHED[solver]
    if expected == "blas":
        expected = bool(h.backend.blas.records_in_graphs)
    if expected == "single":
        expected = h.backend.driver.graph_replay_beats_launch
    if call == "prepare":
        assert (run._graph is not None) is expected
    else:
        (remembered,) = h.runner._remembered.values()
        assert (remembered[4] is not None) is expected


def test_prepared_runs_follow_new_tensors_of_the_same_layout(torch: Any) -> None:
    h = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    p = miocore.ConvProblem.from_sizes(
        "backward_data",
        n=2,
        c=32,
        k=48,
        in_spatial=(12, 12),
        filter_spatial=(3, 3),
        pads=(1, 1),
        dtype="float16",
        layout="NHWC",
    )
    run = h.prepare(h.find_solutions(p, find_mode="NORMAL")[0])
    for seed in range(4):  # a framework's new tensors each step
        host = reference.random_inputs(p, seed)
        x, w, y = (_device(torch, host[n], getattr(p, n)) for n in ("x", "w", "y"))
        x.fill_(float("nan"))
        run(x=x, w=w, y=y)
        torch.cuda.synchronize()
        expected = reference.convolution(p, w=host["w"], y=host["y"])
        err = reference.relative_error(x.float().cpu().numpy(), expected)
        assert err < 3e-2, (run.solver, seed, err)


def _transposed(torch: Any) -> Any:
    """A transposed convolution (the canonical problem swaps x and y)."""
    conv = miocore.ConvolutionDescriptor(pads=(1, 1), strides=(2, 2), mode="transpose")
    return miocore.ConvProblem(
        "forward",
        x=miocore.TensorDescriptor("float16", (2, 32, 7, 7), layout="NHWC"),
        w=miocore.TensorDescriptor("float16", (32, 24, 3, 3), layout="NHWC"),
        y=miocore.TensorDescriptor("float16", (2, 24, 13, 13), layout="NHWC"),
        conv=conv,
    )


@pytest.mark.parametrize("solver", [*sorted(GRAPHED), "cudnn", "transposed"])
def test_run_at_moves_to_new_addresses_and_replays_repeated_ones(torch: Any, solver: str) -> None:
    """``run_at`` (the torch front end's per-call path) on a framework's pattern: two sets of
    tensors called in turn (a network's layers of one shape, step after step), new values
    every call; the second sighting of an address triple records a graph that later calls
    replay. Every result is checked against the reference."""
    h = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    names = {s.name for s in h.registry.solvers}
    if solver == "transposed":
        p = _transposed(torch)
        chosen = h.find_solutions(p, find_mode="NORMAL")[0]
    else:
        p = miocore.ConvProblem.from_sizes(
            "forward", n=2, c=32, k=48, in_spatial=(12, 12), filter_spatial=(3, 3),
            pads=(1, 1), dtype="float16", layout="NHWC",
        )  # fmt: skip
        if solver == "cudnn":
            found = h.find_solutions(p, find_mode="NORMAL")
            cudnn = [s for s in found if s.solver.startswith("cudnn.")]
            if not cudnn:
                pytest.skip("miocore-cudnn is not installed or cuDNN does not load")
            chosen = cudnn[0]
        elif solver not in names:
            pytest.skip(f"{solver} is not installed")
        else:
            chosen = None
    run = h.prepare(chosen) if chosen is not None else h.prepare(p, solver)
    assert not run.ready
    host = reference.random_inputs(p, 0)
    sets = [[_device(torch, host[n], getattr(p, n)) for n in "xwy"] for _ in range(2)]
    for step in range(7):
        x, w, y = sets[step % 2]
        values = reference.random_inputs(p, step + 1)
        x.copy_(torch.from_numpy(values["x"].astype(np.float32)))
        y.fill_(float("nan"))
        if step == 0:
            run(x=x, w=w, y=y)  # the checked call
            assert run.ready
        else:
            run.run_at(x.data_ptr(), w.data_ptr(), y.data_ptr())
        torch.cuda.synchronize()
        expected = reference.convolution(p, x=values["x"], w=host["w"])
        err = reference.relative_error(y.float().cpu().numpy(), expected)
        assert err < (3e-2 if "winograd" in run.solver else 5e-3), (run.solver, step, err)
    graphed = GRAPHED.get(run.solver)
    if graphed == "blas":
        graphed = bool(h.backend.blas.records_in_graphs)
    if graphed == "single":
        graphed = h.backend.driver.graph_replay_beats_launch
    if run.solver.startswith("cudnn."):
        graphed = True  # one launch, but cuDNN's execute costs more host time than a replay
    if graphed is not None:
        assert (len(run._graphs) == 2) is graphed, (run.solver, len(run._graphs))


def test_run_at_needs_a_checked_call_first(torch: Any) -> None:
    h = miocore.Handle("cuda", stream=torch.cuda.current_stream())
    p = miocore.ConvProblem.from_sizes(
        "forward", n=1, c=8, k=8, in_spatial=(6, 6), filter_spatial=(1, 1), dtype="float16",
        layout="NHWC",
    )  # fmt: skip
    run = h.prepare(h.get_solutions(p)[0])
    with pytest.raises(miocore.InvalidArgumentError, match="run_at"):
        run.run_at(1, 2, 3)
