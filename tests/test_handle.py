"""The handle's calls: immediate mode and its fallback chain, runs, Find 1.0, bad input."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
from fake_solvers import BrokenSolver, TimedSolver, buffers, small_problem

import miocore
from miocore import (
    Algorithm,
    ConvolutionDescriptor,
    ConvProblem,
    Handle,
    HeuristicRecord,
    InvalidArgumentError,
    NoApplicableSolverError,
    NotApplicableError,
    Registry,
    TensorDescriptor,
    UnknownSolverError,
    WorkspaceError,
    hookimpl,
    reference,
)

PROBLEM = small_problem()


def _check(problem: ConvProblem, arrays: dict, tol: float = 1e-5) -> None:
    out = problem.direction.output_tensor
    expected = reference.convolution(problem, **{k: v for k, v in arrays.items() if k != out})
    assert reference.relative_error(arrays[out], expected) < tol


def test_immediate_fallback_ranks_by_wti_with_gemm_last() -> None:
    reg = Registry.from_solvers(
        [
            TimedSolver("test.unknown_direct"),
            TimedSolver("test.gemm_unknown", algorithm=Algorithm.GEMM),
            TimedSolver("test.good", wti=0.8),
            TimedSolver("test.poor", wti=0.05),
        ]
    )
    sols = Handle("cpu", registry=reg).get_solutions(PROBLEM)
    assert [s.solver for s in sols] == [
        "test.good",
        "test.poor",
        "test.gemm_unknown",
        "test.unknown_direct",
    ]
    assert [s.source for s in sols] == ["wti", "wti", "fallback", "fallback"]
    assert all(s.is_estimate for s in sols)
    assert sols[0].time_ms < sols[1].time_ms  # estimates follow the WTI


@pytest.mark.parametrize(("times_a", "first"), [(4.0, "test.a"), (2.0, "test.b")])
def test_a_solver_the_heuristic_does_not_know_goes_by_its_doubted_estimate(
    times_a: float, first: str
) -> None:
    """The heuristic ranks what it knows (test.b); test.a, which it does not know, is placed
    among that ranking as if NEWCOMER_DOUBT times slower than its WTI estimate: ahead of a
    heuristic estimate four times its own, behind one twice it. Each keeps its own time."""
    from miocore.find.ranker import NEWCOMER_DOUBT

    assert 2.0 < NEWCOMER_DOUBT < 4.0
    seen = []

    def rank(ctx, problem, names):  # type: ignore[no-untyped-def]
        seen.append(sorted(names))
        return [("test.b", times_a * ctx.ideal_ms(problem) / 0.9)]

    @hookimpl
    def miocore_heuristics():  # type: ignore[no-untyped-def]
        yield HeuristicRecord(name="learned", is_applicable=lambda ctx, p: True, rank=rank)

    @hookimpl
    def miocore_solvers():  # type: ignore[no-untyped-def]
        yield miocore.SolverRecord(solver=TimedSolver("test.a", wti=0.9))
        yield miocore.SolverRecord(solver=TimedSolver("test.b", wti=0.1))

    plugin = types.SimpleNamespace(
        miocore_heuristics=miocore_heuristics, miocore_solvers=miocore_solvers
    )
    reg = Registry.from_plugins([("h", plugin, "miocore-h", "1")])
    h = Handle("cpu", registry=reg)
    sols = h.get_solutions(PROBLEM)
    assert sols[0].solver == first and seen == [["test.a", "test.b"]]
    by_name = {s.solver: s for s in sols}
    assert (by_name["test.a"].source, by_name["test.b"].source) == ("wti", "heuristic")
    a_ms = h.context.ideal_ms(PROBLEM.canonical) / 0.9
    assert by_name["test.a"].time_ms == pytest.approx(a_ms)
    assert by_name["test.b"].time_ms == pytest.approx(times_a * a_ms)


def test_merging_keeps_the_heuristic_order_and_places_others_by_time() -> None:
    """A heuristic may rank by more than its time (b before a, though a's estimate is
    lower): its order stays, and an unknown solver goes before the first entry from which on
    the heuristic expects something slower than it."""
    from miocore.find.ranker import merge_by_time

    def sol(name: str, ms: float) -> miocore.Solution:
        return miocore.Solution(
            problem=PROBLEM, solver=name, solver_id=0, algorithm=miocore.Algorithm.DIRECT,
            time_ms=ms, workspace_size=0, source="heuristic", is_estimate=True,
        )  # fmt: skip

    ranked = [sol("b", 2.0), sol("a", 1.0), sol("c", 5.0)]
    order = lambda others: [s.solver for s in merge_by_time(ranked, others, doubt=1.0)]  # noqa: E731
    assert order([sol("x", 1.5)]) == ["x", "b", "a", "c"]
    assert order([sol("x", 3.0)]) == ["b", "a", "x", "c"]
    assert order([sol("x", 2.0)]) == ["b", "a", "x", "c"]  # a tie: the heuristic's first
    assert order([sol("y", 9.0), sol("x", 0.5)]) == ["x", "b", "a", "c", "y"]
    assert [s.solver for s in merge_by_time(ranked, [sol("x", 1.5)], doubt=2.0)] == [
        "b", "a", "x", "c"
    ]  # fmt: skip


def test_immediate_mode_uses_recorded_solutions_first() -> None:
    reg = Registry.from_solvers(
        [
            TimedSolver("test.a", wti=0.9, delay_s=0.004),
            TimedSolver("test.b", wti=0.1, dynamic=True),
        ]
    )
    h = Handle("cpu", registry=reg)
    h.find_solutions(PROBLEM)  # DYNAMIC_HYBRID: measures test.b only
    sols = h.get_solutions(PROBLEM)
    assert [(s.solver, s.source) for s in sols] == [("test.b", "find-db"), ("test.a", "wti")]
    assert h.get_solution_count(PROBLEM) == 2


def test_compile_and_immediate_run_all_directions_and_cache_invoker() -> None:
    solver = TimedSolver("test.a", workspace=256)
    h = Handle("cpu", registry=Registry.from_solvers([solver]))
    for direction in ("forward", "backward_data", "backward_weights"):
        p = small_problem(direction, layout="NHWC", groups=2)
        sol = h.compile_solution(p, "test.a")
        assert sol.solver == "test.a" and sol.workspace_size == 256
        assert h.get_solution_workspace_size(p, "test.a") == 256
        arrays = buffers(p)
        before = len(h.invoker_cache)
        h.immediate(p, "test.a", **arrays)
        h.immediate(p, miocore.solver.registry.solver_id("test.a"), **arrays)
        assert len(h.invoker_cache) == before
        _check(p, arrays)


def test_runs_look_the_invoker_up_again_once_the_cache_changes() -> None:
    # run_solution and immediate keep what they looked up per solution (or problem and
    # solver) only while the invoker cache is unchanged: a cleared or trimmed cache builds
    # again instead of running an invoker it no longer holds.
    h = Handle("cpu", registry=Registry.from_solvers([TimedSolver("test.a")]))
    sol = h.compile_solution(PROBLEM, "test.a")
    arrays = buffers(PROBLEM)
    for run in (
        lambda: h.run_solution(sol, **arrays),
        lambda: h.immediate(PROBLEM, "test.a", **arrays),
    ):
        run()
        run()
        assert len(h.invoker_cache) == 1
        h.invoker_cache.clear()
        run()
        assert len(h.invoker_cache) == 1  # built again and cached
        h.invoker_cache.discard(PROBLEM.network_config, "test.a")
        run()
        assert len(h.invoker_cache) == 1
        _check(PROBLEM, arrays)
    with pytest.raises(UnknownSolverError):  # a solver that names nothing: still refused
        h.immediate(PROBLEM, ["test.a"], **arrays)  # type: ignore[arg-type]


def test_solution_runs_in_another_handle_and_process(tmp_path: Path) -> None:
    reg = Registry.from_solvers([TimedSolver("test.a")])
    sols = Handle("cpu", registry=reg).find_solutions(PROBLEM, find_mode="NORMAL")
    other = Handle("cpu", registry=reg)  # a fresh handle: empty invoker cache
    arrays = buffers(PROBLEM)
    other.run_solution(sols[0], **arrays)
    _check(PROBLEM, arrays)
    # Find 1.0 run call in a process that never ran find: no "No invoker was registered".
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
        import numpy as np, miocore
        from fake_solvers import TimedSolver, small_problem, buffers
        h = miocore.Handle("cpu", registry=miocore.Registry.from_solvers([TimedSolver("test.a")]))
        p = small_problem(); a = buffers(p)
        h.convolution(p, "direct", **a)
        ref = miocore.reference.convolution(p, x=a["x"], w=a["w"])
        print(miocore.reference.relative_error(a["y"], ref))
    """)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert float(done.stdout) < 1e-5


