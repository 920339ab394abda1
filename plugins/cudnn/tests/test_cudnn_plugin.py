"""miocore-cudnn without a GPU: registration, stable names and ids, the not-applicable answers
on the CPU backend and where cuDNN is absent, the contract suite's metadata rules, and the
plan logic (engines, knobs, numerics filters, workspace, invoker) driven by a fake frontend."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from miocore_cudnn import MAX_ENGINE_ID, SOLVERS, engine_solver
from miocore_cudnn._plans import parse_tag

import miocore
from miocore.backends.cpu import cpu_device_info
from miocore.solver.interface import Ceilings, DeviceInfo
from miocore.solver.registry import solver_id
from miocore.testing.contract import Contract

ENGINE = {s.engine: s for s in SOLVERS}


def cuda_context(math_mode: str = "exact") -> miocore.ExecutionContext:
    """An execution context that says "cuda" (no device behind it)."""
    device = DeviceInfo(
        backend="cuda",
        name="Fake H100",
        arch="sm_90",
        compute_units=132,
        identity="sm90_132_fake",
        measure_ceilings=lambda: Ceilings(
            gflops={
                miocore.DataType.FLOAT32: 60e3,
                miocore.DataType.FLOAT16: 900e3,
                miocore.DataType.BFLOAT16: 900e3,
            },
            gbps=3000.0,
        ),
    )
    return miocore.ExecutionContext(device=device, math_mode=math_mode)


def problem(direction: str = "forward", dtype: str = "float32", layout: str = "NHWC"):
    return miocore.ConvProblem.from_sizes(
        direction, n=2, c=8, k=16, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1),
        groups=2, dtype=dtype, layout=layout,
    )  # fmt: skip


# -- registration and names ------------------------------------------------------------------


def test_every_engine_id_is_registered_by_the_installed_plugin() -> None:
    found = {r.name: r for r in miocore.solvers() if r.name.startswith("cudnn.")}
    assert sorted(found) == sorted(f"cudnn.eng{e}" for e in range(MAX_ENGINE_ID + 1))
    record = found["cudnn.eng0"]
    assert (record.plugin, record.distribution) == ("cudnn", "miocore-cudnn")


def test_names_and_ids_are_stable() -> None:
    # Databases store these: the name is the engine id, the id a digest of the name.
    assert [s.name for s in SOLVERS[:3]] == ["cudnn.eng0", "cudnn.eng1", "cudnn.eng2"]
    assert solver_id("cudnn.eng0") == 661837281
    assert solver_id("cudnn.eng1") == 1584164895
    assert engine_solver(42).name == "cudnn.eng42" and engine_solver(42).engine == 42
    assert all(s.algorithm is miocore.Algorithm.IMPLICIT_GEMM for s in SOLVERS)
    assert all(s.backends == frozenset({"cuda"}) and s.is_dynamic for s in SOLVERS)


def test_knob_notation_round_trips_cudnn_tags() -> None:
    engine, knobs = parse_tag("eng28_k2=1_k13=-1_k24=3")
    assert engine == 28 and knobs == {"k2": 1, "k13": -1, "k24": 3}
    assert miocore.PerfConfig.from_string(knobs.to_string()) == knobs
    assert parse_tag("ConvBwdData_eng0")[1] == {}


def test_importing_the_plugin_does_not_import_cudnn() -> None:
    code = "import sys, miocore_cudnn.plugin; assert 'cudnn' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_plugin_declares_its_engines_lazily_and_agrees_with_the_solvers() -> None:
    from miocore_cudnn import plugin

    assert plugin.MAX_ENGINE_ID == MAX_ENGINE_ID
    found = {r.name: r for r in miocore.solvers() if r.name.startswith("cudnn.")}
    assert found["cudnn.eng7"].solver is SOLVERS[7]  # the lazy record makes the same solver
    code = (
        "import sys, miocore; miocore.solvers(); "
        "assert 'miocore_cudnn.solvers' not in sys.modules, 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- not applicable, with reasons ------------------------------------------------------------


@pytest.mark.parametrize("direction", ["forward", "backward_data", "backward_weights"])
def test_cpu_backend_declines_every_engine_with_the_reason(direction: str) -> None:
    ctx = miocore.ExecutionContext(device=cpu_device_info())
    p = problem(direction)
    for solver in SOLVERS:
        answer = solver.is_applicable(ctx, p)
        assert not answer and answer.reason == "runs on cuda, not cpu"
    assert SOLVERS[0].perf_config_space(ctx, p) == []


def test_cpu_handle_find_never_offers_cudnn() -> None:
    h = miocore.Handle("cpu")
    p = miocore.ConvProblem.from_sizes("forward", n=1, c=4, k=4, in_spatial=(5, 5),
                                       filter_spatial=(3, 3))  # fmt: skip
    try:
        found = h.find_solutions(p, find_mode="NORMAL")
    except miocore.NoApplicableSolverError as exc:  # only the cudnn plugin is installed
        assert all(f"cudnn.eng{e}: runs on cuda, not cpu" in str(exc) for e in (0, 50, 99))
    else:
        assert found and not any(s.solver.startswith("cudnn.") for s in found)
    with pytest.raises(miocore.MiocoreError, match=r"cudnn.eng0.*runs on \['cuda'\], not cpu"):
        h.get_solution_workspace_size(p, "cudnn.eng0")


def test_missing_frontend_is_a_reason_not_an_exception(no_cudnn: None) -> None:
    answer = ENGINE[0].is_applicable(cuda_context(), problem())
    assert not answer and "nvidia-cudnn-frontend" in answer.reason
    with pytest.raises(miocore.NotApplicableError, match=r"cudnn\.eng0.*not installed"):
        ENGINE[0].get_solution(cuda_context(), problem())


def test_failing_handle_is_a_reason(fake_cudnn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> int:
        raise RuntimeError("cudnnHandle Create failed cudaGetDeviceCount(&count) != cudaSuccess")

    monkeypatch.setattr(fake_cudnn, "create_handle", broken)
    answer = ENGINE[3].is_applicable(cuda_context(), problem())
    assert not answer and "cudnnCreate failed" in answer.reason
    assert "cudaGetDeviceCount" in answer.reason


class TestContractMetadata:
    """The contract rules that need no device, on the CPU context of the suite."""

    @pytest.fixture(scope="class")
    @classmethod
    def contract(cls) -> Contract:
        return Contract(ENGINE[0], use_corpus=False, per_direction=2, inapplicable=4)

    def test_registration(self, contract: Contract) -> None:
        contract.check_registration()

    def test_is_applicable_is_pure_fast_and_says_why(self, contract: Contract) -> None:
        contract.check_is_applicable()

    def test_problem_set_has_declined_problems_only(self, contract: Contract) -> None:
        # The suite's run rules need a device; here every generated problem is declined
        # (find and the workspace query refusing them: test_cpu_handle_find_never_offers_cudnn).
        assert contract.problems.inapplicable and not contract.problems.claimed_directions


# -- plan logic through the fake frontend ------------------------------------------------------


def test_graph_carries_the_descriptors(fake_cudnn: Any) -> None:
    from miocore_cudnn._plans import plans_for

    ctx = cuda_context()
    for direction, node, out in (
        ("forward", "fprop", "y"),
        ("backward_data", "dgrad", "x"),
        ("backward_weights", "wgrad", "w"),
    ):
        p = problem(direction, "float16", "NHWC")
        assert ENGINE[3].is_applicable(ctx, p)
        handle = miocore_cudnn_handle()
        graph = plans_for(fake_cudnn, handle, ctx.device.identity, p, "exact").graph
        kind, args = graph.node
        assert kind == node
        assert args["padding"] == [1, 1] and args["stride"] == [1, 1]
        assert args["dilation"] == [1, 1]
        assert graph.context["io_data_type"] is fake_cudnn.data_type.HALF
        assert graph.context["compute_data_type"] is fake_cudnn.data_type.FLOAT
        by_uid = {t.attrs["uid"]: t.attrs for t in graph.tensors}
        desc = getattr(p, out)
        uid = {"x": 1, "w": 2, "y": 3}[out]
        assert by_uid[uid]["output"] is True
        assert by_uid[uid]["dim"] == list(desc.lengths)
        assert by_uid[uid]["stride"] == list(desc.strides)  # NHWC strides, logical order
        assert len(by_uid) == 3


def miocore_cudnn_handle() -> Any:
    from miocore_cudnn import _loader

    handle, reason = _loader.handle_for("sm90_132_fake")
    assert handle is not None, reason
    return handle


def test_engines_knobs_and_defaults_follow_the_heuristics(fake_cudnn: Any) -> None:
    ctx, p = cuda_context(), problem("forward", "float16")
    eng3, eng7 = ENGINE[3], ENGINE[7]
    assert eng3.is_applicable(ctx, p) and eng7.is_applicable(ctx, p)
    assert eng3.default_perf_config(ctx, p) == {"k2": 1}
    # The heuristics' configurations first, then single-knob variations that name new ones.
    assert eng3.perf_config_space(ctx, p) == [
        {"k2": 1},
        {"k2": 2},
        {"k2": 0, "via": "TILE_SIZE=0"},
        {"k2": 3, "via": "TILE_SIZE=3"},
    ]
    assert eng7.default_perf_config(ctx, p) == {"k2": 4, "k13": 0}
    # The plan's own workspace, per configuration.
    assert eng7.workspace_size(ctx, p) == 4096
    assert eng3.workspace_size(ctx, p, miocore.PerfConfig(k2=2)) == 512
    # cuDNN's first choice ranks highest, and every estimate is a fraction of peak.
    assert 0 < eng7.wti(ctx, p) < eng3.wti(ctx, p) <= 1
    assert eng3.wti(ctx, p) == 0.7 == eng3.wti(cuda_context("tf32"), p)
    assert eng3.wti(ctx, problem("forward", "float32")) == 0.5
    # Depthwise layers are memory-bound and cuDNN's engines reach a small fraction there.
    depthwise = miocore.ConvProblem.from_sizes(
        "forward", n=2, c=8, k=8, in_spatial=(9, 9), filter_spatial=(3, 3), pads=(1, 1),
        groups=8, dtype="float16", layout="NHWC",
    )  # fmt: skip
    assert depthwise.is_depthwise and eng3.wti(ctx, depthwise) <= 0.15
    answer = ENGINE[50].is_applicable(ctx, p)
    assert not answer and "do not offer engine 50" in answer.reason and "eng3" in answer.reason


def test_stale_knobs_are_rejected_with_field_and_value(fake_cudnn: Any) -> None:
    ctx, p = cuda_context(), problem("forward", "float16")
    stale = miocore.PerfConfig(k2=9)
    assert not ENGINE[3].is_valid_perf_config(ctx, p, stale)
    assert ENGINE[3].is_valid_perf_config(ctx, p, miocore.PerfConfig(k2=2))
    with pytest.raises(miocore.NotApplicableError) as info:
        ENGINE[3].get_solution(ctx, p, stale)
    assert info.value.field == "solver" and info.value.value == "cudnn.eng3"
    assert "'k2': 9" in str(info.value)


def test_exact_fp32_refuses_tf32_engines_and_tf32_mode_allows_them(fake_cudnn: Any) -> None:
    p32 = problem("forward", "float32")
    # Listed by the heuristics either way; the build refuses it (deferred setup: find asks).
    assert ENGINE[9].is_applicable(cuda_context("exact"), p32)
    with pytest.raises(miocore.NotApplicableError, match="TENSOR_CORE"):
        ENGINE[9].default_perf_config(cuda_context("exact"), p32)
    assert ENGINE[9].is_applicable(cuda_context("tf32"), p32)
    assert ENGINE[9].default_perf_config(cuda_context("tf32"), p32) is not None
    assert ENGINE[9].is_applicable(cuda_context("exact"), problem("forward", "bfloat16"))


def test_runtime_compiled_engines_take_part_unless_switched_off(
    fake_cudnn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from miocore_cudnn._plans import clear_cache

    ctx, p = cuda_context(), problem("backward_weights", "float16")
    monkeypatch.delenv("MIOCORE_CUDNN_RUNTIME_COMPILED", raising=False)
    assert ENGINE[11].is_applicable(ctx, p)
    # By default DYNAMIC_HYBRID find treats it as a compile for this problem (told without a
    # build); with 1 it is measured like any engine.
    assert ENGINE[11].compiles_for(ctx, p) and not ENGINE[3].compiles_for(ctx, p)
    monkeypatch.setenv("MIOCORE_CUDNN_RUNTIME_COMPILED", "compile")
    assert ENGINE[11].compiles_for(ctx, p)
    monkeypatch.setenv("MIOCORE_CUDNN_RUNTIME_COMPILED", "on")
    assert ENGINE[11].is_applicable(ctx, p) and not ENGINE[11].compiles_for(ctx, p)
    monkeypatch.setenv("MIOCORE_CUDNN_RUNTIME_COMPILED", "sometimes")
    with pytest.raises(miocore.InvalidEnvironmentError, match="MIOCORE_CUDNN_RUNTIME_COMPILED"):
        ENGINE[11].compiles_for(ctx, p)
    monkeypatch.delenv("MIOCORE_CUDNN_RUNTIME_COMPILED")
    for off in ("0", "false", "off"):
        monkeypatch.setenv("MIOCORE_CUDNN_RUNTIME_COMPILED", off)
        clear_cache()
        answer = ENGINE[11].is_applicable(ctx, p)
        assert not answer and "MIOCORE_CUDNN_RUNTIME_COMPILED" in answer.reason
    monkeypatch.setenv("MIOCORE_CUDNN_RUNTIME_COMPILED", "1")
    clear_cache()
    assert ENGINE[11].is_applicable(ctx, p)


def test_heuristics_modes_follow_the_variable(
    fake_cudnn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MIOCORE_CUDNN_HEURISTICS names the modes asked (A and FALLBACK by default); a bad
    name is an error naming the variable and the value."""
    from fake_cudnn import ASKED, heur_mode
    from miocore_cudnn._plans import clear_cache

    ctx, p = cuda_context(), problem("forward", "float16")
    for value, expected in (
        (None, [heur_mode.A, heur_mode.FALLBACK]),
        ("a, b, fallback", [heur_mode.A, heur_mode.B, heur_mode.FALLBACK]),
        ("B", [heur_mode.B]),
    ):
        if value is None:
            monkeypatch.delenv("MIOCORE_CUDNN_HEURISTICS", raising=False)
        else:
            monkeypatch.setenv("MIOCORE_CUDNN_HEURISTICS", value)
        clear_cache()
        ASKED.clear()
        assert ENGINE[3].is_applicable(ctx, p)
        assert ASKED and ASKED[0] == expected
    monkeypatch.setenv("MIOCORE_CUDNN_HEURISTICS", "A,C")
    clear_cache()
    with pytest.raises(miocore.InvalidEnvironmentError, match=r"MIOCORE_CUDNN_HEURISTICS.*A,C"):
        ENGINE[3].is_applicable(ctx, p)


