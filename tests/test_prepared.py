"""``Handle.prepare``: a solution made ready to run many times, checked against the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from fake_solvers import BrokenSolver, RecordedGraph, TimedSolver, buffers, small_problem

import miocore
from miocore import reference
from miocore.backends.cpu import CpuBackend

DIRECTIONS = ("forward", "backward_data", "backward_weights")


def _handle(*solvers: object) -> miocore.Handle:
    return miocore.Handle("cpu", registry=miocore.Registry.from_solvers(list(solvers)))


def _transposed_problem() -> miocore.ConvProblem:
    """A transposed convolution (its canonical problem swaps x and y)."""
    conv = miocore.ConvolutionDescriptor(pads=(1, 1), strides=(2, 2), mode="transpose")
    x = miocore.TensorDescriptor("float32", (2, 6, 5, 5), layout="NHWC")
    w = miocore.TensorDescriptor("float32", (6, 4, 3, 3), layout="NHWC")
    return miocore.ConvProblem("forward", x=x, w=w, y=conv.output_descriptor(x, w), conv=conv)


def _expected(problem: miocore.ConvProblem, arrays: dict[str, np.ndarray]) -> np.ndarray:
    out = problem.direction.output_tensor
    return reference.convolution(problem, **{k: v for k, v in arrays.items() if k != out})


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_prepared_run_computes_what_run_solution_does_on_fresh_buffers(
    direction: str, layout: str
) -> None:
    p = small_problem(direction, layout=layout)
    h = _handle(TimedSolver("test.exact", workspace=64))
    run = h.prepare(h.find_solutions(p, find_mode="NORMAL")[0])
    out = p.direction.output_tensor
    for seed in range(3):  # new buffers each call: every signature differs
        arrays = buffers(p, seed)
        expected = _expected(p, arrays)
        arrays[out][...] = np.nan
        run(**arrays)
        np.testing.assert_allclose(arrays[out], expected, rtol=1e-5, atol=1e-5)


def test_the_same_buffers_with_new_values_are_computed_again() -> None:
    p = small_problem("forward")
    h = _handle(TimedSolver("test.exact"))
    run = h.prepare(p, "test.exact")
    arrays = buffers(p, 0)
    run(**arrays)
    arrays["x"][...] = np.random.default_rng(7).uniform(-1, 1, arrays["x"].shape)
    expected = _expected(p, arrays)
    run(**arrays)  # same memory and layout: the cached arguments, the new values
    np.testing.assert_allclose(arrays["y"], expected, rtol=1e-5, atol=1e-5)


def test_arrays_of_another_layout_are_checked_in_full_and_refused() -> None:
    p = small_problem("forward")
    h = _handle(TimedSolver("test.exact"))
    run = h.prepare(p, "test.exact")
    run(**buffers(p, 0))
    wrong = buffers(small_problem("forward", layout="NHWC"), 0)
    with pytest.raises(miocore.InvalidArgumentError):
        run(**wrong)


def test_a_failing_solver_is_named_with_its_plugin() -> None:
    p = small_problem("forward")
    h = _handle(BrokenSolver("run"))
    run = h.prepare(p, "test.broken_run")
    with pytest.raises(miocore.SolverFailedError, match=r"test\.broken_run"):
        run(**buffers(p, 0))


def test_prepare_refuses_what_is_not_a_solution() -> None:
    h = _handle(TimedSolver("test.exact"))
    with pytest.raises(miocore.InvalidArgumentError, match="solution"):
        h.prepare("test.exact")  # type: ignore[arg-type]
    other = _handle(TimedSolver("test.other", applies_to="backward_data"))
    with pytest.raises(miocore.NotApplicableError):
        other.prepare(small_problem("forward"), "test.other")


def test_the_second_call_alike_is_recorded_and_later_ones_replay_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    captured: list[RecordedGraph] = []

    def capture(self: Any, run: Any, min_nodes: int = 2) -> RecordedGraph:
        captured.append(RecordedGraph(run))
        return captured[-1]

    monkeypatch.setattr(CpuBackend, "capture", capture, raising=False)
    p = small_problem("forward")
    solver = TimedSolver("test.exact")
    run = _handle(solver).prepare(p, "test.exact")
    arrays = buffers(p, 0)
    for _ in range(4):
        run(**arrays)
    assert len(captured) == 1 and captured[0].replays == 3  # recorded on the 2nd, replayed
    assert solver.runs == 4  # the direct call, then one run per replay
    arrays["x"][...] = np.random.default_rng(3).uniform(-1, 1, arrays["x"].shape)
    run(**arrays)  # same memory, new values: the replay reads them
    np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    other = buffers(p, 1)
    run(**other)  # another signature: checked in full, run directly, the graph dropped
    run(**other)
    assert len(captured) == 2 and captured[0].replays == 4


def test_while_the_caller_captures_the_launches_run_one_by_one_into_its_capture(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A graph launch inside someone else's stream capture is refused by CUDA: a prepared run
    whose graph says so runs its invoker directly, so the caller's capture records it."""
    captured: list[RecordedGraph] = []

    def capture(self: Any, run: Any, min_nodes: int = 2) -> RecordedGraph:
        captured.append(RecordedGraph(run))
        return captured[-1]

    monkeypatch.setattr(CpuBackend, "capture", capture, raising=False)
    p = small_problem("forward")
    solver = TimedSolver("test.exact")
    run = _handle(solver).prepare(p, "test.exact")
    arrays = buffers(p, 0)
    run(**arrays)
    run(**arrays)  # recorded and replayed
    captured[0].capturing = True
    arrays["x"][...] = np.random.default_rng(4).uniform(-1, 1, arrays["x"].shape)
    arrays["y"][...] = 0.0
    run(**arrays)
    assert captured[0].replays == 1 and solver.runs == 3
    np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    captured[0].capturing = False
    run(**arrays)
    assert captured[0].replays == 2 and len(captured) == 1


