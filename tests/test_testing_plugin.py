"""miocore.testing as a pytest plugin: opt-in only, its fixtures, the gpu marker, and the
SolverContract suite reporting a broken solver by rule. Runs pytest inside pytest (pytester)."""

from __future__ import annotations

import numpy  # noqa: F401  (imported here: pytester's in-process runs cannot re-import it)
import pytest

import miocore.testing
import miocore.testing.contract
import miocore.testing.plugin  # noqa: F401

pytest_plugins = ["pytester"]

SOLVERS = '''
from typing import Any

import numpy as np

import miocore
from miocore import APPLICABLE, Algorithm, ConvSolution, Solver, not_applicable, reference


class RefSolver(Solver):
    """Forward only, through the reference."""

    name = "kit.ref"
    algorithm = Algorithm.DIRECT

    def is_applicable(self, ctx: Any, problem: Any) -> Any:
        if problem.direction is not miocore.Direction.FORWARD:
            return not_applicable("forward only")
        return APPLICABLE

    def wti(self, ctx: Any, problem: Any) -> float:
        return 0.5

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> Any:
        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: Any) -> None:
                params.y[...] = reference.convolution(params.problem, x=params.x, w=params.w)

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


class OffByOne(RefSolver):
    name = "kit.off_by_one"

    def get_solution(self, ctx: Any, problem: Any, perf_config: Any = None) -> Any:
        def factory(_kernels: Any) -> Any:
            def invoker(_handle: Any, params: Any) -> None:
                params.y[...] = reference.convolution(params.problem, x=params.x, w=params.w) + 1

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)
'''


@pytest.fixture
def kit(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(kit_solvers=SOLVERS)
    pytester.syspathinsert()
    return pytester


def test_contract_suite_passes_a_good_solver_and_names_the_broken_rule(
    kit: pytest.Pytester,
) -> None:
    kit.makepyfile(
        test_kit="""
        from kit_solvers import OffByOne, RefSolver
        from miocore.testing import SolverContract

        pytest_plugins = ["miocore.testing"]


        class TestRef(SolverContract):
            solver = RefSolver()
            use_corpus = False


        class TestOffByOne(SolverContract):
            solver = OffByOne()
            use_corpus = False
        """
    )
    result = kit.runpytest("-q", "-p", "no:cacheprovider", "-rfs")
    # Per class: registration, is_applicable, 3 directions, workspace, perf configs, wti,
    # never-run. Only forward is claimed; neither solver is tunable.
    outcomes = result.parseoutcomes()
    assert outcomes == {"passed": 10, "failed": 2, "skipped": 6}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*TestOffByOne::test_matches_reference*forward*",
            "*TestOffByOne::test_workspace_size_is_honest*",
            "*claims no backward_data problem*",
            "*is not tunable*",
        ]
    )
    assert "solver='kit.off_by_one': breaks the correctness rule on forward" in result.stdout.str()


def test_fixtures_give_a_private_registry_and_handle(kit: pytest.Pytester) -> None:
    kit.makepyfile(
        test_fixtures="""
        import pluggy

        import miocore
        from kit_solvers import RefSolver

        pytest_plugins = ["miocore.testing"]


        def test_plugin_manager(miocore_plugin_manager):
            assert isinstance(miocore_plugin_manager, pluggy.PluginManager)
            assert miocore_plugin_manager.get_plugins() == set()
            assert hasattr(miocore_plugin_manager.hook, "miocore_solvers")


        def test_registry(miocore_registry):
            reg = miocore_registry(RefSolver(), distribution="kit-dist", version="9")
            assert reg.names() == ["kit.ref"]
            assert reg.get("kit.ref").distribution == "kit-dist"


        def test_handle(miocore_cpu_handle, miocore_db_dir):
            h = miocore_cpu_handle(RefSolver())
            p = miocore.ConvProblem.from_sizes(
                "forward", n=1, c=2, k=2, in_spatial=(5, 5), filter_spatial=(3, 3)
            )
            sols = h.find_solutions(p, find_mode="NORMAL")
            assert [s.solver for s in sols] == ["kit.ref"]
            assert str(h.find_db.user_path).startswith(str(miocore_db_dir))


        def test_clean_env(monkeypatch, miocore_clean_env):
            import os
            assert "MIOCORE_FIND_MODE" not in os.environ


        @__import__("pytest").mark.gpu
        def test_on_a_gpu():
            raise AssertionError("must be skipped on a machine without a GPU backend")
        """
    )
    result = kit.runpytest(
        "-q", "-p", "no:cacheprovider", "--strict-markers", "-rs", "-W", "ignore"
    )
    result.assert_outcomes(passed=4, skipped=1)
    result.stdout.fnmatch_lines(["*no CUDA or HIP device*"])


def test_plugin_is_never_loaded_without_opting_in(kit: pytest.Pytester) -> None:
    kit.makepyfile(
        test_plain="""
        def test_wants_the_fixture(miocore_cpu_handle):
            pass
        """
    )
    result = kit.runpytest("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'miocore_cpu_handle' not found*"])


def test_missing_solver_attribute_is_explained(kit: pytest.Pytester) -> None:
    kit.makepyfile(
        test_forgot="""
        from miocore.testing import SolverContract

        class TestForgot(SolverContract):
            pass
        """
    )
    result = kit.runpytest("-q", "-p", "no:cacheprovider", "-x")
    result.stdout.fnmatch_lines(["*TestForgot must set `solver = YourSolver()`*"])
