"""MIOpen's variables (``MIOPEN_*``) honoured as aliases; a ``MIOCORE_*`` value wins."""

from __future__ import annotations

import logging

import needs
import pytest

import miocore
from miocore import env
from miocore.env import FindEnforce, FindMode
from miocore.errors import InvalidEnvironmentError

PARALLEL_LEVEL_NAMES = ["MIOCORE_COMPILE_PARALLEL_LEVEL", "MIOPEN_COMPILE_PARALLEL_LEVEL"]
PROBLEM = miocore.ConvProblem.from_sizes(
    "forward", n=2, c=4, k=6, in_spatial=(7, 6), filter_spatial=(3, 3), pads=(1, 1)
)


@pytest.fixture(autouse=True)
def _fresh_conflict_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(env, "_conflicts_logged", set())


@needs.plugins("gemm")
def test_miopen_find_mode_fast_skips_benchmarking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOPEN_FIND_MODE", "FAST")
    assert env.find_mode() is FindMode.FAST
    # FAST on an empty FindDb: the fallback ranking, nothing measured, nothing written.
    handle = miocore.Handle("cpu")
    found = handle.find_solutions(PROBLEM)
    assert found and all(s.is_estimate for s in found)
    assert handle.find_db.records(PROBLEM.key) == []


def test_miocore_value_wins_and_the_conflict_is_logged_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MIOPEN_FIND_MODE", "FAST")
    monkeypatch.setenv("MIOCORE_FIND_MODE", "normal")
    with caplog.at_level(logging.WARNING, logger="miocore.env"):
        assert env.find_mode() is FindMode.NORMAL
        assert env.find_mode() is FindMode.NORMAL
    conflicts = [r for r in caplog.records if "disagree" in r.getMessage()]
    assert len(conflicts) == 1
    assert "MIOPEN_FIND_MODE" in conflicts[0].getMessage()


def test_equal_values_are_no_conflict(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MIOPEN_FIND_ENFORCE", "SEARCH")
    monkeypatch.setenv("MIOCORE_FIND_ENFORCE", "SEARCH")
    with caplog.at_level(logging.WARNING, logger="miocore.env"):
        assert env.find_enforce() is FindEnforce.SEARCH
    assert not caplog.records


def test_blank_miocore_value_lets_the_alias_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOCORE_FIND_ENFORCE", "  ")
    monkeypatch.setenv("MIOPEN_FIND_ENFORCE", "4")
    assert env.find_enforce() is FindEnforce.SEARCH_DB_UPDATE
    assert env.lookup("MIOCORE_FIND_ENFORCE") == ("MIOPEN_FIND_ENFORCE", "4")


def test_a_bad_alias_value_names_the_miopen_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOPEN_FIND_MODE", "turbo")
    with pytest.raises(InvalidEnvironmentError) as info:
        env.find_mode()
    assert info.value.field == "MIOPEN_FIND_MODE" and info.value.value == "turbo"


@needs.plugins("gemm")
def test_only_solver_and_family_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOPEN_DEBUG_FIND_ONLY_SOLVER", "gemm.im2col")
    monkeypatch.setenv("MIOPEN_DEBUG_CONV_WINOGRAD", "0")
    assert env.only_solver() == "gemm.im2col"
    assert not env.algorithm_enabled("winograd") and env.algorithm_enabled("gemm")
    found = miocore.Handle("cpu").find_solutions(PROBLEM)
    assert [s.solver for s in found] == ["gemm.im2col"]


def test_family_switch_bad_value_names_the_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIOPEN_DEBUG_CONV_GEMM", "maybe")
    with pytest.raises(InvalidEnvironmentError) as info:
        env.algorithm_enabled("gemm")
    assert info.value.field == "MIOPEN_DEBUG_CONV_GEMM"


def test_disable_cache_alias(monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.db import kernel_cache

    assert not kernel_cache.cache_disabled()
    monkeypatch.setenv("MIOPEN_DISABLE_CACHE", "1")
    assert kernel_cache.cache_disabled()


def test_custom_cache_dir_alias(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from miocore.db import kernel_cache

    monkeypatch.setenv("MIOPEN_CUSTOM_CACHE_DIR", str(tmp_path / "kernels"))
    assert kernel_cache.default_cache_dir() == tmp_path / "kernels"


@pytest.mark.parametrize(
    "variable", ["MIOCORE_COMPILE_PARALLEL_LEVEL", "MIOPEN_COMPILE_PARALLEL_LEVEL"]
)
@pytest.mark.parametrize("raw", ["-3", "0", "many"])
def test_compile_parallel_level_refuses_bad_values(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str
) -> None:
    from miocore.backends._gpu.compiler import compile_parallel_level

    monkeypatch.setenv(variable, raw)
    with pytest.raises(InvalidEnvironmentError) as info:
        compile_parallel_level()
    assert info.value.field == variable and info.value.value == raw
    assert ">= 1" in str(info.value)


def test_compile_parallel_level_values(monkeypatch: pytest.MonkeyPatch) -> None:
    from miocore.backends._gpu.compiler import compile_parallel_level

    assert 1 <= compile_parallel_level() <= 16
    monkeypatch.setenv("MIOPEN_COMPILE_PARALLEL_LEVEL", "3")
    assert compile_parallel_level() == 3
    monkeypatch.setenv("MIOCORE_COMPILE_PARALLEL_LEVEL", "5")
    assert compile_parallel_level() == 5


def test_every_alias_is_a_miopen_name() -> None:
    for name, alias in env.MIOPEN_ALIASES.items():
        assert name.startswith("MIOCORE_") and alias.startswith("MIOPEN_")


@needs.plugins("gemm")
def test_miopen_user_db_path_holds_the_records(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory
) -> None:
    from miocore.db._common import default_user_dir

    folder = tmp_path / "miopen-user-db"  # type: ignore[operator]
    monkeypatch.delenv("MIOCORE_USER_DB_PATH")
    monkeypatch.setenv("MIOPEN_USER_DB_PATH", str(folder))
    assert default_user_dir() == folder
    handle = miocore.Handle("cpu")
    handle.find_solutions(PROBLEM, find_mode="NORMAL")
    assert any(folder.glob("*.db"))
    assert miocore.Handle("cpu").find_db.records(PROBLEM.key)