def test_a_call_that_cannot_be_recorded_runs_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    attempts: list[int] = []

    def capture(self: Any, run: Any, min_nodes: int = 2) -> None:
        attempts.append(1)
        return None  # one launch, or no graphs on this driver

    monkeypatch.setattr(CpuBackend, "capture", capture, raising=False)
    p = small_problem("backward_weights")
    solver = TimedSolver("test.exact")
    run = _handle(solver).prepare(p, "test.exact")
    arrays = buffers(p, 0)
    for _ in range(4):
        run(**arrays)
    assert attempts == [1] and solver.runs == 4
    np.testing.assert_allclose(arrays["w"], _expected(p, arrays), rtol=1e-5, atol=1e-5)


def test_new_memory_of_the_same_layout_is_not_checked_again(checked_fields: list[str]) -> None:
    p = small_problem("backward_data")
    run = _handle(TimedSolver("test.exact")).prepare(p, "test.exact")
    checks = checked_fields
    for seed in range(3):  # a framework's new tensors each step, same layout
        arrays = buffers(p, seed)
        arrays["x"][...] = np.nan
        run(**arrays)
        np.testing.assert_allclose(arrays["x"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    assert checks == ["x", "w", "y"]  # the first call only


def test_a_transposed_problem_runs_right_on_fresh_buffers() -> None:
    p = _transposed_problem()
    run = _handle(TimedSolver("test.exact")).prepare(p, "test.exact")
    for seed in range(3):
        arrays = buffers(p, seed)
        arrays["y"][...] = np.nan
        run(**arrays)
        np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("transposed", [False, True])
def test_run_views_computes_on_new_arrays_after_one_checked_call(transposed: bool) -> None:
    """``run_views`` (the torch front end's CPU path: the caller vouches for the layout) on
    new arrays each call, a transposed problem's x and y swapped for the invoker as usual."""
    p = _transposed_problem() if transposed else small_problem("backward_data", layout="NHWC")
    run = _handle(TimedSolver("test.exact")).prepare(p, "test.exact")
    out = p.direction.output_tensor
    with pytest.raises(miocore.InvalidArgumentError, match="run_views needs a checked call"):
        run.run_views(**buffers(p, 0))
    assert not run.checked
    for seed in range(4):
        arrays = buffers(p, seed)
        expected = _expected(p, arrays)
        arrays[out][...] = np.nan
        if seed == 0:
            run(**arrays)  # the checked call
            assert run.checked and not run.ready  # the CPU takes views, not addresses
        else:
            run.run_views(**arrays)
        np.testing.assert_allclose(arrays[out], expected, rtol=1e-5, atol=1e-5)


class _AddressedCpu:
    """A CPU handle's prepared run made to behave as a device backend's for ``run_at``: arrays
    are named by their data address, recordings go through a fake ``capture``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capture_result: str = "graph") -> None:
        self.arrays: dict[int, np.ndarray] = {}
        self.graphs: list[RecordedGraph] = []
        self.attempts = 0
        self.capturing = False
        fake = self

        def capture(backend: Any, run: Any, min_nodes: int = 2) -> RecordedGraph | None:
            fake.attempts += 1
            if capture_result != "graph":
                return None
            fake.graphs.append(RecordedGraph(run))
            return fake.graphs[-1]

        class Driver:
            def is_capturing(self, stream: Any) -> bool:
                return fake.capturing

        monkeypatch.setattr(CpuBackend, "capture", capture, raising=False)
        monkeypatch.setattr(CpuBackend, "driver", Driver(), raising=False)
        monkeypatch.setattr(CpuBackend, "stream_object", None, raising=False)

    def prepared(self, p: miocore.ConvProblem, solver: TimedSolver) -> Any:
        run = _handle(solver).prepare(p, solver.name)
        run._relocatable = True  # as a GPU backend's
        run._rebind = lambda view, array, ptr: self.arrays[ptr]
        return run

    def checked_forward(self) -> tuple[Any, TimedSolver, Any, dict[str, np.ndarray], list[int]]:
        """A forward problem's prepared run after its checked call, with the call's arrays
        and their addresses."""
        p = small_problem("forward")
        solver = TimedSolver("test.exact")
        run = self.prepared(p, solver)
        arrays = buffers(p, 0)
        run(**arrays)
        return p, solver, run, arrays, [self.address(arrays[n]) for n in "xwy"]

    def address(self, array: np.ndarray) -> int:
        ptr = int(array.__array_interface__["data"][0])
        self.arrays[ptr] = array
        return ptr


def test_run_at_records_each_address_triple_seen_twice_and_replays_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two sets of tensors called in turn (a network's layers of one shape, step after step):
    the second sighting of each triple records it, later calls replay; values change every
    call and every result is checked."""
    fake = _AddressedCpu(monkeypatch)
    p = small_problem("forward")
    solver = TimedSolver("test.exact")
    run = fake.prepared(p, solver)
    sets = [buffers(p, 0), buffers(p, 1)]
    run(**sets[0])  # the checked call
    assert run.ready
    rng = np.random.default_rng(5)
    for step in range(6):
        arrays = sets[step % 2]
        arrays["x"][...] = rng.uniform(-1, 1, arrays["x"].shape)
        arrays["y"][...] = np.nan
        run.run_at(*(fake.address(arrays[n]) for n in "xwy"))
        np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    # Set 0 was seen at steps 0, 2, 4 (recorded at 2); set 1 at 1, 3, 5 (recorded at 3).
    assert len(fake.graphs) == 2 and [g.replays for g in fake.graphs] == [2, 2]
    assert solver.runs == 1 + 6


def test_run_at_keeps_at_most_max_graphs_and_gives_up_on_refusals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from miocore.find import prepared as prepared_module

    monkeypatch.setattr(prepared_module, "MAX_GRAPHS", 2)
    fake = _AddressedCpu(monkeypatch)
    p = small_problem("backward_data")
    run = fake.prepared(p, TimedSolver("test.exact"))
    sets = [buffers(p, seed) for seed in range(3)]
    run(**sets[0])
    for arrays in sets * 2:  # each triple seen twice: three recordings
        run.run_at(*(fake.address(arrays[n]) for n in "xwy"))
    assert len(fake.graphs) == 3 and len(run._graphs) == 2  # the oldest went
    refusing = _AddressedCpu(monkeypatch, capture_result="none")
    run = refusing.prepared(p, TimedSolver("test.exact"))
    run(**sets[0])
    for arrays in sets * 3:
        arrays["x"][...] = np.nan
        run.run_at(*(refusing.address(arrays[n]) for n in "xwy"))
        np.testing.assert_allclose(arrays["x"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    assert refusing.attempts == prepared_module.MAX_GRAPH_FAILURES  # then no more tries


def test_run_at_stops_recording_when_addresses_never_settle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More address triples in turn than a run keeps graphs for: each would be recorded and
    dropped again before its next call (a recording per call). After ``MAX_EVICTIONS`` graphs
    dropped the run records no more; the graphs it kept still replay, every result right."""
    from miocore.find import prepared as prepared_module

    monkeypatch.setattr(prepared_module, "MAX_GRAPHS", 2)
    monkeypatch.setattr(prepared_module, "MAX_EVICTIONS", 2)
    fake = _AddressedCpu(monkeypatch)
    p = small_problem("forward")
    solver = TimedSolver("test.exact")
    run = fake.prepared(p, solver)
    sets = [buffers(p, seed) for seed in range(3)]
    run(**sets[0])
    rng = np.random.default_rng(9)
    for arrays in sets * 8:
        arrays["x"][...] = rng.uniform(-1, 1, arrays["x"].shape)
        arrays["y"][...] = np.nan
        run.run_at(*(fake.address(arrays[n]) for n in "xwy"))
        np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    # Recorded at the second sightings of a, b, c (c drops a), then a again (drops b): then no
    # more. Without the limit, 7 of these 24 calls record (each triple at every other sighting).
    assert len(fake.graphs) == 4 and len(run._graphs) == 2
    assert sum(g.replays for g in fake.graphs) > 0


def test_run_at_records_nothing_while_the_caller_captures(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Inside the caller's own stream capture a recording would end it: the invoker runs
    into the caller's capture instead, and recording resumes afterwards."""
    fake = _AddressedCpu(monkeypatch)
    _, solver, run, _, pointers = fake.checked_forward()
    fake.capturing = True
    for _ in range(3):
        run.run_at(*pointers)
    assert fake.attempts == 0 and solver.runs == 4
    fake.capturing = False
    run.run_at(*pointers)
    assert fake.attempts == 1 and fake.graphs[0].replays == 1


def test_run_at_hands_a_raw_address_invoker_the_canonical_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An invoker with ``at`` (cuDNN's) gets the addresses alone, x and y swapped for a
    transposed problem as the canonical problem names them."""
    fake = _AddressedCpu(monkeypatch, capture_result="none")
    p = _transposed_problem()
    run = fake.prepared(p, TimedSolver("test.exact"))
    run(**buffers(p, 0))
    calls: list[tuple[int, ...]] = []
    run._at = lambda owner, cx, cw, cy, ws: calls.append((cx, cw, cy))
    run.run_at(1, 2, 3)
    assert calls == [(3, 2, 1)]


def test_run_at_on_a_driver_without_graphs_runs_every_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A driver that records no graphs and cannot tell a capture (HIP's): the backend's
    capture answers None, run_at stops asking after the allowed refusals and runs each call."""
    from miocore.find import prepared as prepared_module

    fake = _AddressedCpu(monkeypatch, capture_result="none")
    monkeypatch.setattr(CpuBackend, "driver", object(), raising=False)  # no is_capturing
    p, solver, run, arrays, pointers = fake.checked_forward()
    for _ in range(5):
        arrays["y"][...] = np.nan
        run.run_at(*pointers)
        np.testing.assert_allclose(arrays["y"], _expected(p, arrays), rtol=1e-5, atol=1e-5)
    assert fake.attempts == prepared_module.MAX_GRAPH_FAILURES and solver.runs == 6
