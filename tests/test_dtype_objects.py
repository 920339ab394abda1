"""``DataType`` takes numpy and torch dtype objects, without importing torch itself."""

from __future__ import annotations

import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import miocore
from miocore.problem.dtypes import DataType


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.float16, DataType.FLOAT16),
        (np.float32, DataType.FLOAT32),
        (np.dtype("float32"), DataType.FLOAT32),
        (np.dtype(np.float16), DataType.FLOAT16),
        (ml_dtypes.bfloat16, DataType.BFLOAT16),
        ("torch.bfloat16", DataType.BFLOAT16),
        (" Half ", DataType.FLOAT16),
    ],
)
def test_numpy_objects_and_names(value: object, expected: DataType) -> None:
    assert DataType.parse(value) is expected


def test_torch_dtypes() -> None:
    torch = pytest.importorskip("torch")
    assert DataType.parse(torch.float32) is DataType.FLOAT32
    assert DataType.parse(torch.half) is DataType.FLOAT16
    assert DataType.parse(torch.bfloat16) is DataType.BFLOAT16
    with pytest.raises(miocore.InvalidDescriptorError) as info:
        DataType.parse(torch.int8, "x.dtype")
    assert info.value.field == "x.dtype" and "torch.int8" in str(info.value)


def test_torch_dtype_builds_the_same_problem() -> None:
    torch = pytest.importorskip("torch")
    sizes = {"n": 2, "c": 4, "k": 6, "in_spatial": (7, 6), "filter_spatial": (3, 3)}
    by_torch = miocore.ConvProblem.from_sizes("forward", dtype=torch.float16, **sizes)
    by_name = miocore.ConvProblem.from_sizes("forward", dtype="float16", **sizes)
    assert by_torch == by_name and by_torch.key.endswith("-FP16-F")
    x = miocore.TensorDescriptor(torch.bfloat16, (1, 3, 4, 4))
    assert x.dtype is DataType.BFLOAT16


@pytest.mark.parametrize("value", [np.int8, np.dtype("float64"), object(), 3])
def test_unsupported_objects_name_the_value(value: object) -> None:
    with pytest.raises(miocore.InvalidDescriptorError, match="unsupported data type"):
        DataType.parse(value)


def test_parsing_never_imports_torch() -> None:
    code = (
        "import sys, numpy as np\n"
        "from miocore.problem.dtypes import DataType\n"
        "DataType.parse(np.float16); DataType.parse('float32'); DataType.parse(object) "
        "if False else None\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
