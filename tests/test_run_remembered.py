"""``run_solution`` and ``immediate`` remember each invoker's last call on device backends: a
call whose arrays have the same signature skips the checks (miocore.find.runner). Run here on
the CPU backend with remembering switched on, as a device backend has it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fake_solvers import RecordedGraph, TimedSolver, buffers, small_problem

import miocore
from miocore import reference
from miocore.backends.cpu import CpuBackend


def _handle(*solvers: TimedSolver) -> miocore.Handle:
    h = miocore.Handle("cpu", registry=miocore.Registry.from_solvers(list(solvers)))
    h.runner._remember = True  # as on a GPU backend
    return h


def _expected(p: miocore.ConvProblem, arrays: dict[str, np.ndarray]) -> np.ndarray:
    out = p.direction.output_tensor
    return reference.convolution(p, **{k: v for k, v in arrays.items() if k != out})


def test_a_repeated_call_skips_the_checks_and_reads_the_new_values(
    checked_fields: list[str],
) -> None:
    p = small_problem("forward")
    h = _handle(TimedSolver("test.exact", workspace=64))
    sol = h.find_solutions(p, find_mode="NORMAL")[0]
    arrays = buffers(p, 0)
    ws = np.zeros(64, dtype=np.uint8)
    checked_fields.clear()
    rng = np.random.default_rng(1)
    for _ in range(4):  # the same memory, new values each call
        arrays["x"][...] = rng.uniform(-1, 1, arrays["x"].shape)
        arrays["y"][...] = np.nan
        h.run_solution(sol, workspace=ws, **arrays)
        np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    assert checked_fields == ["x", "w", "y"]  # the first call only
    other = buffers(p, 1)  # new memory: checked again, then remembered in its turn
    h.run_solution(sol, workspace=ws, **other)
    h.run_solution(sol, workspace=ws, **other)
    np.testing.assert_allclose(other["y"], _expected(p, other), rtol=1e-5, atol=1e-5)
    assert checked_fields == ["x", "w", "y"] * 2


def test_immediate_and_a_made_workspace_are_remembered_too(
    checked_fields: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[int] = []
    real = CpuBackend.allocate_workspace

    def allocate(self: CpuBackend, nbytes: int) -> Any:
        made.append(nbytes)
        return real(self, nbytes)

    monkeypatch.setattr(CpuBackend, "allocate_workspace", allocate)
    p = small_problem("backward_weights")
    h = _handle(TimedSolver("test.exact", workspace=128))
    arrays = buffers(p, 2)
    for _ in range(3):  # no workspace from the caller: the one made first serves the rest
        arrays["w"][...] = np.nan
        h.immediate(p, "test.exact", **arrays)
        np.testing.assert_allclose(arrays["w"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    assert made.count(128) == 1 and checked_fields.count("x") == 1


def test_what_is_not_remembered_is_checked_every_call(checked_fields: list[str]) -> None:
    p = small_problem("forward")
    h = _handle(TimedSolver("test.exact"))
    sol = h.find_solutions(p, find_mode="NORMAL")[0]
    arrays = buffers(p, 3)
    checked_fields.clear()
    for _ in range(2):  # alpha/beta blend: never remembered
        h.run_solution(sol, **arrays)
        h.runner.run(
            sol.problem, h.runner.cached(p, sol.solver, sol.perf_config), alpha=2.0, beta=0.0,
            workspace=None, **arrays,
        )  # fmt: skip
    assert checked_fields.count("x") == 3  # the first plain call, then each blended one
    twin = small_problem("forward")  # equal, but another object: checked in full
    assert twin == p and twin is not p
    h.immediate(twin, "test.exact", **arrays)
    assert checked_fields.count("x") == 4
    bad = buffers(p, 4)
    bad["y"] = bad["y"][..., ::2]  # another layout: refused as ever
    with pytest.raises(miocore.InvalidArgumentError, match="y"):
        h.run_solution(sol, **bad)


def test_the_cpu_backend_does_not_remember_by_default() -> None:
    """On the CPU the remembered views would hold the caller's arrays alive."""
    h = miocore.Handle("cpu", registry=miocore.Registry.from_solvers([TimedSolver("test.exact")]))
    assert h.runner._remember is False


