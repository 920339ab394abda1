"""tox's hip-compile without hipcc: a local run says it compiled nothing and passes, CI (which
sets MIOCORE_REQUIRE_HIPCC=1 in .ci/run) fails; scripts/install-hipcc follows the same rule."""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CHECK_COMPILE = ROOT / "kernels" / "check_compile.py"
INSTALL_HIPCC = ROOT / "scripts" / "install-hipcc"


def _env(path: Path, **extra: str) -> dict[str, str]:
    """The environment with PATH holding only ``path`` (no hipcc, no apt-get)."""
    env = {k: v for k, v in os.environ.items() if k != "MIOCORE_REQUIRE_HIPCC"}
    return {**env, "PATH": str(path), **extra}


def _check_compile(path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK_COMPILE), "--vendor", "hip"],
        capture_output=True,
        text=True,
        env=_env(path, **extra),
        timeout=300,
        check=False,
    )


def test_hip_compile_without_hipcc_is_skipped_loudly(tmp_path: Path) -> None:
    done = _check_compile(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "hip-compile: SKIPPED, nothing compiled for gfx90a" in done.stderr
    assert "hipcc was not found on PATH" in done.stderr
    assert "MIOCORE_REQUIRE_HIPCC=1" in done.stderr
    assert "ok " not in done.stdout  # nothing was compiled, and it does not pretend so


@pytest.mark.parametrize("value", ["1", "yes"])
def test_hip_compile_without_hipcc_fails_where_required(tmp_path: Path, value: str) -> None:
    done = _check_compile(tmp_path, MIOCORE_REQUIRE_HIPCC=value)
    assert done.returncode == 1
    assert "hipcc was not found on PATH" in done.stderr and "SKIPPED" not in done.stderr


def test_hip_compile_env_passes_the_switch_and_ci_sets_it() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    assert "MIOCORE_REQUIRE_HIPCC" in tox["testenv:hip-compile"]["pass_env"].split()
    assert "kernels/check_compile.py --vendor hip" in tox["testenv:hip-compile"]["commands"]
    commands = [
        line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line[:1] not in "#"
    ]
    exported = commands.index("export MIOCORE_REQUIRE_HIPCC=1")
    assert commands[-1].startswith("scripts/install-hipcc && ") and exported < len(commands) - 1


def _tools(tmp_path: Path, **scripts: str) -> Path:
    """A PATH folder with ``id`` and the given fake commands (name -> shell body)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    id_tool = shutil.which("id")
    assert id_tool is not None
    (folder / "id").symlink_to(id_tool)
    for name, body in scripts.items():
        tool = folder / name
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    return folder


def _install_hipcc(path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash is not installed")
    return subprocess.run(
        [bash, str(INSTALL_HIPCC)],
        capture_output=True,
        text=True,
        env=_env(path, **extra),
        timeout=60,
        check=False,
    )


def test_install_hipcc_without_apt_passes_unless_required(tmp_path: Path) -> None:
    path = _tools(tmp_path)
    done = _install_hipcc(path)
    assert done.returncode == 0
    assert "apt-get was not found" in done.stderr and "skipped" in done.stderr
    done = _install_hipcc(path, MIOCORE_REQUIRE_HIPCC="1")
    assert done.returncode == 1
    assert "MIOCORE_REQUIRE_HIPCC=1 requires it" in done.stderr


def test_install_hipcc_reports_an_apt_failure(tmp_path: Path) -> None:
    path = _tools(tmp_path, **{"apt-get": "exit 100", "sudo": 'exec "$@"'})
    done = _install_hipcc(path)
    assert done.returncode == 0 and "apt-get could not install 'hipcc'" in done.stderr
    assert _install_hipcc(path, MIOCORE_REQUIRE_HIPCC="1").returncode == 1


def test_install_hipcc_does_nothing_when_hipcc_is_there(tmp_path: Path) -> None:
    path = _tools(tmp_path, hipcc="exit 0", **{"apt-get": "echo called >&2; exit 1"})
    done = _install_hipcc(path, MIOCORE_REQUIRE_HIPCC="1")
    assert done.returncode == 0 and "called" not in done.stderr


def test_compile_check_takes_the_last_configuration_of_each_kind() -> None:
    # the optional keys (stream-K shares, the fix-up, spans, ...) build macro sets no default
    # does: the check compiles the last configuration of every set of keys, in space order
    sys.path.insert(0, str(CHECK_COMPILE.parent))
    try:
        import check_compile
    finally:
        sys.path.remove(str(CHECK_COMPILE.parent))
    space = [
        {"bm": 128, "split": 1},
        {"bm": 64, "split": 2},
        {"bm": 128, "split": 2, "fix": 1},
        {"bm": 64, "split": 3, "fix": 1},
        {"bm": 64, "split": 1, "sk": 1},
    ]
    assert check_compile.last_of_each_kind(space) == [space[1], space[3], space[4]]
    assert check_compile.last_of_each_kind([]) == []
