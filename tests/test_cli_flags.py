"""The ``miocore`` command line's MIOpenDriver flags: parsing, defaults, bad input."""

from __future__ import annotations

import pytest
from cli_common import SMALL, problems_of, two_solver_registry
from fake_solvers import TimedSolver

import miocore
from miocore import cli
from miocore.cli import driver_flags
from miocore.problem import Direction
from miocore.solver.registry import Registry


@pytest.fixture
def registry() -> Registry:
    return two_solver_registry()


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
