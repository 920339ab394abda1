"""The plugin scan's cache answers what ``importlib.metadata`` answers, and only while nothing
that decides the answer has changed (miocore/solver/entry_points.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from miocore import InvalidEnvironmentError
from miocore.solver import entry_points as scans
from miocore.solver.registry import ENTRY_POINT_GROUP


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache file, in this test's folder; fails the test if it would scan (see ``count``)."""
    path = tmp_path / "cache" / "plugins.json"
    monkeypatch.setattr(scans, "cache_file", lambda: path)
    return path


@pytest.fixture
def count(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the real scan ran."""
    calls = [0]
    real = scans.scan

    def scan(group: str) -> list[scans.EntryPoint]:
        calls[0] += 1
        return real(group)

    monkeypatch.setattr(scans, "scan", scan)
    return calls


def _distribution(folder: Path, name: str, version: str, entries: dict[str, str]) -> Path:
    """A ``dist-info`` folder declaring ``entries`` in the miocore group."""
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entries.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")
    return info


def _names() -> set[str]:
    return {ep.name for ep in scans.entry_points(ENTRY_POINT_GROUP)}


def test_the_cached_answer_is_the_scan(cache: Path, count: list[int]) -> None:
    first = scans.entry_points(ENTRY_POINT_GROUP)
    assert first == scans.scan(ENTRY_POINT_GROUP)
    assert cache.is_file()
    count[0] = 0
    assert scans.entry_points(ENTRY_POINT_GROUP) == first
    assert count[0] == 0  # read from the file
    assert [e.name for e in first] == sorted(e.name for e in first)


def test_installing_editing_and_removing_a_distribution_is_seen(
    cache: Path, count: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = _names()
    assert "fakescan" not in before
    info = _distribution(site, "miocore-fake-scan", "1.0", {"fakescan": "fake_scan_mod"})
    assert "fakescan" in _names()  # installed
    calls = count[0]
    assert "fakescan" in _names()
    assert count[0] == calls  # unchanged: cached
    found = next(e for e in scans.entry_points(ENTRY_POINT_GROUP) if e.name == "fakescan")
    assert (found.distribution, found.version, found.value) == (
        "miocore-fake-scan",
        "1.0",
        "fake_scan_mod",
    )
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nfakescan2 = other_mod:thing\n")
    names = _names()  # edited in place
    assert "fakescan2" in names and "fakescan" not in names
    for child in info.iterdir():
        child.unlink()
    info.rmdir()
    assert _names() == before  # removed


def test_a_version_edited_in_place_is_seen_for_either_kind_of_metadata_folder(
    cache: Path, count: list[int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fingerprint watches each folder's own metadata file: ``METADATA`` in a
    ``*.dist-info``, ``PKG-INFO`` in a ``*.egg-info`` (whose name may not carry the version)."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    info = _distribution(site, "miocore-fake-wheel", "1.0", {"fakewheel": "fake_wheel_mod"})
    egg = site / "miocore_fake_egg.egg-info"
    egg.mkdir()
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: miocore-fake-egg\nVersion: 1.0\n")
    (egg / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nfakeegg = fake_egg_mod\n")

    def versions() -> dict[str, str]:
        found = scans.entry_points(ENTRY_POINT_GROUP)
        return {e.name: e.version for e in found if e.name in ("fakewheel", "fakeegg")}

    assert versions() == {"fakewheel": "1.0", "fakeegg": "1.0"}
    calls = count[0]
    assert versions() == {"fakewheel": "1.0", "fakeegg": "1.0"} and count[0] == calls  # cached
    # (new sizes: two writes within a clock tick may share a modification time)
    wheel_metadata = "Metadata-Version: 2.1\nName: miocore-fake-wheel\nVersion: 1.10\n"
    (info / "METADATA").write_text(wheel_metadata)
    assert versions() == {"fakewheel": "1.10", "fakeegg": "1.0"}
    (egg / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: miocore-fake-egg\nVersion: 2.01\n")
    assert versions() == {"fakewheel": "1.10", "fakeegg": "2.01"}
    assert count[0] == calls + 2  # each edit scanned once


def test_a_folder_without_distributions_does_not_change_the_fingerprint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scripts run from different folders (``sys.path[0]``) share the cache."""
    before = scans._fingerprint(ENTRY_POINT_GROUP)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert scans._fingerprint(ENTRY_POINT_GROUP) == before
    _distribution(tmp_path, "miocore-fake-scan", "1.0", {"fakescan": "fake_scan_mod"})
    assert scans._fingerprint(ENTRY_POINT_GROUP) != before


@pytest.mark.parametrize(
    "text",
    [
        "not json {",
        json.dumps([1, 2, 3]),
        json.dumps({"format": 999}),
        "FINGERPRINT",  # the right fingerprint, rows that are not four strings
    ],
)
def test_a_damaged_cache_is_ignored_and_rewritten(cache: Path, count: list[int], text: str) -> None:
    expected = scans.entry_points(ENTRY_POINT_GROUP)
    if text == "FINGERPRINT":
        text = json.dumps(
            {
                "format": scans.FORMAT,
                "fingerprint": scans._fingerprint(ENTRY_POINT_GROUP),
                "entry_points": [["a", 1, None, {"b": 2}]],
            }
        )
    cache.write_text(text)
    count[0] = 0
    assert scans.entry_points(ENTRY_POINT_GROUP) == expected
    assert count[0] == 1
    assert json.loads(cache.read_text())["entry_points"] == [list(e) for e in expected]


def test_where_distributions_may_come_from_elsewhere_nothing_is_cached(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class OwnFinder:
        def find_spec(self, *args: object) -> None:
            return None

        def find_distributions(self, *args: object) -> list[object]:
            return []

    monkeypatch.setattr(sys, "meta_path", [OwnFinder(), *sys.meta_path])
    assert scans._fingerprint(ENTRY_POINT_GROUP) is None
    scans.entry_points(ENTRY_POINT_GROUP)
    assert not cache.exists()


def test_disable_cache_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert scans.cache_file() is not None
    monkeypatch.setenv("MIOCORE_DISABLE_CACHE", "1")
    assert scans.cache_file() is None
    monkeypatch.setenv("MIOCORE_DISABLE_CACHE", "maybe")
    with pytest.raises(InvalidEnvironmentError, match="MIOCORE_DISABLE_CACHE"):
        scans.cache_file()


def test_an_entry_point_loads_module_and_attribute() -> None:
    assert scans.EntryPoint("x", "os.path:join", "d", "1").load() is os.path.join
    assert scans.EntryPoint("x", "os.path [extra]", "d", "1").load() is os.path
    with pytest.raises(ValueError, match="malformed"):
        scans.EntryPoint("x", "not a value!", "d", "1").load()


def test_a_second_process_reads_the_cache_without_importlib_metadata(tmp_path: Path) -> None:
    code = (
        "import sys, miocore\n"
        "names = [s.plugin for s in miocore.solvers()]\n"
        "print('importlib.metadata' in sys.modules, sorted(set(names)))\n"
    )
    environ = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "xdg"))
    if not sys.platform.startswith("linux"):
        pytest.skip("the cache folder is moved through XDG_CACHE_HOME, which Linux honours")
    runs = [
        subprocess.run(
            [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
        ).stdout.split(maxsplit=1)
        for _ in range(2)
    ]
    assert runs[0][0] == "True"  # the first scans
    assert runs[1] == ["False", runs[0][1]]  # the second reads the same answer from the file


@pytest.mark.parametrize("xdg", [None, "", "  ", "relative/path", "/tmp/miocore-xdg-cache"])
def test_the_cache_folder_is_platformdirs_own_without_importing_it(
    xdg: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import platformdirs

    from miocore.paths import user_cache_dir

    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    assert user_cache_dir() == Path(platformdirs.user_cache_dir("miocore"))