def test_the_second_call_alike_is_recorded_and_later_calls_replay_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graphs: list[RecordedGraph] = []
    asked: list[int] = []

    def capture(self: Any, run: Any, min_nodes: int = 2) -> RecordedGraph:
        asked.append(min_nodes)
        graphs.append(RecordedGraph(run))
        return graphs[-1]

    monkeypatch.setattr(CpuBackend, "capture", capture, raising=False)
    p = small_problem("forward")
    solver = TimedSolver("test.exact")
    h = _handle(solver)
    sol = h.find_solutions(p, find_mode="NORMAL")[0]
    arrays = buffers(p, 5)
    rng = np.random.default_rng(6)
    runs_before = solver.runs
    for _ in range(4):  # the same memory, new values each call: every replay reads them
        arrays["x"][...] = rng.uniform(-1, 1, arrays["x"].shape)
        arrays["y"][...] = np.nan
        h.run_solution(sol, **arrays)
        np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    assert len(graphs) == 1 and graphs[0].replays == 3  # recorded on the 2nd call, replayed
    assert solver.runs - runs_before == 4 and asked == [2]  # no driver: two launches at least
    other = buffers(p, 7)  # new memory: a new remembered call, recorded in its turn
    for _ in range(3):
        h.immediate(p, "test.exact", **other)
    np.testing.assert_allclose(other["y"], _expected(p, other), rtol=1e-5, atol=1e-5)
    assert len(graphs) == 2 and graphs[1].replays == 2 and graphs[0].replays == 3


def test_torch_tensors_are_told_apart_by_address_layout_and_dtype(
    checked_fields: list[str],
) -> None:
    """Three torch tensors are read into one flat signature: a call differing from the
    remembered one in any array's memory, shape, strides or dtype, or in its workspace, is
    checked again (or refused), even through the same tensor objects."""
    torch = pytest.importorskip("torch")
    p = small_problem("forward")
    h = _handle(TimedSolver("test.exact", workspace=64))
    sol = h.find_solutions(p, find_mode="NORMAL")[0]
    arrays = {k: torch.from_numpy(v.copy()) for k, v in buffers(p, 8).items()}
    ws = np.zeros(64, dtype=np.uint8)
    checked_fields.clear()
    for _ in range(3):
        arrays["y"].fill_(float("nan"))
        h.run_solution(sol, workspace=ws, **arrays)
        expected = _expected(p, {k: v.numpy() for k, v in arrays.items()})
        np.testing.assert_allclose(arrays["y"].numpy(), expected, rtol=1e-5, atol=1e-5)
    assert checked_fields == ["x", "w", "y"]  # the first call only
    other_ws = np.zeros(64, dtype=np.uint8)
    h.run_solution(sol, workspace=other_ws, **arrays)  # another workspace: checked again
    assert checked_fields == ["x", "w", "y"] * 2
    moved = dict(arrays, w=arrays["w"].clone())  # w elsewhere, the same layout
    h.run_solution(sol, workspace=other_ws, **moved)
    assert checked_fields == ["x", "w", "y"] * 3
    as_ints = dict(moved, y=moved["y"].view(torch.int32))  # same memory and layout, new dtype
    with pytest.raises(miocore.InvalidArgumentError, match="y"):
        h.run_solution(sol, workspace=other_ws, **as_ints)
    x = moved["x"]
    _, c, hh, ww = x.shape
    x.as_strided_(x.shape, (c * hh * ww, 1, ww * c, c))  # same object and memory, channels last
    with pytest.raises(miocore.InvalidArgumentError, match="x"):
        h.run_solution(sol, workspace=other_ws, **moved)
