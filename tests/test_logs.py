"""``MIOCORE_LOG_LEVEL`` / ``MIOPEN_LOG_LEVEL``: MIOpen's levels, bad values reported, not fatal."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import needs
import pytest

from miocore import logs


@pytest.fixture
def miocore_logger():
    """The ``miocore`` logger, restored after the test (level and handlers)."""
    logger = logging.getLogger("miocore")
    level, handlers = logger.level, list(logger.handlers)
    yield logger
    logger.setLevel(level)
    logger.handlers[:] = handlers


@pytest.mark.parametrize(
    ("raw", "level"),
    [
        ("0", logging.WARNING),
        ("1", logging.CRITICAL + 10),
        ("quiet", logging.CRITICAL + 10),
        ("2", logging.CRITICAL),
        ("3", logging.ERROR),
        ("Warning", logging.WARNING),
        ("5", logging.INFO),
        ("info", logging.INFO),
        ("6", logging.DEBUG),
        ("info2", logging.DEBUG),
        ("debug", logging.DEBUG),
        ("7", 1),
        (" trace ", 1),
    ],
)
def test_levels(raw: str, level: int) -> None:
    assert logs.parse_level(raw) == level


@pytest.mark.parametrize("raw", ["verbose", "8", "-1", "loud"])
def test_bad_levels_are_none(raw: str) -> None:
    assert logs.parse_level(raw) is None


def test_bad_level_warns_with_the_accepted_values(
    monkeypatch: pytest.MonkeyPatch, miocore_logger: logging.Logger
) -> None:
    miocore_logger.setLevel(logging.ERROR)
    monkeypatch.setenv("MIOCORE_LOG_LEVEL", "verbose")
    with pytest.warns(RuntimeWarning, match="MIOCORE_LOG_LEVEL='verbose'") as record:
        logs.configure_from_env()
    assert "info2" in str(record[0].message) and "0-7" in str(record[0].message)
    assert miocore_logger.level == logging.ERROR  # unchanged


def test_import_with_a_bad_level_works() -> None:
    environ = {**os.environ, "MIOCORE_LOG_LEVEL": "verbose"}
    done = subprocess.run(
        [sys.executable, "-c", "import miocore; print(miocore.__name__)"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "miocore"
    assert "MIOCORE_LOG_LEVEL='verbose' is not a log level" in done.stderr


@pytest.mark.parametrize(
    ("raw", "info", "debug"), [("4", False, False), ("5", True, False), ("6", True, True)]
)
def test_find_records_show_from_level_5_and_6(
    monkeypatch: pytest.MonkeyPatch,
    miocore_logger: logging.Logger,
    raw: str,
    info: bool,
    debug: bool,
) -> None:
    monkeypatch.setenv("MIOPEN_LOG_LEVEL", raw)
    logs.configure_from_env()
    find = logging.getLogger("miocore.find")
    assert find.isEnabledFor(logging.INFO) is info
    assert find.isEnabledFor(logging.DEBUG) is debug
    assert any(getattr(h, "_miocore", False) for h in miocore_logger.handlers)


def test_level_6_prints_find_debug_records(monkeypatch: pytest.MonkeyPatch) -> None:
    # A whole find at level 6 in a fresh process: its records reach stderr.
    environ = {**os.environ, "MIOCORE_LOG_LEVEL": "6"}
    code = (
        "import logging, miocore\n"
        "logging.getLogger('miocore.find').debug('probe: find debug shows')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "miocore DEBUG miocore.find: probe: find debug shows" in done.stderr


@pytest.mark.parametrize(("raw", "debug"), [("5", False), ("6", True), ("info", False)])
@needs.plugins("gemm")
def test_a_whole_find_logs_at_levels_5_and_6(tmp_path, raw: str, debug: bool) -> None:
    environ = {
        **os.environ,
        "MIOPEN_LOG_LEVEL": raw,
        "MIOCORE_USER_DB_PATH": str(tmp_path / "db"),
    }
    environ.pop("MIOCORE_LOG_LEVEL", None)
    argv = [
        "conv",
        "-n",
        "1",
        "-c",
        "4",
        "-H",
        "8",
        "-W",
        "8",
        "-k",
        "4",
        "-F",
        "1",
        "-V",
        "0",
        "--quiet",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "miocore", *argv],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "miocore INFO miocore.find:" in done.stderr  # the decision
    assert ("miocore DEBUG miocore.find:" in done.stderr) is debug  # candidates, timings
