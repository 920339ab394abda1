"""Every test runs with its own empty user database and no MIOCORE_*/MIOPEN_* switches set."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from miocore.db import FindDb

sys.path.insert(0, str(Path(__file__).parent))  # tests import fake_solvers


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("MIOCORE_", "MIOPEN_")) and name not in (
            "MIOCORE_CORPUS",
            "MIOCORE_EXPECT_PLUGINS",
        ):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "user-db"))
    monkeypatch.setenv("MIOCORE_SYSTEM_DB_PATH", str(tmp_path / "system-db"))


@pytest.fixture(autouse=True)
def _virtual_solver_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU backend's timer also counts the virtual time fake solvers spend (see
    ``fake_solvers.VIRTUAL_CLOCK``); real solvers spend none, so their times are unchanged."""
    from fake_solvers import VIRTUAL_CLOCK

    from miocore.backends.cpu import CpuBackend

    real_time_ms = CpuBackend.time_ms

    def time_ms(self: CpuBackend, run: object) -> float:
        before = VIRTUAL_CLOCK.seconds
        elapsed = real_time_ms(self, run)
        return elapsed + (VIRTUAL_CLOCK.seconds - before) * 1e3

    monkeypatch.setattr(CpuBackend, "time_ms", time_ms)


@pytest.fixture
def checked_fields(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The fields the CPU backend checks arrays for (``check_array``), in order."""
    from miocore.backends.cpu import CpuBackend

    seen: list[str] = []
    real = CpuBackend.check_array

    def counting(self: CpuBackend, desc: Any, array: Any, field: str) -> Any:
        seen.append(field)
        return real(self, desc, array, field)

    monkeypatch.setattr(CpuBackend, "check_array", counting)
    return seen


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """The database tests' user and system folders (test_db*.py; none exists yet)."""
    return tmp_path / "user", tmp_path / "system"


@pytest.fixture
def db(dirs: tuple[Path, Path]) -> Iterator[FindDb]:
    """A FindDb of the database tests' device on ``dirs`` (tests/db_fixtures.py)."""
    from db_fixtures import DEVICE

    from miocore.db import FindDb

    user, system = dirs
    with FindDb(DEVICE, user_dir=user, system_dir=system) as find_db:
        yield find_db
