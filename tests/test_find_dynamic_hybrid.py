"""DYNAMIC_HYBRID on a miss: solvers that need no compile for the problem, and those predicted
to beat them (docs/find-modes.md)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_solvers import TimedSolver, TunableTimedSolver, small_problem

import miocore
from miocore import Handle, KernelInfo, Registry
from miocore.backends.cpu import CpuBackend
from miocore.find.dynamic import COMPILE_MARGIN
from miocore.problem import ConvProblem
from miocore.solver import Algorithm, ConvSolution, ExecutionContext, PerfConfig

PROBLEM = small_problem()


class KernelSolver(TimedSolver):
    """A non-dynamic solver with one device kernel (compiled per filter geometry)."""

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        plain = super().get_solution(ctx, problem, perf_config)
        return _with_kernel(plain, f"-DFILTER={problem.filter_spatial}")


def _with_kernel(plain: ConvSolution, option: str) -> ConvSolution:
    """``plain`` with one device kernel of its solver's source, built with ``option``."""
    kernel = KernelInfo(
        source=f"{plain.solver}.cu",
        kernel_name="conv",
        options=(option,),
        grid=(1, 1, 1),
        block=(64, 1, 1),
    )
    return ConvSolution(
        solver=plain.solver,
        workspace_size=plain.workspace_size,
        invoker_factory=plain.invoker_factory,
        kernels=(kernel,),
    )


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """A CPU backend that pretends to compile kernels; ``built`` holds the sources in its
    binary cache, and every compile adds to it."""
    built: set[str] = set()
    compiled: list[str] = []

    def compile(self: CpuBackend, kernels: tuple[Any, ...]) -> tuple[Any, ...]:
        for k in kernels:
            compiled.append(k.source)
            built.add(k.source)
        return tuple(kernels)

    monkeypatch.setattr(CpuBackend, "compile", compile, raising=True)
    monkeypatch.setattr(
        CpuBackend,
        "binaries_ready",
        lambda self, kernels: all(k.source in built for k in kernels),
        raising=False,
    )
    return built


def _handle(*solvers: TimedSolver) -> Handle:
    return Handle("cpu", registry=Registry.from_solvers(list(solvers)))


def test_a_solver_whose_kernels_are_built_is_measured_though_not_dynamic(
    built: set[str],
) -> None:
    dynamic = TimedSolver("test.dynamic", delay_s=0.003, dynamic=True, wti=0.5)
    cached = KernelSolver("test.cached", delay_s=0.001, wti=0.01)  # predicted slower
    built.add("test.cached.cu")
    sols = _handle(dynamic, cached).find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert cached.runs > 0 and dynamic.runs > 0
    assert sols[0].solver == "test.cached" and sols[0].source == "measured"


def test_a_solver_needing_a_compile_is_measured_when_predicted_faster(built: set[str]) -> None:
    dynamic = TimedSolver("test.dynamic", delay_s=0.003, dynamic=True, wti=0.1)
    fast = KernelSolver("test.fast", delay_s=0.001, wti=0.9, algorithm=Algorithm.IMPLICIT_GEMM)
    sols = _handle(dynamic, fast).find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert fast.runs > 0 and "test.fast.cu" in built  # compiled, then measured
    assert sols[0].solver == "test.fast"
    assert "test.fast" not in sols.report.skipped


def test_a_solver_needing_a_compile_is_left_out_when_a_ready_one_is_predicted_faster(
    built: set[str],
) -> None:
    dynamic = TimedSolver("test.dynamic", delay_s=0.003, dynamic=True, wti=0.9)
    slow = KernelSolver("test.slow", delay_s=0.001, wti=0.1)
    sols = _handle(dynamic, slow).find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert slow.runs == 0 and "test.slow.cu" not in built  # never compiled
    assert [s.solver for s in sols] == ["test.dynamic"]
    assert "predicted at least as fast" in sols.report.skipped["test.slow"]


