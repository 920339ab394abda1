"""The ``miocore`` command line: ``solvers``, the db wiring, ``python -m``, output helpers."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_common import two_solver_registry
from fake_solvers import BrokenSolver, TimedSolver

import miocore
from miocore import cli
from miocore.cli import driver_flags, output
from miocore.solver import not_applicable
from miocore.solver.registry import Registry


@pytest.fixture
def registry() -> Registry:
    return two_solver_registry()


# -- solvers --------------------------------------------------------------------------------------


def test_solvers_lists_installed(registry: Registry, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["solvers"], registry=registry) == 0
    out = capsys.readouterr().out
    for text in (
        "test.fast",
        "test.slow",
        str(registry.get("test.fast").id),
        "direct",
        "testplug",
        "miocore-test",
        "1.2.3",
    ):
        assert text in out


def test_solvers_lists_plugin_failures(capsys: pytest.CaptureFixture[str]) -> None:
    reg = Registry(
        (),
        [
            miocore.PluginInfo(
                name="fft",
                distribution="miocore-fft",
                version="0.2",
                status="failed",
                error="ImportError: no scipy",
            ),
            miocore.PluginInfo(
                name="gemm",
                distribution="miocore-gemm",
                version="0.1",
                status="disabled",
                error="MIOCORE_DISABLE_PLUGINS",
            ),
        ],
    )
    assert cli.main(["solvers"], registry=reg) == 0
    out = capsys.readouterr().out
    assert "No solver plugin is installed" in out
    assert "no scipy" in out and "MIOCORE_DISABLE_PLUGINS" in out and "disabled" in out


def test_solvers_with_a_problem_says_why_not(capsys: pytest.CaptureFixture[str]) -> None:
    class Picky(TimedSolver):
        def is_applicable(self, ctx, problem):  # type: ignore[no-untyped-def]
            if problem.filter_spatial != (1, 1):
                return not_applicable("only 1x1 filters")
            return True

    reg = Registry.from_solvers(
        [
            TimedSolver("test.any", workspace=2048),
            Picky("test.pointwise"),
            BrokenSolver("is_applicable"),
        ]
    )
    assert (
        cli.main(
            [
                "solvers",
                "-n",
                "1",
                "-c",
                "64",
                "-H",
                "56",
                "-W",
                "56",
                "-k",
                "64",
                "-y",
                "3",
                "-x",
                "3",
                "-p",
                "1",
                "-q",
                "1",
                "-F",
                "1",
            ],
            registry=reg,
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "forward 64-56-56-3x3-64-56-56-1-1x1-1x1-1x1-0-NCHW-FP32-F" in out
    assert "1 of 3 solvers apply" in out
    assert "only 1x1 filters" in out
    assert "2.0 KiB" in out
    assert "is_applicable raised RuntimeError: boom in is_applicable" in out
    assert "backward_data" not in out


def test_solvers_json_all_directions(capsys: pytest.CaptureFixture[str]) -> None:
    reg = Registry.from_solvers([TimedSolver("test.fwd", applies_to="forward")])
    assert cli.main(["solvers", "--json", "-c", "8", "--dtype", "fp16"], registry=reg) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["solvers"][0]["name"] == "test.fwd"
    assert [p["direction"] for p in doc["problems"]] == [
        "forward",
        "backward_data",
        "backward_weights",
    ]
    assert doc["problems"][0]["key"].endswith("FP16-F")
    rows = [p["solvers"][0] for p in doc["problems"]]
    assert [r["applicable"] for r in rows] == [True, False, False]
    assert rows[1]["reason"] == "only forward"


def test_solvers_bad_problem_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["solvers", "-c", "3", "-g", "2"], registry=Registry()) == 2
    assert "-c/--in_channels=3" in capsys.readouterr().err


# -- db, python -m --------------------------------------------------------------------------------


def test_db_command_is_wired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("miocore.cli.db")
    assert cli.main(["db", "path", "--user-db-path", str(tmp_path), "--json"]) == 0
    assert str(tmp_path) in capsys.readouterr().out


def test_db_parser_comes_from_cli_db() -> None:
    pytest.importorskip("miocore.cli.db")
    from miocore.cli.db import run_db_command

    args = cli.build_parser().parse_args(["db", "path"])
    assert args.func is run_db_command


def test_python_dash_m_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "miocore", "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    for command in ("conv", "convfp16", "convbfp16", "solvers"):
        assert command in done.stdout


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (2048, "2.0 KiB (2048 B)"),
        (66810 * 1024, "65.2 MiB (68413440 B)"),
        (3 * 1024**4, "3.0 TiB (3298534883328 B)"),
    ],
)
def test_byte_sizes(n: int, text: str) -> None:
    assert output.fmt_bytes(n) == text


def test_parse_directions_rejects_bools() -> None:
    with pytest.raises(miocore.InvalidArgumentError):
        driver_flags.parse_directions(True)  # type: ignore[arg-type]


def test_namespace_without_flags_uses_defaults() -> None:
    values = driver_flags.driver_values(argparse.Namespace())
    assert values["batchsize"] == 100 and values["mode"] == "conv"


def test_solvers_show_numerical_notes(capsys: pytest.CaptureFixture[str]) -> None:
    class Lossy(TimedSolver):
        numerical_notes = frozenset({"winograd", "down_convert"})

    reg = Registry.from_solvers([Lossy("test.lossy"), TimedSolver("test.exact")])
    assert cli.main(["solvers", "--json", "-c", "8"], registry=reg) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["notes"] for r in doc["solvers"]} == {
        "test.lossy": ["down_convert", "winograd"],
        "test.exact": [],
    }
    assert doc["problems"][0]["solvers"][0]["notes"] == ["down_convert", "winograd"]
    assert cli.main(["solvers", "-c", "8", "-F", "1"], registry=reg) == 0
    out = capsys.readouterr().out
    assert "down_convert,winograd" in out and "notes" in out


def test_solvers_shows_a_setup_refusal_as_not_applicable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Refusing(TimedSolver):
        """Applies by its listing; its (deferred) setup refuses, as a vendor plan may."""

        deferred_setup = True

        def workspace_size(self, ctx, problem, perf_config=None):  # type: ignore[no-untyped-def]
            raise miocore.NotApplicableError(
                "the library refuses this plan", field="solver", value="x"
            )

    reg = Registry.from_solvers([TimedSolver("test.any"), Refusing("test.refusing")])
    assert cli.main(["solvers", "--json", "-c", "8", "-F", "1"], registry=reg) == 0
    rows = {r["solver"]: r for r in json.loads(capsys.readouterr().out)["problems"][0]["solvers"]}
    assert rows["test.any"]["applicable"]
    assert not rows["test.refusing"]["applicable"]
    assert "refuses this plan" in rows["test.refusing"]["reason"]
