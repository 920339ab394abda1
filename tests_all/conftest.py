"""Cross-family tests: run with every plugin under plugins/ installed (tox env ``all``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("MIOCORE_") and name not in ("MIOCORE_CORPUS", "MIOCORE_EXPECT_PLUGINS"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "user-db"))
    monkeypatch.setenv("MIOCORE_SYSTEM_DB_PATH", str(tmp_path / "system-db"))