def test_normal_find_measures_every_solver_whatever_it_needs(built: set[str]) -> None:
    dynamic = TimedSolver("test.dynamic", delay_s=0.003, dynamic=True, wti=0.9)
    slow = KernelSolver("test.slow", delay_s=0.001, wti=0.1)
    sols = _handle(dynamic, slow).find_solutions(PROBLEM, find_mode="NORMAL")
    assert slow.runs > 0 and sols[0].solver == "test.slow"


class LibraryCompiled(TimedSolver):
    """Dynamic, but its library compiles a kernel for each problem (``compiles_for``)."""

    def compiles_for(self, ctx: ExecutionContext, problem: ConvProblem) -> bool:
        return True


def test_a_library_compiling_per_problem_is_measured_only_when_predicted_to_win() -> None:
    ready = TimedSolver("test.ready", delay_s=0.003, dynamic=True, wti=0.5)
    behind = LibraryCompiled("test.behind", delay_s=0.001, dynamic=True, wti=0.1)
    sols = _handle(ready, behind).find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert behind.runs == 0 and [s.solver for s in sols] == ["test.ready"]
    assert "needs a compile" in sols.report.skipped["test.behind"]
    ahead = LibraryCompiled("test.ahead", delay_s=0.001, dynamic=True, wti=0.9)
    other = small_problem("backward_data")  # the first find's record would answer PROBLEM
    sols = _handle(ready, ahead).find_solutions(other, find_mode="DYNAMIC_HYBRID")
    assert ahead.runs > 0 and sols[0].solver == "test.ahead"
    # NORMAL find measures it whatever it costs.
    behind = LibraryCompiled("test.behind", delay_s=0.001, dynamic=True, wti=0.1)
    sols = _handle(ready, behind).find_solutions(PROBLEM, find_mode="NORMAL")  # not a hit
    assert behind.runs > 0 and sols[0].solver == "test.behind"


def _with_heuristic(estimates: dict[str, float], *solvers: TimedSolver) -> Handle:
    """A handle whose registry has ``solvers`` and a learned heuristic answering
    ``estimates`` (ms) for the names it knows."""
    import types

    import miocore
    from miocore import HeuristicRecord, hookimpl

    def rank(ctx: Any, problem: Any, names: list[str]) -> list[tuple[str, float]]:
        return sorted(((n, estimates[n]) for n in names if n in estimates), key=lambda t: t[1])

    @hookimpl
    def miocore_heuristics() -> Any:
        yield HeuristicRecord(name="learned", is_applicable=lambda ctx, p: True, rank=rank)

    @hookimpl
    def miocore_solvers() -> Any:
        for solver in solvers:
            yield miocore.SolverRecord(solver=solver)

    plugin = types.SimpleNamespace(
        miocore_heuristics=miocore_heuristics, miocore_solvers=miocore_solvers
    )
    return Handle("cpu", registry=Registry.from_plugins([("h", plugin, "miocore-h", "1")]))


