"""``miocore conv``: find, time, verify; accuracy and determinism flags."""

from __future__ import annotations

import io
import json

import pytest
from cli_common import SMALL, two_solver_registry
from fake_solvers import BrokenSolver, TimedSolver, TunableTimedSolver

import miocore
from miocore import cli
from miocore.solver import ConvSolution
from miocore.solver.registry import Registry


@pytest.fixture
def registry() -> Registry:
    return two_solver_registry()


# -- conv -----------------------------------------------------------------------------------------


def test_conv_finds_times_and_verifies(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    status = cli.main(["conv", *SMALL, "-F", "1", "-t", "1", "-i", "3"], registry=registry)
    out = capsys.readouterr().out
    assert status == 0, out
    assert "Forward Convolution: 4-6-6-3x3-4-6-6-2-1x1-1x1-1x1-0-NCHW-FP32-F" in out
    assert "solver:    test.fast" in out
    assert "ms (measured" in out
    assert "GFLOP/s" in out
    assert "workspace: 0 B" in out
    assert "source:    measured" in out
    assert "over 3 iterations" in out
    assert "Forward Convolution Verifies OK" in out
    assert "tolerance 1e-05" in out


def test_conv_all_directions(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conv", *SMALL], registry=registry) == 0
    out = capsys.readouterr().out
    for title in (
        "Forward Convolution",
        "Backward Data Convolution",
        "Backward Weights Convolution",
    ):
        assert f"{title} Verifies OK" in out


def test_second_run_reads_the_find_db(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["conv", *SMALL, "-F", "1", "-V", "0"], registry=registry) == 0
    assert "source:    measured" in capsys.readouterr().out
    assert cli.main(["conv", *SMALL, "-F", "1", "-V", "0"], registry=registry) == 0
    assert "source:    find-db" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra",
    [
        ["-g", "2", "-c", "8", "-k", "8"],
        ["-m", "trans", "-u", "2", "-v", "2"],
        ["-I", "NHWC"],
        ["-_", "3", "-!", "4", "-@", "3", "-$", "1"],
    ],
)
def test_conv_variants_verify(
    extra: list[str], registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["conv", *SMALL, *extra], registry=registry) == 0
    out = capsys.readouterr().out
    assert out.count("Verifies OK") == 3
    if "trans" in extra:
        assert "Transposed Forward Convolution Verifies OK" in out


@pytest.mark.parametrize(("command", "tolerance"), [("convfp16", "0.005"), ("convbfp16", "0.03")])
def test_half_precision_conv(
    command: str, tolerance: str, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main([command, *SMALL, "-F", "1"], registry=registry) == 0
    out = capsys.readouterr().out
    assert "Verifies OK" in out and f"tolerance {tolerance}" in out
    assert "FP16" in out or "BF16" in out


class WrongSolver(TimedSolver):
    """Writes a wrong answer: verification must catch it."""

    def get_solution(self, ctx, problem, perf_config=None) -> ConvSolution:  # type: ignore[no-untyped-def]
        def factory(_kernels):  # type: ignore[no-untyped-def]
            def invoker(_handle, params):  # type: ignore[no-untyped-def]
                getattr(params, params.problem.direction.output_tensor)[...] = 0.5

            return invoker

        return ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


def test_verification_failure_exits_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MIOCORE_ACCURACY", "fast")  # find's own check would leave it out
    reg = Registry.from_solvers([WrongSolver("test.wrong")])
    assert cli.main(["conv", *SMALL, "-F", "1"], registry=reg) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "relative error" in out and "tolerance 1e-05" in out
    assert cli.main(["conv", *SMALL, "-F", "1", "-V", "0"], registry=reg) == 0


def test_solver_that_raises_while_running_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    reg = Registry.from_solvers([BrokenSolver("run")])
    assert cli.main(["conv", *SMALL, "-F", "1", "-S", "test.broken_run"], registry=reg) == 1
    err = capsys.readouterr().err
    assert "test.broken_run" in err and "boom in run" in err


def test_chosen_solver_through_immediate_mode(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        cli.main(
            ["conv", *SMALL, "-F", "1", "-S", "test.slow", "-t", "1", "-i", "2"], registry=registry
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "solver:    test.slow" in out and "immediate mode" in out
    assert "Verifies OK" in out
    slow_id = registry.get("test.slow").id
    assert cli.main(["conv", *SMALL, "-F", "1", "-S", str(slow_id)], registry=registry) == 0
    assert "solver:    test.slow" in capsys.readouterr().out
    assert cli.main(["conv", *SMALL, "-F", "1", "-S", "-1"], registry=registry) == 0
    assert "solver:    test.fast" in capsys.readouterr().out


def test_unknown_solver_exits_2(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conv", *SMALL, "-S", "nope"], registry=registry) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "test.fast" in err


def test_exhaustive_search_tunes(capsys: pytest.CaptureFixture[str]) -> None:
    reg = Registry.from_solvers([TunableTimedSolver()])
    assert (
        cli.main(
            ["conv", *SMALL, "-F", "1", "-s", "1", "--explain", "--find-mode", "normal"],
            registry=reg,
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "report: tuned test.tunable" in out
    assert "find mode NORMAL" in out


def test_workspace_limit(capsys: pytest.CaptureFixture[str]) -> None:
    reg = Registry.from_solvers(
        [TimedSolver("test.big", workspace=4096), TimedSolver("test.small", delay_s=0.01)]
    )
    assert cli.main(["conv", *SMALL, "-F", "1", "--workspace-limit", "100"], registry=reg) == 0
    assert "solver:    test.small" in capsys.readouterr().out


def test_json_output(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        cli.main(["conv", *SMALL, "-F", "3", "-t", "1", "-i", "2", "--json"], registry=registry)
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True
    assert [r["direction"] for r in doc["results"]] == ["forward", "backward_data"]
    first = doc["results"][0]
    assert first["solver"] == "test.fast" and first["source"] == "measured"
    assert first["verify"]["ok"] is True and first["timed"]["iterations"] == 2


def test_progress_display_on_a_terminal(
    registry: Registry, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rich.console import Console

    buffers: list[io.StringIO] = []

    def console() -> Console:
        buffers.append(io.StringIO())
        return Console(file=buffers[-1], force_terminal=True, width=100)

    monkeypatch.setattr(cli.conv, "stderr_console", console)
    assert cli.main(["conv", *SMALL, "-F", "1", "-V", "0"], registry=registry) == 0
    assert "find Forward Convolution" in buffers[-1].getvalue()
    assert cli.main(["conv", *SMALL, "-F", "2", "-V", "0", "--quiet"], registry=registry) == 0
    assert buffers[-1].getvalue() == ""


def test_conv_with_the_installed_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    if not len(miocore.default_registry()):
        pytest.skip("no solver plugin is installed")
    assert cli.main(["conv", *SMALL, "-F", "0", "-t", "1", "-i", "2"]) == 0
    assert capsys.readouterr().out.count("Verifies OK") == 3


class _Approximate(TimedSolver):
    """Correct up to a relative perturbation of 5e-5, like a transform-based algorithm."""

    def __init__(self, declared: float | None) -> None:
        super().__init__("test.approx")
        self.declared = declared

    def expected_error(self, ctx, problem, perf_config=None):  # type: ignore[no-untyped-def]
        return self.declared

    def get_solution(self, ctx, problem, perf_config=None):  # type: ignore[no-untyped-def]
        exact = super().get_solution(ctx, problem, perf_config)

        def factory(kernels):  # type: ignore[no-untyped-def]
            run = exact.invoker_factory(kernels)

            def invoker(handle, params):  # type: ignore[no-untyped-def]
                run(handle, params)
                out = getattr(params, params.problem.direction.output_tensor)
                out[...] = out * (1 + 5e-5)

            return invoker

        return miocore.ConvSolution(solver=self.name, workspace_size=0, invoker_factory=factory)


@pytest.mark.parametrize(("declared", "status"), [(None, 1), (1e-4, 0)])
def test_verification_accepts_the_solvers_declared_error(
    declared: float | None,
    status: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MIOCORE_ACCURACY", "fast")  # the driver's -V check, not find's
    reg = miocore.Registry.from_solvers([_Approximate(declared)])
    assert cli.main(["conv", *SMALL, "-F", "1", "-V", "1"], registry=reg) == status
    out = capsys.readouterr().out
    assert ("Verifies OK" in out) == (status == 0)
    assert ("tolerance 0.0001" in out) == (declared is not None)


def test_conv_accuracy_and_deterministic_flags(capsys: pytest.CaptureFixture[str]) -> None:
    """--accuracy strict leaves out a faster solver with a lossy note, --deterministic a faster
    non-deterministic one; the choice shows in the algorithm line."""

    class Lossy(TimedSolver):
        numerical_notes = frozenset({"winograd"})

    class Atomic(TimedSolver):
        numerical_notes = frozenset({"nondeterministic"})

    def chosen(*flags: str) -> str:
        reg = Registry.from_solvers(
            [
                Lossy("test.lossy", delay_s=0.0),
                Atomic("test.atomic", delay_s=0.001),
                TimedSolver("test.exact", delay_s=0.004),
            ]
        )
        argv = ["conv", *SMALL, "-F", "1", "-V", "0", "--find-mode", "NORMAL", "--json", *flags]
        assert cli.main(argv, registry=reg) == 0
        return json.loads(capsys.readouterr().out)["results"][0]["solver"]

    assert chosen("--accuracy", "fast") == "test.lossy"
    assert chosen("--accuracy", "strict") == "test.atomic"
    assert chosen("--accuracy", "strict", "--deterministic") == "test.exact"
    assert cli.main(["conv", *SMALL, "--accuracy", "loose"]) == 2
    assert "--accuracy" in capsys.readouterr().err
