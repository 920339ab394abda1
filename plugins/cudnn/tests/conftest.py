"""Shared fixtures of miocore-cudnn's tests: a clean loader and plan cache per test, and a
fake ``cudnn`` frontend (``fake_cudnn``) for the plan logic on machines without a GPU."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests import fake_cudnn


def pytest_configure(config: pytest.Config) -> None:
    """Declare the ``gpu`` marker when this folder runs on its own."""
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped where there is none")


@pytest.fixture(autouse=True)
def _isolated_databases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test with its own empty databases and no MIOCORE_* switch set."""
    import os

    for name in list(os.environ):
        if name.startswith("MIOCORE_") and name not in ("MIOCORE_CORPUS", "MIOCORE_EXPECT_PLUGINS"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("MIOCORE_USER_DB_PATH", str(tmp_path / "user-db"))
    monkeypatch.setenv("MIOCORE_SYSTEM_DB_PATH", str(tmp_path / "system-db"))


def _reset() -> None:
    from miocore_cudnn import _loader, _plans

    _loader._state.clear()
    _loader._handles.clear()
    _plans.clear_cache()


@pytest.fixture
def fake_cudnn(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The plugin wired to the fake frontend: ``import cudnn`` answers with ``fake_cudnn``."""
    import fake_cudnn as fake
    from miocore_cudnn import _loader

    monkeypatch.setitem(sys.modules, "cudnn", fake)
    monkeypatch.setattr(_loader, "_preload_libraries", lambda: None)
    monkeypatch.delenv("MIOCORE_CUDNN_RUNTIME_COMPILED", raising=False)
    fake.CALLS.clear()
    _reset()
    yield fake
    _reset()


@pytest.fixture
def no_cudnn(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``import cudnn`` fails, as where the frontend is not installed."""
    from miocore_cudnn import _loader

    monkeypatch.setitem(sys.modules, "cudnn", None)
    monkeypatch.setattr(_loader, "_preload_libraries", lambda: None)
    _reset()
    yield
    _reset()