def test_the_learned_estimate_decides_for_a_library_compiling_per_problem() -> None:
    # Its WTI says it loses, the model says it wins: measured (and it does win).
    ready = TimedSolver("test.ready", delay_s=0.003, dynamic=True, wti=0.5)
    foreseen = LibraryCompiled("test.foreseen", delay_s=0.001, dynamic=True, wti=0.01)
    h = _with_heuristic({"test.ready": 1.0, "test.foreseen": 0.2}, ready, foreseen)
    sols = h.find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert foreseen.runs > 0 and sols[0].solver == "test.foreseen"
    # Its WTI says it wins, the model says it loses by more than the margin: left out.
    from miocore.find.dynamic import COMPILE_MARGIN

    ready = TimedSolver("test.ready", delay_s=0.003, dynamic=True, wti=0.5)
    doubted = LibraryCompiled("test.doubted", delay_s=0.001, dynamic=True, wti=0.9)
    estimate = COMPILE_MARGIN * 1.1
    h = _with_heuristic({"test.ready": 1.0, "test.doubted": estimate}, ready, doubted)
    sols = h.find_solutions(small_problem("backward_data"), find_mode="DYNAMIC_HYBRID")
    assert doubted.runs == 0 and "needs a compile" in sols.report.skipped["test.doubted"]
    # The model says it loses, but within the margin of its error: measured (and it wins).
    ready = TimedSolver("test.ready", delay_s=0.003, dynamic=True, wti=0.5)
    close = LibraryCompiled("test.close", delay_s=0.001, dynamic=True, wti=0.01)
    estimate = (1 + COMPILE_MARGIN) / 2
    h = _with_heuristic({"test.ready": 1.0, "test.close": estimate}, ready, close)
    sols = h.find_solutions(small_problem(layout="NHWC"), find_mode="DYNAMIC_HYBRID")
    assert close.runs > 0 and sols[0].solver == "test.close"
    # A model that does not know it: WTI decides, as without a model.
    ready = TimedSolver("test.ready", delay_s=0.003, dynamic=True, wti=0.5)
    unknown = LibraryCompiled("test.unknown", delay_s=0.001, dynamic=True, wti=0.9)
    h = _with_heuristic({"test.ready": 1.0}, ready, unknown)
    sols = h.find_solutions(small_problem("backward_weights"), find_mode="DYNAMIC_HYBRID")
    assert unknown.runs > 0


def test_the_learned_estimate_decides_for_an_own_kernel_needing_a_compile(
    built: set[str],
) -> None:
    """The same rule as for a library: a ready solver whose WTI flatters it (a TF32 GEMM on a
    depthwise layer) does not keep out a kernel the model foresees winning."""
    flattered = TimedSolver("test.flattered", delay_s=0.003, dynamic=True, wti=0.9)
    unseen = TimedSolver("test.unseen", delay_s=0.004, dynamic=True, wti=0.8)  # model: unknown
    kernel = KernelSolver("test.kernel", delay_s=0.001, wti=0.05)
    estimates = {"test.flattered": 1.0, "test.kernel": 0.1}
    h = _with_heuristic(estimates, flattered, unseen, kernel)
    sols = h.find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert kernel.runs > 0 and "test.kernel.cu" in built
    assert sols[0].solver == "test.kernel" and unseen.runs > 0  # ready ones still measured
    # The model puts it beyond the margin: left out, never compiled, whatever its WTI says.
    flattered = TimedSolver("test.flattered", delay_s=0.003, dynamic=True, wti=0.1)
    doubted = KernelSolver("test.doubted", delay_s=0.001, wti=0.9)
    estimates = {"test.flattered": 1.0, "test.doubted": 1.1 * COMPILE_MARGIN}
    h = _with_heuristic(estimates, flattered, doubted)
    sols = h.find_solutions(small_problem("backward_data"), find_mode="DYNAMIC_HYBRID")
    assert doubted.runs == 0 and "test.doubted.cu" not in built
    assert "needs a compile" in sols.report.skipped["test.doubted"]


