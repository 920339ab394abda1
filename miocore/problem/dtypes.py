"""Data types miocore knows: their names, MIOpen key tokens and numpy equivalents."""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from miocore.errors import InvalidDescriptorError

if TYPE_CHECKING:
    import numpy as np


class DataType(StrEnum):
    """Element type of a tensor. Values are the user-facing names."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"

    @property
    def key_token(self) -> str:
        """The token MIOpen writes for this type in a FindDb key."""
        return _KEY_TOKENS[self]

    @property
    def numpy(self) -> np.dtype[Any]:
        """The numpy dtype of arrays of this type (bfloat16 through ml_dtypes)."""
        return numpy_dtypes()[self]

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]

    @classmethod
    def parse(cls, value: object, field: str = "dtype") -> DataType:
        """Accept a DataType, a name ("float16", "fp16", "half"), a key token, a numpy dtype or
        scalar type (``np.float16``, ``np.dtype("float32")``) or a torch dtype
        (``torch.bfloat16``; torch is never imported here)."""
        if isinstance(value, DataType):
            return value
        if _is_torch_dtype(value):
            value = str(value)  # "torch.float32"
        if isinstance(value, str):
            found = _ALIASES.get(value.strip().lower().removeprefix("torch."))
            if found is not None:
                return found
        else:
            import numpy as np  # a numpy dtype or type: numpy is loaded already

            try:
                as_np = np.dtype(value)  # type: ignore[call-overload]
            except (TypeError, ValueError):
                as_np = None
            if as_np is not None:
                for dt, npdt in numpy_dtypes().items():
                    if npdt == as_np:
                        return dt
        raise InvalidDescriptorError(
            f"unsupported data type; expected one of {[d.value for d in cls]}",
            field=field,
            value=value,
        )


def _is_torch_dtype(value: object) -> bool:
    """Whether ``value`` is a ``torch.dtype``, judged by its type so torch is not imported."""
    kind = type(value)
    return kind.__module__ == "torch" and kind.__name__ == "dtype"


_KEY_TOKENS = {DataType.FLOAT32: "FP32", DataType.FLOAT16: "FP16", DataType.BFLOAT16: "BF16"}
_ITEMSIZE = {DataType.FLOAT32: 4, DataType.FLOAT16: 2, DataType.BFLOAT16: 2}


@functools.cache
def numpy_dtypes() -> dict[DataType, np.dtype[Any]]:
    """The numpy dtype of each type, built on first use: numpy and ml_dtypes are imported
    when arrays are, never by a problem's description (a FindDb hit needs no numpy)."""
    import ml_dtypes
    import numpy as np

    return {
        DataType.FLOAT32: np.dtype(np.float32),
        DataType.FLOAT16: np.dtype(np.float16),
        DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    }


_ALIASES = {
    "float32": DataType.FLOAT32,
    "fp32": DataType.FLOAT32,
    "float": DataType.FLOAT32,
    "float16": DataType.FLOAT16,
    "fp16": DataType.FLOAT16,
    "half": DataType.FLOAT16,
    "bfloat16": DataType.BFLOAT16,
    "bf16": DataType.BFLOAT16,
}

#: Relative tolerances that verification uses per data type (errors normalised by the
#: magnitude of the reference, see :func:`miocore.reference.relative_error`).
VERIFY_TOLERANCE = {DataType.FLOAT32: 1e-5, DataType.FLOAT16: 5e-3, DataType.BFLOAT16: 3e-2}
