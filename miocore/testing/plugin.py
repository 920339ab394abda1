"""The pytest side of :mod:`miocore.testing`: fixtures, the ``gpu`` marker and the contract suite.

Opt in from a test module or the root ``conftest.py`` of a plugin's tests::

    pytest_plugins = ["miocore.testing"]

(never loaded on its own: miocore registers no ``pytest11`` entry point, so installing it
changes nobody else's test run). Then subclass :class:`SolverContract` to run the contract
suite on a solver::

    from miocore.testing import SolverContract

    class TestMySolverContract(SolverContract):
        solver = MySolver()

Fixtures: ``miocore_plugin_manager`` (a fresh pluggy manager with miocore's hookspecs),
``miocore_registry`` (a factory: a registry holding only the given solvers),
``miocore_cpu_handle`` (a factory: a CPU handle with a throw-away database),
``miocore_db_dir`` (that database's folder) and ``miocore_clean_env`` (no ``MIOCORE_*``
switch set). Tests marked ``@pytest.mark.gpu`` are skipped where no CUDA or HIP device is
available.

(PYTEST_DONT_REWRITE: a plugin module imported before pytest loads it cannot be rewritten, and
nothing here needs assertion rewriting.)
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pluggy
import pytest

from miocore.problem.conv import ConvProblem, Direction
from miocore.solver.hookspecs import SolverRecord
from miocore.solver.interface import Solver
from miocore.testing.contract import DIRECTIONS, Contract, Tolerance

GPU_MARKER = "gpu: needs a CUDA or HIP device; skipped where there is none"

#: Environment variables a test may keep: where the corpus is, what tox installed.
_KEPT = ("MIOCORE_CORPUS", "MIOCORE_EXPECT_PLUGINS")


# -- hooks ----------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``gpu`` marker (so ``--strict-markers`` runs accept it)."""
    config.addinivalue_line("markers", GPU_MARKER)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip ``gpu``-marked tests where no GPU backend opens."""
    if item.get_closest_marker("gpu") is not None:
        device = gpu_device()
        if device is None:
            pytest.skip("no CUDA or HIP device (or miocore GPU backend) is available")


@functools.cache
def gpu_device() -> str | None:
    """``"cuda"`` or ``"hip"`` when that backend opens here, else None (asked once)."""
    from miocore.backends import open_backend
    from miocore.errors import MiocoreError

    for name in ("cuda", "hip"):
        try:
            open_backend(name)
        except MiocoreError:
            continue
        return name
    return None


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def miocore_plugin_manager() -> pluggy.PluginManager:
    """A fresh pluggy plugin manager with miocore's hook specifications and nothing registered."""
    from miocore.solver.hookspecs import PROJECT, MiocoreSpecs

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(MiocoreSpecs)
    return pm


@pytest.fixture
def miocore_registry() -> Callable[..., Any]:
    """A factory: ``miocore_registry(*solvers, plugin=..., distribution=..., version=...)`` is a
    :class:`~miocore.Registry` holding exactly those solvers (no installed plugin)."""
    from miocore.solver.registry import Registry

    def make(
        *solvers: Solver, plugin: str = "local", distribution: str = "local", version: str = "0"
    ) -> Registry:
        return Registry.from_solvers(
            solvers, plugin=plugin, distribution=distribution, version=version
        )

    return make