def test_a_solver_the_model_does_not_know_meets_its_estimate_of_the_ready_ones(
    built: set[str],
) -> None:
    """A kernel newer than the model (a depth-image stem solver against a shipped model):
    its WTI time, doubted as immediate mode doubts a newcomer, against the model's best ready
    estimate, not against the ready ones' WTI, which may flatter them."""
    from miocore.find.ranker import NEWCOMER_DOUBT

    flattered = TimedSolver("test.flattered", delay_s=0.003, dynamic=True, wti=0.9)
    newcomer = KernelSolver("test.newcomer", delay_s=0.001, wti=0.05)
    h = _with_heuristic({"test.flattered": 1.0}, flattered, newcomer)  # 1 ms, its WTI: far less
    canon = PROBLEM.canonical
    wti_ms = h.context.ideal_ms(canon) / newcomer.wti(h.context, canon)
    assert NEWCOMER_DOUBT * wti_ms < COMPILE_MARGIN * 1.0  # under the model's bar
    assert wti_ms > h.context.ideal_ms(canon) / 0.9  # but over the flattered WTI: WTI keeps it out
    sols = h.find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert newcomer.runs > 0 and "test.newcomer.cu" in built
    assert sols[0].solver == "test.newcomer"
    # doubted beyond the model's estimate of a ready one: left out, never compiled
    ready = TimedSolver("test.ready", delay_s=0.003, dynamic=True, wti=0.01)
    doubted = KernelSolver("test.doubted", delay_s=0.001, wti=0.9)
    problem = small_problem("backward_data")
    wti_ms = h.context.ideal_ms(problem.canonical) / 0.9
    estimate = 0.9 * NEWCOMER_DOUBT * wti_ms / COMPILE_MARGIN  # its doubted WTI is 1.1x over
    h = _with_heuristic({"test.ready": estimate}, ready, doubted)
    sols = h.find_solutions(problem, find_mode="DYNAMIC_HYBRID")
    assert doubted.runs == 0 and "test.doubted.cu" not in built
    assert "needs a compile" in sols.report.skipped["test.doubted"]