def test_reduced_precision_configurations_take_part_with_their_note(
    fake_cudnn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A configuration cuDNN marks REDUCED_PRECISION_REDUCTION builds (in the graph that
    allows it) and says so through ``notes_for``, so ``strict`` refuses it and ``default``
    compares it with the plain path; ``MIOCORE_CUDNN_REDUCED_PRECISION=0`` leaves it out."""
    from miocore_cudnn._plans import clear_cache

    ctx, p = cuda_context(), problem("forward", "float16")
    assert ENGINE[14].is_applicable(ctx, p)
    assert ENGINE[14].notes_for(ctx, p) == {"reduced_precision_accumulation"}
    assert ENGINE[14].workspace_size(ctx, p) == 64
    assert ENGINE[3].notes_for(ctx, p) == frozenset()
    solution = ENGINE[14].get_solution(ctx, p)
    assert solution.workspace_size == 64
    monkeypatch.setenv("MIOCORE_CUDNN_REDUCED_PRECISION", "0")
    clear_cache()
    assert ENGINE[14].is_applicable(ctx, p)  # listed; its build is refused (deferred setup)
    with pytest.raises(miocore.NotApplicableError, match="REDUCED_PRECISION_REDUCTION"):
        ENGINE[14].workspace_size(ctx, p)
    assert ENGINE[14].notes_for(ctx, p) == frozenset()


def test_winograd_engines_declare_an_error_bound(fake_cudnn: Any) -> None:
    ctx = cuda_context()
    bound = ENGINE[12].expected_error(ctx, problem("forward", "float32"))
    assert bound is not None and 2e-5 <= bound < 1e-3
    assert ENGINE[3].expected_error(ctx, problem("forward", "float32")) is None
    half = ENGINE[12].expected_error(ctx, problem("forward", "float16"))
    assert half is not None and 2e-3 < half < 2e-2
    assert ENGINE[3].expected_error(ctx, problem("forward", "bfloat16")) is None


class _Buffer:
    def __init__(self, ptr: int) -> None:
        self.ptr = ptr


class _Driver:
    """Records when the CUDA capture mode is relaxed, into the frontend fake's call log;
    streams in ``capturing`` are being captured."""

    def __init__(self, calls: list[Any], capturing: set[int]) -> None:
        self.calls = calls
        self.capturing = capturing

    def is_capturing(self, stream: int) -> bool:
        return stream in self.capturing

    @contextlib.contextmanager
    def relaxed_capture(self) -> Iterator[None]:
        self.calls.append(("relaxed",))
        yield
        self.calls.append(("strict",))


class _Backend:
    def __init__(self, stream: int, calls: list[Any], capturing: set[int]) -> None:
        self.stream_handle = self.stream_object = stream
        self.driver = _Driver(calls, capturing)


class _Handle:
    def __init__(self, stream: int, calls: list[Any], capturing: set[int] = frozenset()) -> None:
        self.backend = _Backend(stream, calls, set(capturing))


def test_invoker_is_one_execute_with_the_callers_pointers(fake_cudnn: Any) -> None:
    ctx, p = cuda_context(), problem("backward_data", "float16")
    solution = ENGINE[7].get_solution(ctx, p)
    assert solution.workspace_size == 4096 and solution.perf_config == {"k2": 4, "k13": 0}
    invoker = solution.invoker_factory(())
    params = miocore.InvokeParams(
        problem=p, x=_Buffer(0x1000), w=_Buffer(0x2000), y=_Buffer(0x3000),
        workspace=_Buffer(0x9000),
    )  # fmt: skip
    calls = fake_cudnn.CALLS
    invoker(_Handle(77, calls), params)
    invoker(_Handle(77, calls), params)
    invoker(_Handle(78, calls, capturing={78}), params)
    invoker.at(_Handle(78, calls), 0x4000, 0x5000, 0x6000, 0)  # addresses alone
    assert [c for c in calls if c[0] == "set_stream"] == [
        ("set_stream", 0xC0DE, 77),
        ("set_stream", 0xC0DE, 78),
    ]
    runs = [at for at, c in enumerate(calls) if c[0] == "execute"]
    assert len(runs) == 4
    assert calls[runs[0]] == ("execute", {1: 0x1000, 2: 0x2000, 3: 0x3000}, 0x9000, 1, 0xC0DE)
    assert calls[runs[3]] == ("execute", {1: 0x4000, 2: 0x5000, 3: 0x6000}, 0, 1, 0xC0DE)
    # Relaxed capture mode around the execute only while the stream is being captured (a
    # caller's CUDA graph recording): switching the mode costs two driver calls.
    relaxed = [at for at in runs if calls[at - 1] == ("relaxed",)]
    assert relaxed == [runs[2]] and calls[runs[2] + 1] == ("strict",)


def test_a_graph_cudnn_refuses_declines_every_engine_once(
    fake_cudnn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = []

    def refuse(self: Any) -> None:
        built.append(1)
        raise RuntimeError("CUDNN_STATUS_NOT_SUPPORTED: bad strides\nmore detail")

    monkeypatch.setattr(fake_cudnn.pygraph, "validate", refuse)
    ctx, p = cuda_context(), problem("backward_data", "bfloat16")
    for engine in (0, 3, 7):
        answer = ENGINE[engine].is_applicable(ctx, p)
        assert not answer and answer.reason == (
            "cuDNN cannot describe this problem as a graph: CUDNN_STATUS_NOT_SUPPORTED: bad strides"
        )
    assert len(built) == 1  # the refusal is cached with the problem, not asked per engine
    with pytest.raises(miocore.NotApplicableError, match="bad strides"):
        ENGINE[3].default_perf_config(ctx, p)


def test_knob_variations_run_and_are_remade_from_their_record(fake_cudnn: Any) -> None:
    from miocore_cudnn._plans import clear_cache

    ctx, p = cuda_context(), problem("backward_weights", "float16")
    variant = ENGINE[3].perf_config_space(ctx, p)[-1]
    assert variant == {"k2": 3, "via": "TILE_SIZE=3"}
    assert ENGINE[3].workspace_size(ctx, p, variant) == 128 * 4
    # As in a new process: the heuristics do not list it, its recipe makes it again.
    clear_cache()
    text = variant.to_string()
    solution = ENGINE[3].get_solution(ctx, p, miocore.PerfConfig.from_string(text))
    assert solution.perf_config == variant and solution.workspace_size == 512
    params = miocore.InvokeParams(problem=p, x=_Buffer(1), w=_Buffer(2), y=_Buffer(3))
    solution.invoker_factory(())(_Handle(0, fake_cudnn.CALLS), params)
    assert fake_cudnn.CALLS[-1] == ("execute", {1: 1, 2: 2, 3: 3}, 0, 0, 0xC0DE)
    # A recipe that makes another configuration than recorded is stale.
    stale = miocore.PerfConfig(k2=2, via="TILE_SIZE=3")
    assert not ENGINE[3].is_valid_perf_config(ctx, p, stale)


def test_knob_variations_keep_the_numerics_filter(fake_cudnn: Any) -> None:
    exact, tf32, p = cuda_context("exact"), cuda_context("tf32"), problem("forward", "float32")
    # Listed in exact fp32 too, but every configuration, variations included, is refused.
    barred = ENGINE[9].perf_config_space(exact, p)
    assert barred and not any(ENGINE[9].is_valid_perf_config(exact, p, c) for c in barred)
    space = ENGINE[9].perf_config_space(tf32, p)
    assert {"k2": 1, "via": "TILE_SIZE=1"} in space
    variant = miocore.PerfConfig(k2=1, via="TILE_SIZE=1")
    assert ENGINE[9].is_valid_perf_config(tf32, p, variant)
    assert not ENGINE[9].is_valid_perf_config(exact, p, variant)
