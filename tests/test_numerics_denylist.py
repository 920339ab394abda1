"""The deny list (miocore.db.denylist) and ``miocore db deny list/add/remove``."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import pytest

from miocore import InvalidArgumentError, MiocoreError
from miocore.cli.deny import add_deny_parser, run_deny_command
from miocore.db.deny_entries import DenyEntry, check_versions
from miocore.db.denylist import DenyList

KEY = "1-1-5-2x2-1-1-6-1-1x1-1x1-2x1-0-NCHW-FP32-F"


def test_entry_round_trips_and_matches(tmp_path: Path) -> None:
    entry = DenyEntry(
        solver="fft.overlap_save",
        versions=">=0.1, <0.2.1",
        key_pattern="*-2x2-*-2x1-0-NCHW-*",
        reason="noise over an all-zero answer",
        when="2026-11-24T15:00:00Z",
    )
    assert entry.versions == ">=0.1,<0.2.1"
    assert DenyEntry.from_line(entry.to_line()) == entry
    assert entry.matches("fft.overlap_save", "0.2.0", KEY)
    assert entry.matches("fft.overlap_save", "0.1", KEY)
    assert not entry.matches("fft.overlap_save", "0.2.1", KEY)  # fixed in 0.2.1
    assert not entry.matches("fft.overlap_save", "0.0.9", KEY)
    assert not entry.matches("winograd.rxs", "0.2.0", KEY)
    assert not entry.matches("fft.overlap_save", "0.2.0", KEY.replace("2x1", "1x1"))
    assert entry.matches("fft.overlap_save", None, KEY)  # unknown version: denied in doubt
    assert not entry.matches("fft.overlap_save", "0.2.0", None)  # not every key
    assert DenyEntry(solver="a.b", reason="r").matches("a.b", "9", None)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("solver", "has space"),
        ("reason", "a | b"),
        ("reason", ""),
        ("versions", "0.2"),
        ("versions", ">=x"),
        ("key_pattern", "a\nb"),
        ("when", "yesterday"),
    ],
)
def test_bad_fields_are_named(field: str, value: str) -> None:
    kwargs = {"solver": "a.b", "reason": "r", field: value}
    with pytest.raises(InvalidArgumentError) as info:
        DenyEntry(**kwargs)  # type: ignore[arg-type]
    assert info.value.field == field and info.value.value == value


def test_check_versions() -> None:
    assert check_versions(" * ") == "*"
    assert check_versions("==1.2.3") == "==1.2.3"
    with pytest.raises(MiocoreError, match="versions"):
        check_versions("")


def test_add_remove_and_layers(tmp_path: Path) -> None:
    user, system = tmp_path / "user", tmp_path / "system"
    system.mkdir()
    (system / "dev0.deny.txt").write_text(
        "# shipped\nwinograd.rxs | * | *-FP16-F | too coarse in fp16 | 2026-11-01\n"
    )
    deny = DenyList("dev0", user_dir=user, system_dir=system)
    assert deny.match("winograd.rxs", "0.1", "x-FP16-F")[0] == "system"
    assert not deny.is_denied("winograd.rxs", "0.1", "x-FP32-F")
    deny.add(DenyEntry(solver="fft.overlap_save", reason="wrong", key_pattern=KEY))
    deny.add(DenyEntry(solver="fft.overlap_save", reason="wrong in 0.1", versions="<0.2"))
    deny.add(DenyEntry(solver="direct.naive", reason="slow"))
    text = (user / "dev0.deny.txt").read_text()
    assert text.startswith("# miocore deny list") and text.count("\n") == 4
    layer, entry = deny.match("fft.overlap_save", "0.3", KEY)
    assert layer == "user" and entry.reason == "wrong"
    removed = deny.remove("fft.overlap_save", key_pattern=KEY)
    assert [e.reason for e in removed] == ["wrong"]
    assert not deny.is_denied("fft.overlap_save", "0.3", KEY)
    assert deny.is_denied("fft.overlap_save", "0.1.5", KEY)
    assert [e.reason for e in deny.remove("fft.overlap_save")] == ["wrong in 0.1"]
    assert deny.remove("winograd.rxs") == []  # the system list is read only
    assert deny.is_denied("direct.naive") and deny.is_denied("winograd.rxs", "1", "a-FP16-F")


def test_bad_lines_reported_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "dev0.deny.txt"
    path.write_text(
        "# header\n"
        "\n"
        "fft.overlap_save | * | * | fine | 2026-11-24\n"
        "only two | fields\n"
        "gemm.im2col | 0.2 | * | bad range | 2026-11-24\n"
        "gemm.im2col | * | * | bad date | someday\n"
        "direct.naive | * | * | also fine | 2026-11-24T10:00:00Z\n"
    )
    deny = DenyList("dev0", user_dir=tmp_path, system_dir=tmp_path / "none")
    with caplog.at_level(logging.WARNING, logger="miocore.denylist"):
        entries = deny.entries()
    assert [e.solver for _, e in entries] == ["fft.overlap_save", "direct.naive"]
    lines = [(p.path, p.line) for p in deny.problems]
    assert lines == [(path, 4), (path, 5), (path, 6)]
    assert "versions='0.2'" in str(deny.problems[1]) and f"{path}:5:" in str(deny.problems[1])
    assert "when='someday'" in str(deny.problems[2])
    assert sum("deny list line skipped" in r.message for r in caplog.records) == 3
    # removing keeps the bad lines as they were, for the user to fix
    deny.remove("direct.naive")
    assert "only two | fields" in path.read_text()


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "dev0.deny.txt"
    path.write_bytes(b"\xff\xfe not utf-8 \xff\n")
    deny = DenyList("dev0", user_dir=tmp_path, system_dir=tmp_path)
    assert deny.entries() == [] and deny.problems[0].line == 0


def test_edits_by_hand_are_seen_by_a_running_list(tmp_path: Path) -> None:
    deny = DenyList("dev0", user_dir=tmp_path, system_dir=tmp_path / "s")
    assert not deny.is_denied("a.b")
    (tmp_path / "dev0.deny.txt").write_text("a.b | * | * | by hand | 2026-11-24\n")
    assert deny.is_denied("a.b")


def _cli(tmp_path: Path, *argv: str) -> int:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--device")
    common.add_argument("--user-db-path", type=Path)
    common.add_argument("--system-db-path", type=Path)
    parser = argparse.ArgumentParser()
    add_deny_parser(parser.add_subparsers(dest="db_command"), common)
    args = parser.parse_args(
        [
            "deny",
            *argv,
            "--device",
            "dev0",
            "--user-db-path",
            str(tmp_path / "u"),
            "--system-db-path",
            str(tmp_path / "s"),
        ]
    )
    return run_deny_command(args)


def test_cli_add_list_remove(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _cli(tmp_path, "add", "fft.overlap_save", "--reason", "wrong", "--key", "*-F") == 0
    assert "denied in" in capsys.readouterr().out
    assert _cli(tmp_path, "list", "--json") == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["entries"][0]["solver"] == "fft.overlap_save"
    assert listed["entries"][0]["key_pattern"] == "*-F"
    assert _cli(tmp_path, "add", "x.y", "--reason", "a|b") == 1
    assert "reason='a|b'" in capsys.readouterr().err
    assert _cli(tmp_path, "remove", "x.y") == 1
    assert "no user entry matched" in capsys.readouterr().err
    assert _cli(tmp_path, "remove", "fft.overlap_save") == 0
    assert _cli(tmp_path, "list") == 0
    assert "(no entries)" in capsys.readouterr().out


def test_miocore_db_deny_through_the_main_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from miocore import cli

    where = ["--device", "dev1", "--user-db-path", str(tmp_path)]
    assert cli.main(["db", "deny", "add", "gemm.im2col", "--reason", "by hand", *where]) == 0
    assert cli.main(["db", "deny", "list", *where]) == 0
    assert "[user] gemm.im2col | * | * | by hand" in capsys.readouterr().out
    assert (tmp_path / "dev1.deny.txt").is_file()
