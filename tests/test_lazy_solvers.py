"""Lazy solver records: registered without importing, made on first use and checked against
their declaration; a FindDb hit asks only the solvers its record names."""

from __future__ import annotations

import sys
import threading
import types
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from fake_solvers import TimedSolver

import miocore
from miocore import PluginError, Registry, SolverRecord, hookimpl
from miocore.solver.registry import PluginWarning
from miocore.testing.contract import Contract, ContractViolation

#: How often each factory made its solver, and how often each solver was asked.
MADE: Counter[str] = Counter()
ASKED: Counter[str] = Counter()


class CountingSolver(TimedSolver):
    """A TimedSolver that counts its ``is_applicable`` calls."""

    def is_applicable(self, ctx: Any, problem: Any) -> Any:
        ASKED[self.name] += 1
        return super().is_applicable(ctx, problem)


def make_fast() -> CountingSolver:
    MADE["lazy.fast"] += 1
    return CountingSolver("lazy.fast", delay_s=0.001, workspace=64)


def make_slow() -> CountingSolver:
    MADE["lazy.slow"] += 1
    return CountingSolver("lazy.slow", delay_s=0.004)


def make_gpu() -> TimedSolver:
    raise AssertionError("a CPU handle must never make a GPU-only solver")


def make_misnamed() -> TimedSolver:
    return TimedSolver("lazy.other_name")


@pytest.fixture(autouse=True)
def _counters() -> None:
    MADE.clear()
    ASKED.clear()


def lazy(factory: Any, name: str, algorithm: str = "direct", backends: Any = ("cpu",)) -> Any:
    return SolverRecord(factory=factory, name=name, algorithm=algorithm, backends=backends)


def registry(*records: Any) -> Registry:
    @hookimpl
    def miocore_solvers():  # type: ignore[no-untyped-def]
        return list(records)

    plugin = types.SimpleNamespace(miocore_solvers=miocore_solvers)
    return Registry.from_plugins([("lazyfam", plugin, "miocore-lazyfam", "0.9")])


def standard() -> Registry:
    return registry(
        lazy(f"{__name__}:make_fast", "lazy.fast"),
        lazy(f"{__name__}:make_slow", "lazy.slow"),
        lazy(make_gpu, "lazy.gpu", backends=("cuda", "hip")),
    )


def problem() -> miocore.ConvProblem:
    return miocore.ConvProblem.from_sizes(
        "forward", n=1, c=2, k=2, in_spatial=(4, 4), filter_spatial=(1, 1)
    )


# -- registration ------------------------------------------------------------------------------


def test_a_lazy_record_registers_without_making_its_solver() -> None:
    reg = standard()
    assert reg.names() == ["lazy.fast", "lazy.slow", "lazy.gpu"]
    fast = reg.get("lazy.fast")
    assert (fast.algorithm, fast.backends) == (miocore.Algorithm.DIRECT, frozenset({"cpu"}))
    assert not fast.is_made and MADE == {}
    assert fast.solver is fast.solver and MADE == {"lazy.fast": 1}  # made once, then kept
    assert fast.is_made and "made" in repr(fast)


