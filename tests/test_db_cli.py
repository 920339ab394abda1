"""``miocore db``: parsed through a parser built here, the way the main CLI wires it in."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from miocore.cli.db import add_db_parser, run_db_command
from miocore.db import FindDb, FindDbEntry, PerfDb
from miocore.problem import ConvProblem

DEVICE = "cpu_cli_8"


def key(n: int = 64, direction: str = "forward") -> str:
    return ConvProblem.from_sizes(
        direction, n=n, c=64, k=64, in_spatial=(56, 56), filter_spatial=(3, 3), pads=(1, 1)
    ).key


def main(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="miocore")
    add_db_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    assert args.func is run_db_command
    return args.func(args)


@pytest.fixture
def dirs(tmp_path: Path) -> list[str]:
    return [
        "--device",
        DEVICE,
        "--user-db-path",
        str(tmp_path / "user"),
        "--system-db-path",
        str(tmp_path / "system"),
    ]


@pytest.fixture
def find(tmp_path: Path) -> FindDb:
    db = FindDb(DEVICE, user_dir=tmp_path / "user", system_dir=tmp_path / "system")
    db.write(
        key(),
        [
            FindDbEntry(
                solver="gemm.im2col",
                algorithm="gemm",
                time_ms=1.25,
                workspace_size=4096,
                count=11,
                spread_ms=0.05,
                provenance={"plugin": "miocore-gemm", "plugin_version": "0.3"},
            ),
            FindDbEntry(solver="direct.naive", algorithm="direct", time_ms=3.5, workspace_size=0),
        ],
    )
    return db


def test_path_reports_locations_existence_and_size(
    dirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main("db", "path", *dirs) == 0
    out = capsys.readouterr().out
    user_file = tmp_path / "user" / f"{DEVICE}.db"
    assert f"user: {user_file} (does not exist yet)" in out
    assert f"system: {tmp_path / 'system' / f'{DEVICE}.db'} (does not exist)" in out
    assert not user_file.exists()  # asking where it is creates nothing
    FindDb(DEVICE, user_dir=tmp_path / "user").write(
        key(), [FindDbEntry(solver="a.b", algorithm="gemm", time_ms=1, workspace_size=0)]
    )
    assert main("db", "path", *dirs, "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["device"] == DEVICE
    assert data["user"]["exists"] and data["user"]["bytes"] == user_file.stat().st_size > 0
    assert data["system"] == {"path": str(tmp_path / "system" / f"{DEVICE}.db"), "exists": False}


def test_device_defaults_to_this_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from miocore.backends.cpu import cpu_device_info

    assert main("db", "path", "--user-db-path", str(tmp_path)) == 0
    identity = cpu_device_info().identity
    assert f"device: {identity}" in capsys.readouterr().out


def test_show_prints_records(
    find: FindDb, dirs: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main("db", "show", *dirs) == 0
    out = capsys.readouterr().out
    assert f"{key()} (user)" in out
    for text in ("gemm.im2col", "direct.naive", "1.25", "4,096", "miocore-gemm 0.3"):
        assert text in out
    assert main("db", "show", *dirs, "--key", key(n=2)) == 0
    assert "no FindDb records" in capsys.readouterr().out


def test_show_json_with_perf_and_layers(
    find: FindDb, dirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    PerfDb(DEVICE, user_dir=tmp_path / "user").put(key(), "igemm.t", '{"tile":8}', {})
    with FindDb(DEVICE, user_dir=tmp_path / "system") as system:
        system.write(
            key(n=4),
            [FindDbEntry(solver="sys.s", algorithm="fft", time_ms=2.0, workspace_size=1)],
        )
    assert main("db", "show", *dirs, "--json", "--perf") == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["layer"]) for r in data["find_db"]] == [
        (key(), "user"),
        (key(n=4), "system"),
    ]
    first = data["find_db"][0]["entries"][0]
    assert (first["solver"], first["count"], first["spread_ms"]) == ("gemm.im2col", 11, 0.05)
    assert first["provenance"]["plugin"] == "miocore-gemm"
    assert [(p["solver"], p["perf_config"]) for p in data["perf_db"]] == [("igemm.t", '{"tile":8}')]
    assert main("db", "show", *dirs, "--json", "--layer", "system") == 0
    data = json.loads(capsys.readouterr().out)
    assert [r["layer"] for r in data["find_db"]] == ["system"]


def test_export_import_round_trip(
    find: FindDb, dirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.fdb.txt"
    assert main("db", "export", *dirs, str(out)) == 0
    assert "exported 1 records" in capsys.readouterr().out
    line = out.read_text().strip()
    assert line == (
        f"{key()}=gemm.im2col:1.25,4096,miopenConvolutionFwdAlgoGEMM;"
        "direct.naive:3.5,0,miopenConvolutionFwdAlgoDirect"
    )
    assert main("db", "export", *dirs, "-") == 0
    assert capsys.readouterr().out.strip() == line

    other = tmp_path / "other"
    assert main("db", "import", "--device", DEVICE, "--user-db-path", str(other), str(out)) == 0
    assert "imported 1 records (2 entries)" in capsys.readouterr().out
    imported = FindDb(DEVICE, user_dir=other).records(key())[0]
    assert [(e.solver, e.time_ms) for e in imported.entries] == [
        ("gemm.im2col", 1.25),
        ("direct.naive", 3.5),
    ]


def test_import_skips_bad_lines_and_strict_refuses_them(
    dirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "bad.txt"
    src.write_text(f"{key()}=a.b:1,0,gemm\n{key(n=2)}=a.b:oops,0,gemm\n")
    assert main("db", "import", *dirs, str(src), "--strict") == 1
    err = capsys.readouterr().err
    assert "line=2" in err and "bad time" in err
    assert FindDb(DEVICE, user_dir=tmp_path / "user").keys() == []
    # By default: the good lines go in, exit 0, the skips reported by reason with examples.
    assert main("db", "import", *dirs, str(src)) == 0
    captured = capsys.readouterr()
    assert "skipped line 2" in captured.err and "skipped 1 bad lines" in captured.out
    assert "1  malformed entries" in captured.err and "warning" in captured.err
    assert FindDb(DEVICE, user_dir=tmp_path / "user").keys() == [key()]


def test_merge(
    find: FindDb, dirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.txt"
    src.write_text(f"{key()}=direct.naive:0.5,0,direct;new.one:9,0,fft\n")
    assert main("db", "merge", *dirs, str(src)) == 0
    out = capsys.readouterr().out
    assert "1 records changed, 1 entries added, 1 replaced" in out
    assert find.records(key())[0].solvers == ["direct.naive", "gemm.im2col", "new.one"]
    assert main("db", "merge", *dirs, str(tmp_path / "missing.db")) == 1
    assert "no such file" in capsys.readouterr().err


def test_clean(
    find: FindDb, dirs: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    perf = PerfDb(DEVICE, user_dir=tmp_path / "user")
    perf.put(key(), "gemm.im2col", "{}", {})
    find.write(
        key(n=2), [FindDbEntry(solver="gemm.im2col", algorithm="gemm", time_ms=1, workspace_size=0)]
    )
    assert main("db", "clean", *dirs) == 2
    assert "say what to clean" in capsys.readouterr().err
    assert main("db", "clean", *dirs, "--all", "--key", key()) == 2
    assert main("db", "clean", *dirs, "--solver", "gemm.im2col") == 0
    assert "deleted 2 FindDb entries and 1 PerfDb entries" in capsys.readouterr().out
    assert main("db", "clean", *dirs, "--key", key()) == 0
    assert find.keys() == []
    find.write(
        key(), [FindDbEntry(solver="not.installed", algorithm="gemm", time_ms=1, workspace_size=0)]
    )
    assert main("db", "clean", *dirs, "--stale") == 0
    assert find.keys() == []
    find.write(key(), [FindDbEntry(solver="a.b", algorithm="gemm", time_ms=1, workspace_size=0)])
    assert main("db", "clean", *dirs, "--all") == 0
    assert find.keys() == []


def test_db_without_a_command_says_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert main("db") == 2
    assert "choose a command" in capsys.readouterr().err