def test_find_1_0_and_convolution_with_alpha_beta() -> None:
    reg = Registry.from_solvers(
        [
            TimedSolver("test.d", delay_s=0.001),
            TimedSolver("test.g", algorithm=Algorithm.GEMM, delay_s=0.004),
        ]
    )
    h = Handle("cpu", registry=reg)
    arrays = buffers(PROBLEM)
    perf = h.find_convolution_algorithm(PROBLEM, **arrays, request_algo_count=4)
    assert [p.algorithm for p in perf] == [Algorithm.DIRECT, Algorithm.GEMM]
    assert perf[0].solver == "test.d" and perf[0].time_ms < perf[1].time_ms
    assert len(h.find_convolution_algorithm(PROBLEM, **arrays, request_algo_count=1)) == 1
    conv = reference.convolution(PROBLEM, x=arrays["x"], w=arrays["w"])
    y0 = np.random.default_rng(9).uniform(-1, 1, PROBLEM.y.lengths).astype(np.float32)
    arrays["y"][...] = y0
    h.convolution(PROBLEM, Algorithm.GEMM, **arrays, alpha=2.0, beta=0.5)
    np.testing.assert_allclose(arrays["y"], 2.0 * conv + 0.5 * y0, rtol=1e-5, atol=1e-5)
    with pytest.raises(NoApplicableSolverError, match="fft"):
        h.convolution(PROBLEM, "fft", **arrays)
    with pytest.raises(InvalidArgumentError) as info:
        h.convolution(PROBLEM, "direct", **arrays, beta=float("nan"))
    assert info.value.field == "beta"