def test_the_solver_is_made_once_under_concurrent_first_access() -> None:
    fast = standard().get("lazy.fast")
    seen: list[Any] = []
    threads = [threading.Thread(target=lambda: seen.append(fast.solver)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert MADE["lazy.fast"] == 1 and len({id(s) for s in seen}) == 1


def test_a_class_factory_is_instantiated() -> None:
    reg = registry(lazy("miocore_testing_absent_module:Thing", "lazy.absent"))
    reg2 = registry(lazy(_Plain, "lazy.plain"))
    assert isinstance(reg2.get("lazy.plain").solver, _Plain)
    with pytest.raises(PluginError, match=r"lazyfam \(miocore-lazyfam 0.9\).*ModuleNotFound"):
        _ = reg.get("lazy.absent").solver
    with pytest.raises(PluginError, match=r"lazy\.absent"):  # the failure is kept, raised again
        _ = reg.get("lazy.absent").solver


class _Plain(TimedSolver):
    def __init__(self) -> None:
        super().__init__("lazy.plain")


def test_a_solver_unlike_its_declaration_is_a_plugin_error() -> None:
    reg = registry(
        lazy(make_misnamed, "lazy.declared"),
        lazy(_Plain, "lazy.plain", algorithm="gemm"),
        lazy(_Plain, "lazy.plain2", backends=("cpu", "cuda")),
    )
    with pytest.raises(PluginError, match=r"name 'lazy.other_name', declared 'lazy.declared'"):
        _ = reg.get("lazy.declared").solver
    with pytest.raises(PluginError, match=r"algorithm .*declared 'gemm'"):
        _ = reg.get("lazy.plain").solver
    with pytest.raises(PluginError, match=r"backends .*declared \['cpu', 'cuda'\]"):
        _ = reg.get("lazy.plain2").solver


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (lazy(make_fast, "bad name!"), "name='bad name!'"),
        (lazy("no_colon_here", "lazy.x"), "'package.module:attribute'"),
        (lazy("a.b:c d", "lazy.x"), "'package.module:attribute'"),
        (lazy(42, "lazy.x"), "got int"),
        (lazy(make_fast, "lazy.x", algorithm="sorcery"), "algorithm='sorcery' is not one of"),
        (lazy(make_fast, "lazy.x", algorithm=None), "algorithm=None"),
        (lazy(make_fast, "lazy.x", backends=()), "backends=()"),
        (lazy(make_fast, "lazy.x", backends="cpu"), "backends='cpu'"),
        (lazy(make_fast, "lazy.x", backends=("cpu", "")), "backends="),
        (SolverRecord(solver=TimedSolver("a.b"), factory=make_fast), "either solver="),
        (SolverRecord(name="lazy.x"), "either solver="),
        (SolverRecord(), "must be a miocore.Solver"),
    ],
)
def test_malformed_lazy_records_are_refused_with_the_reason(record: Any, message: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = registry(record, SolverRecord(solver=TimedSolver("lazy.fine")))
    assert reg.names() == ["lazy.fine"]
    text = " ".join(str(w.message) for w in caught if issubclass(w.category, PluginWarning))
    assert message in text and "lazyfam (miocore-lazyfam 0.9)" in text


# -- find --------------------------------------------------------------------------------------


def test_a_cpu_find_never_makes_a_gpu_solver() -> None:
    h = miocore.Handle("cpu", registry=standard())
    found = h.find_solutions(problem(), find_mode="NORMAL")
    assert {s.solver for s in found} == {"lazy.fast", "lazy.slow"}
    assert h.last_report.not_applicable["lazy.gpu"] == "runs on cuda, hip, not cpu"
    assert not h.registry.get("lazy.gpu").is_made


def test_a_solver_that_fails_to_import_is_reported_and_find_goes_on() -> None:
    reg = registry(
        lazy("miocore_testing_absent_module:Thing", "lazy.absent"),
        lazy(make_misnamed, "lazy.declared"),
        lazy(make_fast, "lazy.fast"),
    )
    h = miocore.Handle("cpu", registry=reg)
    found = h.find_solutions(problem(), find_mode="NORMAL")
    assert [s.solver for s in found] == ["lazy.fast"]
    failed = h.last_report.failed
    assert "ModuleNotFoundError" in failed["lazy.absent"]
    assert "plugin lazyfam" in failed["lazy.absent"]
    assert "does not match its record" in failed["lazy.declared"]
    assert [s.solver for s in h.get_solutions(problem())] == ["lazy.fast"]
    with pytest.raises(PluginError, match=r"lazy\.absent"):
        h.get_solution_workspace_size(problem(), "lazy.absent")


def _record_only_fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """A FindDb record naming lazy.fast only (found with the other solvers excluded)."""
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", "lazy.fast")
    miocore.Handle("cpu", registry=standard()).find_solutions(problem(), find_mode="NORMAL")
    monkeypatch.delenv("MIOCORE_FIND_ONLY_SOLVER")
    MADE.clear()
    ASKED.clear()


def test_a_hit_asks_and_makes_only_the_recorded_solvers(monkeypatch: pytest.MonkeyPatch) -> None:
    _record_only_fast(monkeypatch)
    h = miocore.Handle("cpu", registry=standard())  # a new process, as far as caches go
    hit = h.find_solutions(problem())
    assert [(s.solver, s.source) for s in hit] == [("lazy.fast", "find-db")]
    assert MADE == {"lazy.fast": 1} and ASKED == {"lazy.fast": 1}
    assert h.last_report.db_hit == "the user FindDb" and not h.last_report.not_applicable
    listed = h.get_solutions(problem(), max_results=1)  # the record fills the list
    assert [s.solver for s in listed] == ["lazy.fast"] and "lazy.slow" not in MADE
    # The full listing asks everyone: the memo of the restricted selection is not reused.
    every = h.get_solutions(problem())
    assert [s.solver for s in every] == ["lazy.fast", "lazy.slow"]
    assert every[0].source == "find-db" and MADE["lazy.slow"] == 1
    assert h.last_report.not_applicable["lazy.gpu"] == "runs on cuda, hip, not cpu"


@pytest.mark.parametrize(
    ("setting", "kwargs", "reason"),
    [
        ({"MIOCORE_DEBUG_CONV_DIRECT": "0"}, {}, "MIOCORE_DEBUG_CONV_DIRECT=0"),
        ({}, {"workspace_limit": 0}, "needs 64 B of workspace, limit is 0 B"),
    ],
)
def test_a_recorded_solver_the_rules_exclude_is_no_hit(
    monkeypatch: pytest.MonkeyPatch, setting: dict[str, str], kwargs: Any, reason: str
) -> None:
    _record_only_fast(monkeypatch)
    for name, value in setting.items():
        monkeypatch.setenv(name, value)
    h = miocore.Handle("cpu", registry=standard())
    if setting:  # every solver is direct: nothing is left
        with pytest.raises(miocore.NoApplicableSolverError, match=reason):
            h.find_solutions(problem())
        return
    found = h.find_solutions(problem(), **kwargs)  # a miss: the others are measured
    assert [s.source for s in found] == ["measured"] and found[0].solver == "lazy.slow"
    assert reason in h.last_report.skipped["lazy.fast"] and h.last_report.db_hit is None


def test_a_denied_recorded_solver_is_no_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    _record_only_fast(monkeypatch)
    h = miocore.Handle("cpu", registry=standard())
    from miocore.db.deny_entries import DenyEntry
    from miocore.find.accuracy import deny_list

    deny_list(h.state).add(DenyEntry(solver="lazy.fast", reason="wrong results in this test"))
    found = h.find_solutions(problem())
    assert [(s.solver, s.source) for s in found] == [("lazy.slow", "measured")]
    assert "denied by the user deny list" in h.last_report.skipped["lazy.fast"]


def test_only_solver_limits_a_hit_as_it_limits_a_find(monkeypatch: pytest.MonkeyPatch) -> None:
    _record_only_fast(monkeypatch)
    monkeypatch.setenv("MIOCORE_FIND_ONLY_SOLVER", "lazy.slow")
    h = miocore.Handle("cpu", registry=standard())
    found = h.find_solutions(problem())
    assert [(s.solver, s.source) for s in found] == [("lazy.slow", "measured")]
    assert MADE == {"lazy.slow": 1}


# -- the contract kit --------------------------------------------------------------------------


def test_the_contract_kit_makes_and_checks_a_lazy_record() -> None:
    Contract(lazy(_Plain, "lazy.plain")).check_registration()
    Contract(standard().get("lazy.fast")).check_registration()
    with pytest.raises(ContractViolation, match="does not match its record"):
        Contract(lazy(make_misnamed, "lazy.declared")).check_registration()
    with pytest.raises(ContractViolation, match="ModuleNotFoundError"):
        Contract(lazy("miocore_testing_absent_module:Thing", "lazy.absent")).check_registration()
    with pytest.raises(ContractViolation, match="is not one of"):
        Contract(lazy(_Plain, "lazy.plain", algorithm="magic")).check_registration()


def test_every_installed_solver_registers_as_it_declares() -> None:
    """Each lazy record of the installed plugins makes a solver equal to its declaration."""
    for reg in miocore.solvers():
        Contract(reg).check_registration()


def test_lazy_exports_load_a_name_on_first_access_and_keep_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "lazy_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import miocore\n"
        "__getattr__ = miocore.lazy_exports(__name__, {'VALUE': 'lazy_pkg.heavy'})\n"
    )
    (package / "heavy.py").write_text("VALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    module = importlib.import_module("lazy_pkg")
    assert "lazy_pkg.heavy" not in sys.modules  # importing the package loaded nothing
    assert module.VALUE == 42
    assert "lazy_pkg.heavy" in sys.modules and module.__dict__["VALUE"] == 42  # kept
    with pytest.raises(AttributeError, match=r"lazy_pkg.*OTHER"):
        _ = module.OTHER
    for name in ("lazy_pkg", "lazy_pkg.heavy"):
        sys.modules.pop(name, None)
