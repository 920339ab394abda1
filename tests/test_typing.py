"""miocore ships its types (PEP 561 ``py.typed``): a user's ``mypy --strict`` checks calls into
the public API instead of treating miocore as untyped."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

USER_CODE = """\
import numpy as np

import miocore

h = miocore.Handle("cpu")
x = miocore.TensorDescriptor("float32", (1, 3, 8, 8), layout="NHWC")
w = miocore.TensorDescriptor("float32", (4, 3, 3, 3), layout="NHWC")
conv = miocore.ConvolutionDescriptor(pads=(1, 1))
p = miocore.ConvProblem("forward", x=x, w=w, y=conv.output_descriptor(x, w), conv=conv)
xa, wa = np.zeros((1, 3, 8, 8), np.float32), np.zeros((4, 3, 3, 3), np.float32)
q: miocore.ConvProblem = miocore.ConvProblem.from_tensors(xa, wa, padding=1)
key: str = p.key
solutions: miocore.Solutions = h.get_solutions(p)
time_ms: float | None = solutions[0].time_ms
mode: miocore.FindMode = miocore.FindMode.parse("fast")
expected: np.ndarray = miocore.reference.convolution(p, x=None, w=None)
"""


def test_the_package_carries_py_typed() -> None:
    assert importlib.resources.files("miocore").joinpath("py.typed").is_file()


def test_a_wheel_install_ships_py_typed() -> None:
    files = importlib.metadata.files("miocore") or []
    names = {str(f).replace("\\", "/") for f in files}
    if "miocore/__init__.py" not in names:
        # An editable install (the development checkout) records no package files; the wheel's
        # own configuration must still take the whole package folder.
        wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
        assert wheel["targets"]["wheel"]["packages"] == ["miocore"]
        return
    assert "miocore/py.typed" in names


def test_users_strict_mypy_sees_the_types(tmp_path: Path) -> None:
    pytest.importorskip("mypy.api", reason="mypy is installed in the lint environment")
    (tmp_path / "user.py").write_text(USER_CODE)
    (tmp_path / "wrong.py").write_text(
        "import miocore\n\np: int = miocore.ConvProblem.from_key('x')\n"
    )
    command = [sys.executable, "-m", "mypy", "--strict", "--no-incremental"]
    ok = subprocess.run(
        [*command, "user.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # A wrong use is caught, which it would not be if miocore were untyped (Any).
    bad = subprocess.run(
        [*command, "wrong.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert bad.returncode == 1
    assert 'expression has type "ConvProblem", variable has type "int"' in bad.stdout