def test_workspace_limit_and_caller_workspace() -> None:
    h = Handle("cpu", registry=Registry.from_solvers([TimedSolver("test.ws", workspace=1000)]))
    with pytest.raises(NoApplicableSolverError, match="limit of 999 B"):
        h.find_solutions(PROBLEM, workspace_limit=999)
    arrays = buffers(PROBLEM)
    with pytest.raises(WorkspaceError) as info:
        h.immediate(PROBLEM, "test.ws", **arrays, workspace=np.empty(999, np.uint8))
    assert info.value.field == "workspace.nbytes" and info.value.value == 999
    h.immediate(PROBLEM, "test.ws", **arrays, workspace=np.empty(1000, np.uint8))
    h.immediate(PROBLEM, "test.ws", **arrays)  # None: the handle allocates
    _check(PROBLEM, arrays)


@pytest.mark.parametrize(
    ("name", "bad", "field"),
    [
        ("x", np.zeros((2, 4, 6, 5), np.float32), "x.shape"),
        ("w", np.zeros((4, 4, 3, 3), np.float16), "w.dtype"),
        ("y", np.zeros((2, 6, 6, 4), np.float32).transpose(0, 3, 1, 2), "y.strides"),
        ("x", [[1.0]], "x"),
    ],
)
def test_bad_arrays_name_the_field_and_write_nothing(name: str, bad: object, field: str) -> None:
    h = Handle("cpu", registry=Registry.from_solvers([TimedSolver("test.a")]))
    arrays = buffers(PROBLEM)
    arrays[name] = bad
    before = arrays["y"].copy() if name != "y" else None
    with pytest.raises(InvalidArgumentError) as info:
        h.immediate(PROBLEM, "test.a", **arrays)
    assert info.value.field == field
    if before is not None:
        np.testing.assert_array_equal(arrays["y"], before)


