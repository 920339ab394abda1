"""The ``miocore`` command line: driver flags, conv, solvers, db wiring, ``python -m miocore``."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_solvers import BrokenSolver, TimedSolver, TunableTimedSolver

import miocore
from miocore import cli
from miocore.cli import driver_flags, output
from miocore.problem import Direction
from miocore.solver import ConvSolution, not_applicable
from miocore.solver.registry import Registry

SMALL = [
    "-n",
    "2",
    "-c",
    "4",
    "-H",
    "6",
    "-W",
    "6",
    "-k",
    "4",
    "-y",
    "3",
    "-x",
    "3",
    "-p",
    "1",
    "-q",
    "1",
]


@pytest.fixture(autouse=True)
def _user_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "cli-user-db"))


@pytest.fixture
def registry() -> Registry:
    return Registry.from_solvers(
        [
            TimedSolver("test.fast", delay_s=0.0),
            TimedSolver("test.slow", delay_s=0.02),
        ],
        plugin="testplug",
        distribution="miocore-test",
        version="1.2.3",
    )


def problems_of(argv: list[str], command: str = "conv") -> list[miocore.ConvProblem]:
    args = cli.build_parser().parse_args([command, *argv])
    return driver_flags.build_problems(
        driver_flags.driver_values(args), driver_flags.CONV_COMMANDS[command]
    )


# -- flag parsing ---------------------------------------------------------------------------


def test_defaults_are_miopendrivers() -> None:
    (p,) = problems_of(["-F", "1"])
    assert p.x.lengths == (100, 3, 32, 32)
    assert p.w.lengths == (32, 3, 3, 3)
    assert p.y.lengths == (100, 32, 30, 30)
    assert p.direction is Direction.FORWARD
    assert p.conv.pads == (0, 0) and p.conv.strides == (1, 1) and p.conv.dilations == (1, 1)
    assert p.dtype.value == "float32"


def test_2d_flags_give_the_miopen_key() -> None:
    argv = [
        "-n",
        "64",
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
        "-u",
        "1",
        "-v",
        "1",
        "-F",
        "1",
    ]
    (p,) = problems_of(argv)
    assert p.key == "64-56-56-3x3-64-56-56-64-1x1-1x1-1x1-0-NCHW-FP32-F"


def test_long_names_and_attached_values() -> None:
    (a,) = problems_of(
        [
            "--batchsize",
            "32",
            "--in_channels",
            "256",
            "--in_h",
            "56",
            "--in_w",
            "56",
            "--out_channels",
            "512",
            "--fil_h",
            "1",
            "--fil_w",
            "1",
            "--conv_stride_h",
            "2",
            "--conv_stride_w",
            "2",
            "--forw",
            "2",
            "--in_layout",
            "NHWC",
            "--out_layout",
            "NHWC",
            "--fil_layout",
            "NHWC",
        ],
        "convfp16",
    )
    (b,) = problems_of(
        [
            "-n32",
            "-c256",
            "-H56",
            "-W56",
            "-k512",
            "-y1",
            "-x1",
            "-u2",
            "-v2",
            "-F2",
            "-INHWC",
            "-ONHWC",
            "-fNHWC",
        ],
        "convfp16",
    )
    assert a == b
    assert a.key == "512-28-28-1x1-256-56-56-32-0x0-2x2-1x1-0-NHWC-NHWC-NHWC-FP16-B"


def test_output_and_filter_layouts_default_to_nchw_as_miopendriver() -> None:
    # MIOpenDriver's -O and -f default to NCHW whatever -I says.
    (p,) = problems_of(["-n2", "-c4", "-H5", "-W5", "-k8", "-F1", "-I", "NHWC"])
    assert (p.x.layout, p.w.layout, p.y.layout) == ("NHWC", "NCHW", "NCHW")
    assert p.key.endswith("-NHWC-NCHW-NCHW-FP32-F")


def test_3d_flags() -> None:
    (p,) = problems_of(
        [
            "-_",
            "3",
            "-n",
            "2",
            "-c",
            "4",
            "-!",
            "8",
            "-H",
            "9",
            "-W",
            "10",
            "-k",
            "6",
            "-@",
            "3",
            "-y",
            "3",
            "-x",
            "1",
            "-$",
            "1",
            "-p",
            "1",
            "-q",
            "0",
            "-#",
            "2",
            "-u",
            "1",
            "-v",
            "1",
            "-^",
            "1",
            "-l",
            "2",
            "-j",
            "1",
            "-F",
            "4",
        ]
    )
    assert p.x.lengths == (2, 4, 8, 9, 10)
    assert p.w.lengths == (6, 4, 3, 3, 1)
    assert p.conv.pads == (1, 1, 0)
    assert p.conv.strides == (2, 1, 1)
    assert p.conv.dilations == (1, 2, 1)
    assert p.y.lengths == (2, 6, 4, 7, 10)
    assert p.x.layout == "NCDHW"
    assert p.direction is Direction.BACKWARD_WEIGHTS
    (q,) = problems_of(
        [
            "--spatial_dim",
            "3",
            "--in_d",
            "8",
            "--fil_d",
            "3",
            "--pad_d",
            "1",
            "--conv_stride_d",
            "2",
            "--dilation_d",
            "1",
            "-I",
            "NHWC",
            "-F",
            "1",
        ]
    )
    assert q.x.layout == "NDHWC"  # 2-D layout names are taken as their 3-D equivalents
    assert q.x.lengths[2] == 8


def test_groups_and_layouts_per_tensor() -> None:
    (p,) = problems_of(
        [
            "-n",
            "1",
            "-c",
            "8",
            "-k",
            "16",
            "-g",
            "4",
            "-I",
            "NHWC",
            "-O",
            "NCHW",
            "-f",
            "NCHW",
            "-F",
            "1",
        ]
    )
    assert p.w.lengths == (16, 2, 3, 3)
    assert p.groups == 4
    assert (p.x.layout, p.w.layout, p.y.layout) == ("NHWC", "NCHW", "NCHW")
    assert p.key.endswith("-NHWC-NCHW-NCHW-FP32-F_g4")


def test_transpose() -> None:
    (p,) = problems_of(
        [
            "-m",
            "trans",
            "-n",
            "1",
            "-c",
            "8",
            "-H",
            "5",
            "-W",
            "5",
            "-k",
            "4",
            "-y",
            "3",
            "-x",
            "3",
            "-u",
            "2",
            "-v",
            "2",
            "-p",
            "1",
            "-q",
            "1",
            "-Y",
            "1",
            "-X",
            "1",
            "-F",
            "1",
        ]
    )
    assert p.is_transposed
    assert p.w.lengths == (8, 4, 3, 3)  # (C_in, C_out / groups, ...)
    assert p.y.lengths == (1, 4, 10, 10)
    assert p.canonical.direction is Direction.BACKWARD_DATA


@pytest.mark.parametrize(("command", "dtype"), [("convfp16", "float16"), ("convbfp16", "bfloat16")])
def test_half_types(command: str, dtype: str) -> None:
    (p,) = problems_of(["-F", "1"], command)
    assert p.dtype.value == dtype


@pytest.mark.parametrize(
    ("forw", "expected"),
    [
        (0, ["forward", "backward_data", "backward_weights"]),
        (1, ["forward"]),
        (2, ["backward_data"]),
        (4, ["backward_weights"]),
        (3, ["forward", "backward_data"]),
        (5, ["forward", "backward_weights"]),
        (6, ["backward_data", "backward_weights"]),
        (7, ["forward", "backward_data", "backward_weights"]),
    ],
)
def test_direction_flag(forw: int, expected: list[str]) -> None:
    assert [p.direction.value for p in problems_of(["-F", str(forw)])] == expected


def test_flags_are_declared_once() -> None:
    conv = cli.build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("conv", "convfp16", "convbfp16", "solvers"):
        dests = {a.dest for a in conv[name]._actions}
        assert {f.dest for f in cli.DRIVER_FLAGS} <= dests


def test_given_flags_are_told_apart_from_defaults() -> None:
    args = cli.build_parser().parse_args(["solvers", "-c", "8"])
    assert driver_flags.given_driver_flags(args) == {"in_channels": 8}
    assert driver_flags.driver_values(args)["batchsize"] == 100


def test_H_is_height_and_h_is_help(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli.build_parser().parse_args(["conv", "-H", "7"])
    assert args.in_h == 7
    assert cli.main(["conv", "-h"]) == 0
    out = capsys.readouterr().out
    assert "--in_h" in out and "--help" in out
    assert cli.main(["conv", "--help"]) == 0


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["-c", "3", "-g", "2"], "-c/--in_channels=3"),
        (["-c", "4", "-k", "6", "-g", "4"], "-k/--out_channels=6"),
        (["-n", "0"], "-n/--batchsize=0"),
        (["-p", "-1"], "-p/--pad_h=-1"),
        (["-u", "0"], "-u/--conv_stride_h=0"),
        (["-F", "8"], "-F/--forw=8"),
        (["-I", "NWHC"], "-I/--in_layout='NWHC'"),
        (["-_", "3", "-I", "NCDHW", "-O", "NCHWX"], "-O/--out_layout='NCHWX'"),
        (["-Y", "1"], "-Y/--trans_output_pad_h=1"),
        (["-H", "2", "-W", "2", "-y", "5", "-x", "5"], "--fil_h"),
    ],
)
def test_bad_flag_values_exit_2_naming_the_flag(
    argv: list[str], named: str, registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["conv", *argv], registry=registry) == 2
    err = capsys.readouterr().err
    assert named in err
    assert "Traceback" not in err


def test_unparsable_flag_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conv", "-n", "many"]) == 2
    assert "-n/--batchsize" in capsys.readouterr().err
    assert cli.main(["conv", "-m", "deconv"]) == 2
    assert cli.main(["conv", "--in"]) == 2  # no abbreviations of long names


def test_no_command_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "COMMAND" in capsys.readouterr().err


def test_no_plugin_installed(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["conv", *SMALL, "-F", "1"], registry=Registry()) == 2
    err = capsys.readouterr().err
    assert "no solver plugin is installed" in err
    assert "Traceback" not in err


def test_no_plugin_lists_plugins_that_failed(capsys: pytest.CaptureFixture[str]) -> None:
    broken = miocore.PluginInfo(
        name="gemm",
        distribution="miocore-gemm",
        version="0.1",
        status="failed",
        error="ImportError: no module named blas",
    )
    assert cli.main(["conv", *SMALL], registry=Registry((), [broken])) == 2
    err = capsys.readouterr().err
    assert "no solver plugin is installed" in err and "no module named blas" in err


def test_bad_find_mode_and_iterations(
    registry: Registry, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["conv", *SMALL, "--find-mode", "4"], registry=registry) == 2
    assert "--find-mode" in capsys.readouterr().err
    assert cli.main(["conv", *SMALL, "-i", "0", "-t", "1"], registry=registry) == 2
    assert "-i/--iter" in capsys.readouterr().err


def test_nothing_applicable_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    reg = Registry.from_solvers([TimedSolver("test.fwd_only", applies_to="forward")])
    assert cli.main(["conv", *SMALL, "-F", "2"], registry=reg) == 2
    err = capsys.readouterr().err
    assert "only forward" in err and "Traceback" not in err
    # The directions that can be solved still are; the exit status says one could not.
    assert cli.main(["conv", *SMALL, "-F", "3"], registry=reg) == 2
    captured = capsys.readouterr()
    assert "Forward Convolution Verifies OK" in captured.out
    assert "only forward" in captured.err


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
