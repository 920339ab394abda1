"""A broken plugin is named with its distribution and version, wherever it breaks.

Each case installs a fake distribution (a ``dist-info`` folder under ``tests/fake_dists/``) by
prepending its folder to ``sys.path``, so discovery reads it through ``importlib.metadata`` as
it reads a pip-installed plugin. Also: ``miocore plugins`` shows every plugin's status.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

import miocore
from miocore import ConvProblem, NoApplicableSolverError, PluginError, reference
from miocore.cli import main
from miocore.solver.registry import PluginWarning, reset_default_registry

FAKES = Path(__file__).parent / "fake_dists"
PROBLEM = ConvProblem.from_sizes("forward", n=1, c=2, k=3, in_spatial=(5, 5), filter_spatial=(3, 3))
FIRST_PARTY = ("direct", "fft", "gemm", "igemm", "winograd")


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """``install("case")`` puts that folder's fake distributions on sys.path and rediscovers."""
    added: list[str] = []

    def _install(case: str) -> None:
        folder = FAKES / case
        assert folder.is_dir(), folder
        # The shared helper module sits one level up; that folder holds no dist-info, so
        # discovery finds nothing extra there.
        monkeypatch.syspath_prepend(str(FAKES))
        monkeypatch.syspath_prepend(str(folder))
        added.extend(p.stem for p in (*folder.glob("*.py"), *FAKES.glob("*.py")))
        reset_default_registry()

    yield _install
    for name in added:  # the next case must import its own modules
        sys.modules.pop(name, None)
    reset_default_registry()


def _plugin(name: str) -> miocore.PluginInfo:
    return next(p for p in miocore.default_registry().plugins if p.name == name)


def _handle() -> miocore.Handle:
    return miocore.Handle("cpu")  # the installed plugins, with this test's empty databases


def test_a_plugin_that_fails_to_import_is_named_and_skipped(install) -> None:  # type: ignore[no-untyped-def]
    install("broken_import")
    with pytest.warns(PluginWarning) as caught:
        reg = miocore.default_registry()
    message = " ".join(str(w.message) for w in caught)
    assert "fakebroken (miocore-fake-broken 1.2.3) failed to import" in message
    assert "miocore_fake_dependency_that_is_not_installed" in message
    info = _plugin("fakebroken")
    assert (info.status, info.distribution, info.version) == (
        "failed",
        "miocore-fake-broken",
        "1.2.3",
    )
    assert "ModuleNotFoundError" in (info.error or "")
    assert all(s.distribution != "miocore-fake-broken" for s in reg.solvers)


def test_malformed_records_are_named_and_the_good_one_kept(install) -> None:  # type: ignore[no-untyped-def]
    install("malformed_record")
    with pytest.warns(PluginWarning) as caught:
        reg = miocore.default_registry()
    messages = [str(w.message) for w in caught]
    named = [m for m in messages if "fakemalformed (miocore-fake-malformed 0.4.0)" in m]
    assert len(named) == 2, messages
    assert any("expected miocore.SolverRecord, got Good" in m for m in named)
    assert any("must be a miocore.Solver instance, got str" in m for m in named)
    assert _plugin("fakemalformed").solvers == ("fakemalformed.good",)
    assert reg.get("fakemalformed.good").version == "0.4.0"


def test_a_reused_solver_name_names_both_distributions(install) -> None:  # type: ignore[no-untyped-def]
    install("duplicate_name")
    with pytest.raises(PluginError) as info:
        miocore.default_registry()
    text = str(info.value)
    assert "'fakedup.same' is provided by" in text
    assert "fakedupa (miocore-fake-dup-a 1.0.0)" in text
    assert "fakedupb (miocore-fake-dup-b 2.0.0)" in text
    assert "MIOCORE_DISABLE_PLUGINS" in text