def test_failing_solvers_are_reported_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    reg = Registry.from_solvers(
        [
            BrokenSolver("is_applicable"),
            BrokenSolver("get_solution"),
            BrokenSolver("run"),
            TimedSolver("test.ok"),
        ]
    )
    sols = Handle("cpu", registry=reg).find_solutions(PROBLEM, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.ok"]
    failed = sols.report.failed
    assert set(failed) == {
        "test.broken_is_applicable",
        "test.broken_get_solution",
        "test.broken_run",
    }
    assert "boom in run" in failed["test.broken_run"]
    assert "test.broken_get_solution" in caplog.text


def test_only_solver_and_algorithm_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry.from_solvers(
        [TimedSolver("test.d"), TimedSolver("test.g", algorithm=Algorithm.GEMM)]
    )
    h = Handle("cpu", registry=reg)
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", "test.g")
    assert [s.solver for s in h.get_solutions(PROBLEM)] == ["test.g"]
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", str(miocore.solver.registry.solver_id("test.d")))
    assert [s.solver for s in h.get_solutions(PROBLEM)] == ["test.d"]
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", "test.nope")
    with pytest.raises(UnknownSolverError) as info:
        h.get_solutions(PROBLEM)
    assert info.value.field == "MIOCORE_FIND_ONLY_SOLVER"
    monkeypatch.delenv("MIOCORE_FIND_ONLY_SOLVER")
    monkeypatch.setenv("MIOCORE_DEBUG_CONV_GEMM", "0")
    sols = h.get_solutions(PROBLEM)
    assert [s.solver for s in sols] == [
        "test.d"
    ] and "MIOCORE_DEBUG_CONV_GEMM" in sols.report.skipped["test.g"]
    monkeypatch.setenv("MIOCORE_DEBUG_CONV_DIRECT", "maybe")
    with pytest.raises(miocore.InvalidEnvironmentError, match="MIOCORE_DEBUG_CONV_DIRECT"):
        h.get_solutions(PROBLEM)


def test_no_plugin_installed_is_a_clear_error() -> None:
    with pytest.raises(NoApplicableSolverError, match="no solver plugin is installed"):
        Handle("cpu", registry=Registry.from_solvers([])).find_solutions(PROBLEM)


def test_not_applicable_solver_names_the_reason() -> None:
    h = Handle("cpu", registry=Registry.from_solvers([TimedSolver("test.f", applies_to="forward")]))
    with pytest.raises(NotApplicableError, match="only forward"):
        h.compile_solution(small_problem("backward_data"), "test.f")
    with pytest.raises(NoApplicableSolverError, match=r"test\.f: only forward"):
        h.find_solutions(small_problem("backward_weights"))


def test_transposed_problem_runs_through_the_handle() -> None:
    x = TensorDescriptor("float32", (2, 6, 4, 4), layout="NHWC")
    w = TensorDescriptor("float32", (6, 2, 3, 3), layout="NHWC")
    conv = ConvolutionDescriptor(
        pads=(1, 1), strides=(2, 2), mode="transpose", output_pads=(1, 1), groups=3
    )
    p = ConvProblem("forward", x=x, w=w, y=conv.output_descriptor(x, w), conv=conv)
    h = Handle("cpu", registry=Registry.from_solvers([TimedSolver("test.a")]))
    sols = h.find_solutions(p, find_mode="NORMAL")
    arrays = buffers(p)
    h.run_solution(sols[0], **arrays)
    _check(p, arrays)


def test_bad_call_arguments() -> None:
    h = Handle("cpu", registry=Registry.from_solvers([TimedSolver("test.a")]))
    for kwargs, field in (
        ({"sort_by": "speed"}, "sort_by"),
        ({"max_results": 0}, "max_results"),
        ({"workspace_limit": -1}, "workspace_limit"),
        ({"find_mode": 4}, "find_mode"),
    ):
        with pytest.raises(miocore.MiocoreError) as info:
            h.find_solutions(PROBLEM, **kwargs)
        assert info.value.field == field
    with pytest.raises(InvalidArgumentError, match="problem"):
        h.get_solutions("1-2-3")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError) as info:
        Handle("tpu")
    assert info.value.field == "device"
    with pytest.raises(miocore.BackendUnavailableError, match=r"miocore\[cuda\]"):
        Handle("cuda:0")