@pytest.fixture
def miocore_clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No ``MIOCORE_*`` switch (nor its MIOpen alias ``MIOPEN_*``) is set (find mode, enforce,
    disabled plugins...), and the installed-plugin registry is rediscovered after the test."""
    from miocore.solver.registry import reset_default_registry

    for name in list(os.environ):
        if name.startswith(("MIOCORE_", "MIOPEN_")) and name not in _KEPT:
            monkeypatch.delenv(name)
    yield
    reset_default_registry()


@pytest.fixture
def miocore_db_dir(tmp_path: Path) -> Path:
    """The folder of the throw-away user and system databases of ``miocore_cpu_handle``."""
    path = tmp_path / "miocore-db"
    path.mkdir()
    return path


@pytest.fixture
def miocore_cpu_handle(miocore_clean_env: None, miocore_db_dir: Path) -> Callable[..., Any]:
    """A factory: ``miocore_cpu_handle(*solvers)`` is a CPU :class:`~miocore.Handle` on a
    throw-away database, holding only ``solvers`` (or the installed plugins when none are
    given, or ``registry=``)."""
    from miocore.find.handle import Handle
    from miocore.solver.registry import Registry

    def make(*solvers: Solver, registry: Registry | None = None) -> Handle:
        if solvers and registry is not None:
            raise TypeError("pass solvers or registry=, not both")
        if solvers:
            registry = Registry.from_solvers(solvers)
        return Handle(
            "cpu",
            registry=registry,
            user_db_path=miocore_db_dir / "user",
            system_db_path=miocore_db_dir / "system",
        )

    return make


# -- the contract suite ----------------------------------------------------------------------------


class SolverContract:
    """The solver contract suite as a pytest test class: subclass it (``Test...``), set
    ``solver``, and every rule of :class:`miocore.testing.contract.Contract` becomes a test.
    ``solver`` is an instance, or the plugin's lazy ``SolverRecord`` (made here, and its
    declaration checked against the class).

    Class attributes tune the run: ``tolerance`` (a bound, a bound per data type, or
    ``f(problem, perf_config)``), ``problems`` (asked first: bring your own for a narrow
    solver), ``per_direction``, ``inapplicable``, ``max_perf_configs``,
    ``perf_config_problems``, ``applicability_budget_ms``, ``use_corpus`` and ``require_wti``.
    """

    solver: ClassVar[Solver | SolverRecord]
    tolerance: ClassVar[Tolerance | None] = None
    problems: ClassVar[Sequence[ConvProblem]] = ()
    per_direction: ClassVar[int] = 6
    inapplicable: ClassVar[int] = 6
    max_perf_configs: ClassVar[int] = 16
    perf_config_problems: ClassVar[int] = 3
    applicability_budget_ms: ClassVar[float] = 2.0
    use_corpus: ClassVar[bool] = True
    require_wti: ClassVar[bool] = True

    @pytest.fixture(scope="class")
    @classmethod
    def contract(cls) -> Contract:
        """The :class:`~miocore.testing.contract.Contract` of this class's solver (problems
        generated once per class)."""
        solver = getattr(cls, "solver", None)
        if solver is None:
            pytest.fail(f"{cls.__name__} must set `solver = YourSolver()`")
        if "cpu" not in getattr(solver, "backends", ()):
            # The suite runs invokers on numpy arrays; GPU-only solvers need a device run.
            pytest.skip(f"{solver.name} does not run on the CPU; the contract suite runs there")
        # A function set as a class attribute would bind as a method: take it unbound.
        tolerance = inspect.getattr_static(cls, "tolerance")
        if isinstance(tolerance, staticmethod | classmethod):
            tolerance = tolerance.__func__
        return Contract(
            solver,
            tolerance=tolerance,
            problems=cls.problems,
            per_direction=cls.per_direction,
            inapplicable=cls.inapplicable,
            max_perf_configs=cls.max_perf_configs,
            perf_config_problems=cls.perf_config_problems,
            applicability_budget_ms=cls.applicability_budget_ms,
            use_corpus=cls.use_corpus,
            require_wti=cls.require_wti,
        )

    def test_registers_cleanly(self, contract: Contract) -> None:
        """A dotted name, an Algorithm and known backends: the registry accepts it."""
        contract.check_registration()

    def test_is_applicable_is_pure_and_fast(self, contract: Contract) -> None:
        """Same answer for equal problems in any order, within budget, with reasons."""
        contract.check_is_applicable()

    @pytest.mark.parametrize("direction", [d.value for d in DIRECTIONS])
    def test_matches_reference(self, contract: Contract, direction: str) -> None:
        """Results match the float64 reference in each direction the solver claims."""
        if Direction.parse(direction) not in contract.problems.claimed_directions:
            if not contract.problems.claimed_directions:
                contract.check_correctness()  # raises: applies to nothing at all
            pytest.skip(f"{contract.name} claims no {direction} problem")
        contract.check_correctness(direction)

    def test_workspace_size_is_honest(self, contract: Contract) -> None:
        """Exactly the declared workspace suffices; less fails cleanly or still is right."""
        contract.check_workspace()

    def test_perf_configs_are_valid_or_rejected(self, contract: Contract) -> None:
        """Every config of the space runs right or is rejected by is_valid_perf_config."""
        from miocore.solver.interface import TunableSolver

        if not isinstance(contract.solver, TunableSolver):
            pytest.skip(f"{contract.name} is not tunable")
        contract.check_perf_configs()

    def test_wti_is_positive_and_finite(self, contract: Contract) -> None:
        """wti is a finite fraction of peak in (0, 1] on every applicable problem."""
        contract.check_wti()

    def test_inapplicable_problems_are_never_run(self, contract: Contract, tmp_path: Path) -> None:
        """find and immediate mode never size, build or run a declined problem."""
        if not contract.problems.inapplicable:
            pytest.skip(f"{contract.name} declined none of the generated problems")
        contract.check_inapplicable_never_run(tmp_path)