def test_compile_ahead_builds_what_the_finds_would_compile_at_once(
    built: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Handle.compile_ahead: the kernels DYNAMIC_HYBRID would compile for many problems, built
    # in one parallel pass; nothing measured, and a database hit compiles nothing.
    batches: list[list[str]] = []

    def precompile(self: CpuBackend, kernels: Any) -> dict[str, str]:
        batches.append(sorted(k.options[0] for k in kernels))
        built.update(k.source for k in kernels)
        return {}

    monkeypatch.setattr(CpuBackend, "precompile", precompile, raising=False)
    monkeypatch.setenv("MIOCORE_FIND_MODE", "DYNAMIC_HYBRID")
    dynamic = TimedSolver("test.dynamic", delay_s=0.003, dynamic=True, wti=0.1)
    faster = KernelSolver("test.faster", delay_s=0.001, wti=0.9)  # predicted faster: compiled
    slower = KernelSolver("test.slower", delay_s=0.001, wti=0.01)  # predicted slower: not
    h = _handle(dynamic, faster, slower)
    other = ConvProblem.from_sizes(
        "forward", n=1, c=4, k=4, in_spatial=(6, 6), filter_spatial=(1, 1)
    )
    assert h.compile_ahead([PROBLEM, other]) == {}
    assert len(batches) == 1 and len(batches[0]) == 2  # both problems' kernels, one pass
    assert "test.slower.cu" not in built
    assert dynamic.runs == faster.runs == slower.runs == 0
    # after a find (the database answers), nothing is compiled ahead
    h.find_solutions(PROBLEM)
    batches.clear()
    h.compile_ahead([PROBLEM])
    assert batches == []


class ListingKernelSolver(TunableTimedSolver):
    """A dynamic tunable solver with one kernel per setting, listing settings for a normal
    find to measure beside its default (``find_configs``)."""

    name = "test.listing"
    is_dynamic = True

    def get_solution(
        self, ctx: ExecutionContext, problem: ConvProblem, perf_config: PerfConfig | None = None
    ) -> ConvSolution:
        plain = super().get_solution(ctx, problem, perf_config)
        level = (perf_config or self.default_perf_config(ctx, problem))["level"]
        return _with_kernel(plain, f"-DLEVEL={level}")


def test_compile_ahead_builds_a_dynamic_solvers_listed_settings_too(
    built: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A normal find may also measure a dynamic solver's find_configs: their kernels are built
    # in the same parallel pass instead of one by one inside the find.
    batches: list[list[str]] = []

    def precompile(self: CpuBackend, kernels: Any) -> dict[str, str]:
        batches.append(sorted(k.options[0] for k in kernels))
        return {}

    monkeypatch.setattr(CpuBackend, "precompile", precompile, raising=False)
    h = _handle(ListingKernelSolver(listed=(3, 4)))
    assert h.compile_ahead([PROBLEM]) == {}
    assert batches == [["-DLEVEL=1", "-DLEVEL=3", "-DLEVEL=4"]]
    monkeypatch.setenv("MIOCORE_FIND_ALTERNATIVES", "0")  # none measured: none built
    batches.clear()
    h.compile_ahead([PROBLEM])
    assert batches == [["-DLEVEL=1"]]


def test_a_ready_candidate_estimated_hopeless_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.find.settings import estimate_prune_factor

    factor = estimate_prune_factor()
    fast = TimedSolver("test.fast", delay_s=0.001, dynamic=True, wti=0.5)
    near = TimedSolver("test.near", delay_s=0.002, dynamic=True, wti=0.5)
    hopeless = TimedSolver("test.hopeless", delay_s=0.004, dynamic=True, wti=0.5)
    unseen = TimedSolver("test.unseen", delay_s=0.004, dynamic=True, wti=0.5)
    estimates = {"test.fast": 1.0, "test.near": 0.9 * factor, "test.hopeless": 1.1 * factor}
    h = _with_heuristic(estimates, fast, near, hopeless, unseen)
    sols = h.find_solutions(PROBLEM, find_mode="DYNAMIC_HYBRID")
    assert sols[0].solver == "test.fast"
    assert fast.runs > 0 and near.runs > 0 and unseen.runs > 0  # unseen: no estimate, measured
    assert hopeless.runs == 0
    assert f"over {factor:g}x its best estimate" in sols.report.skipped["test.hopeless"]
    # NORMAL find measures it; so does DYNAMIC_HYBRID with the prune turned off.
    sols = h.find_solutions(small_problem("backward_data"), find_mode="NORMAL")
    assert hopeless.runs > 0
    monkeypatch.setenv("MIOCORE_FIND_ESTIMATE_PRUNE", "0")
    runs = hopeless.runs
    sols = h.find_solutions(small_problem("backward_weights"), find_mode="DYNAMIC_HYBRID")
    assert hopeless.runs > runs and "test.hopeless" not in sols.report.skipped
    monkeypatch.setenv("MIOCORE_FIND_ESTIMATE_PRUNE", "0.5")
    with pytest.raises(miocore.MiocoreError, match="MIOCORE_FIND_ESTIMATE_PRUNE"):
        h.find_solutions(small_problem(layout="NHWC"), find_mode="DYNAMIC_HYBRID")


def test_find_times_candidates_in_the_heuristics_order_where_it_has_estimates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # WTI puts test.flattered first (a higher score is a faster prediction); the heuristic
    # knows better, and an unknown solver keeps its WTI place among the estimates (in ms;
    # here far slower, and measured all the same with WTI's pruning off).
    monkeypatch.setenv("MIOCORE_FIND_PRUNE_FACTOR", "0")
    flattered = TimedSolver("test.flattered", delay_s=0.002, dynamic=True, wti=0.9)
    modest = TimedSolver("test.modest", delay_s=0.001, dynamic=True, wti=0.1)
    unknown = TimedSolver("test.unknown", delay_s=0.003, dynamic=True, wti=1e-9)
    h = _with_heuristic({"test.flattered": 2.0, "test.modest": 1.0}, flattered, modest, unknown)
    sols = h.find_solutions(PROBLEM, find_mode="NORMAL")
    assert sols.report.benchmarked == ["test.modest", "test.flattered", "test.unknown"]
    plain = _handle(
        TimedSolver("test.flattered", delay_s=0.002, dynamic=True, wti=0.9),
        TimedSolver("test.modest", delay_s=0.001, dynamic=True, wti=0.1),
    ).find_solutions(PROBLEM, find_mode="NORMAL")
    assert plain.report.benchmarked == ["test.flattered", "test.modest"]  # WTI's order