def test_sort_by_workspace_and_max_results() -> None:
    reg = Registry.from_solvers(
        [
            TimedSolver("test.quick_big", workspace=512),
            TimedSolver("test.slow_small", delay_s=0.005),
        ]
    )
    sols = Handle("cpu", registry=reg).find_solutions(
        PROBLEM, find_mode="NORMAL", sort_by="workspace"
    )
    assert [s.solver for s in sols] == ["test.slow_small", "test.quick_big"]
    sols = Handle("cpu", registry=reg).find_solutions(PROBLEM, find_mode="NORMAL", max_results=1)
    assert [s.solver for s in sols] == ["test.quick_big"]
    assert sols[0].timing is not None and sols[0].timing.count >= 3
    assert sols[0].timing.min_ms <= sols[0].time_ms <= sols[0].timing.max_ms


def test_find_prunes_candidates_whose_wti_says_they_cannot_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    quick = TimedSolver("test.quick", wti=0.9)
    hopeless = TimedSolver("test.hopeless", wti=1e-6)
    h = Handle("cpu", registry=Registry.from_solvers([quick, hopeless]))
    sols = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert [s.solver for s in sols] == ["test.quick"] and hopeless.runs == 0
    assert sols.report.skipped["test.hopeless"].startswith("pruned: its WTI predicts")
    monkeypatch.setenv("MIOCORE_FIND_PRUNE_FACTOR", "0")
    sols = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert {s.solver for s in sols} == {"test.quick", "test.hopeless"}
    monkeypatch.setenv("MIOCORE_FIND_PRUNE_FACTOR", "0.5")
    with pytest.raises(miocore.InvalidEnvironmentError, match="MIOCORE_FIND_PRUNE_FACTOR"):
        h.find_solutions(PROBLEM, find_mode="NORMAL")


def test_immediate_mode_wraps_a_solvers_exception_naming_its_plugin() -> None:
    reg = Registry.from_solvers(
        [BrokenSolver("is_applicable"), BrokenSolver("get_solution"), BrokenSolver("run")],
        distribution="miocore-broken",
        version="2.0",
    )
    h = Handle("cpu", registry=reg)
    arrays = buffers(PROBLEM)
    for stage in ("is_applicable", "get_solution", "run"):
        with pytest.raises(miocore.SolverFailedError) as info:
            h.immediate(PROBLEM, f"test.broken_{stage}", **arrays)
        assert info.value.stage == stage and "miocore-broken 2.0" in str(info.value)
        assert isinstance(info.value.cause, RuntimeError)


def test_core_environment_without_plugins_says_so() -> None:
    """In the ``core`` tox environment nothing is installed: discovery finds no solver."""
    import os

    if os.environ.get("MIOCORE_EXPECT_PLUGINS") != "":
        pytest.skip("only in the core environment (MIOCORE_EXPECT_PLUGINS set to nothing)")
    miocore.solver.registry.reset_default_registry()
    assert miocore.solvers() == []
    with pytest.raises(NoApplicableSolverError, match="no solver plugin is installed"):
        Handle("cpu").find_solutions(PROBLEM)


def test_cpu_identity_is_the_machine_platform_names() -> None:
    """The CPU's identity (database file names) reads the machine without importing
    ``platform``; it must name what ``platform.machine()`` names."""
    import os
    import platform

    from miocore.backends.cpu import cpu_device_info

    info = cpu_device_info()
    machine = platform.machine() or "unknown"
    assert info.arch == machine
    assert info.identity == f"cpu_{machine}_{os.cpu_count() or 1}".replace("-", "_").lower()