def test_disabling_one_duplicate_lets_the_other_load(  # type: ignore[no-untyped-def]
    install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("duplicate_name")
    monkeypatch.setenv("MIOCORE_DISABLE_PLUGINS", "miocore-fake-dup-b")
    reg = miocore.default_registry()
    assert reg.get("fakedup.same").distribution == "miocore-fake-dup-a"
    assert _plugin("fakedupb").status == "disabled"


def test_find_names_the_plugin_of_a_raising_solver_and_goes_on(  # type: ignore[no-untyped-def]
    install, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("raising_solver")
    monkeypatch.setenv("MIOCORE_FIND_MODE", "NORMAL")
    caplog.set_level(logging.WARNING, logger="miocore.find")
    handle = _handle()
    try:
        solutions = handle.find_solutions(PROBLEM)
    except NoApplicableSolverError as exc:  # the core env: no first-party plugin installed
        solutions = []
        assert "fakeraising.run" in str(exc)
    report = handle.last_report
    assert report is not None
    assert "RuntimeError: is_applicable exploded" in report.failed["fakeraising.applicable"]
    assert "RuntimeError: get_solution exploded" in report.failed["fakeraising.get_solution"]
    assert "RuntimeError: the invoker exploded" in report.failed["fakeraising.run"]
    assert not any(s.solver.startswith("fakeraising.") for s in solutions)
    for name in ("applicable", "get_solution", "run"):
        assert f"solver fakeraising.{name} (miocore-fake-raising 3.1.0)" in caplog.text


def test_immediate_mode_names_the_plugin_of_a_raising_solver(install) -> None:  # type: ignore[no-untyped-def]
    install("raising_solver")
    arrays = reference.random_inputs(PROBLEM, 0)
    with pytest.raises(miocore.MiocoreError, match=r"miocore-fake-raising 3\.1\.0"):
        _handle().immediate(PROBLEM, "fakeraising.run", **arrays)


@pytest.mark.parametrize(
    ("solver", "flaw"),
    [
        ("fakebad.not_a_solution", "returned dict, expected a miocore.ConvSolution"),
        ("fakebad.wrong_name", "returned a solution naming solver 'someone.else'"),
        ("fakebad.no_factory", "invoker_factory is not callable"),
        ("fakebad.bad_kernels", "kernels are not a tuple of miocore.KernelInfo"),
    ],
)
def test_a_malformed_solution_names_plugin_distribution_and_version(  # type: ignore[no-untyped-def]
    install, solver: str, flaw: str
) -> None:
    install("bad_solution")
    arrays = reference.random_inputs(PROBLEM, 0)
    before = arrays["y"].copy()
    with pytest.raises(PluginError) as info:
        _handle().immediate(PROBLEM, solver, **arrays)
    text = str(info.value)
    assert f"solver {solver!r} of plugin fakebadsolution (miocore-fake-badsolution 0.9.1)" in text
    assert flaw in text and info.value.field == f"{solver}.get_solution"
    np.testing.assert_array_equal(arrays["y"], before)  # nothing ran


def test_find_reports_malformed_solutions_with_the_culprit_and_goes_on(  # type: ignore[no-untyped-def]
    install, monkeypatch: pytest.MonkeyPatch
) -> None:
    install("bad_solution")
    handle = _handle()
    with contextlib.suppress(NoApplicableSolverError):  # the core env: nothing else installed
        handle.find_solutions(PROBLEM, find_mode="NORMAL")
    failed = handle.last_report.failed  # type: ignore[union-attr]
    bad = {k: v for k, v in failed.items() if k.startswith("fakebad.")}
    assert len(bad) == 4
    assert all("miocore-fake-badsolution 0.9.1" in v for v in bad.values()), bad


# -- the operator's view ---------------------------------------------------------------------------


def _plugins_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict]]:
    status = main(["plugins", "--json", *args])
    return status, json.loads(capsys.readouterr().out)["plugins"]


def test_miocore_plugins_shows_the_first_party_plugins_with_their_solvers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reset_default_registry()
    status, rows = _plugins_json(capsys)
    assert status == 0
    expected = os.environ.get("MIOCORE_EXPECT_PLUGINS")
    if expected is not None:
        wanted = {n for n in expected.split(",") if n}
    else:  # outside tox: whichever first-party distributions are installed
        wanted = {
            ep.name
            for ep in metadata.entry_points(group="miocore")
            if ep.name in FIRST_PARTY and ep.dist is not None
        }
    by_name = {r["plugin"]: r for r in rows}
    assert wanted <= set(by_name)
    registry = miocore.default_registry()
    for name in wanted:
        row = by_name[name]
        assert row["status"] == "active" and row["distribution"] == f"miocore-{name}"
        assert row["version"] == metadata.version(f"miocore-{name}")
        assert row["solvers"] and all(s.startswith(f"{name}.") for s in row["solvers"])
        assert row["solvers"] == [s.name for s in registry.solvers if s.plugin == name]


def test_miocore_plugins_shows_failed_and_disabled_plugins_and_why(  # type: ignore[no-untyped-def]
    install, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    install("broken_import")
    install("malformed_record")
    monkeypatch.setenv("MIOCORE_DISABLE_PLUGINS", "fakemalformed")
    with pytest.warns(PluginWarning):
        status, rows = _plugins_json(capsys)
    assert status == 0
    by_name = {r["plugin"]: r for r in rows}
    broken = by_name["fakebroken"]
    assert (broken["distribution"], broken["version"], broken["status"]) == (
        "miocore-fake-broken",
        "1.2.3",
        "failed",
    )
    assert "ModuleNotFoundError" in broken["error"] and broken["solvers"] == []
    assert by_name["fakemalformed"]["status"] == "disabled"
    assert by_name["fakemalformed"]["error"] == "MIOCORE_DISABLE_PLUGINS"
    with pytest.warns(PluginWarning):
        reset_default_registry()
        assert main(["plugins", "--check", "--json"]) == 1
    capsys.readouterr()
    reset_default_registry()
    with pytest.warns(PluginWarning):
        assert main(["plugins"]) == 0
    table = capsys.readouterr().out
    assert "fakebroken" in table and "failed" in table and "MIOCORE_DISABLE_PLUGINS" in table


def test_miocore_plugins_with_nothing_installed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert main(["plugins"], registry=miocore.Registry()) == 0
    assert "No miocore plugin is installed" in capsys.readouterr().out
