"""A caller's array checked against its descriptor before the CPU engine runs on it (numpy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from miocore import InvalidArgumentError, TensorDescriptor


def conform(array: Any, desc: TensorDescriptor, field: str, written: bool) -> np.ndarray:
    """Check one caller array against its descriptor; return it in the descriptor's strides.

    The kernels may use float32 arrays in place, which needs the strides the descriptor
    promises. An input that has the right shape and dtype but other strides (a logical-order
    copy of an NHWC tensor, say) is copied once into the described layout; the output must
    match, since it is written in place.
    """
    if not isinstance(array, np.ndarray):
        raise InvalidArgumentError(
            "the CPU backend takes numpy arrays", field=field, value=type(array).__name__
        )
    if array.shape != desc.lengths or array.dtype != desc.dtype.numpy:
        raise InvalidArgumentError(
            f"expected shape {desc.lengths} and dtype {desc.dtype.value}",
            field=field,
            value=(array.shape, str(array.dtype)),
        )
    size = desc.dtype.itemsize
    if all(
        n == 1 or s == d * size
        for n, s, d in zip(array.shape, array.strides, desc.strides, strict=True)
    ):
        return array
    if written:
        raise InvalidArgumentError(
            f"the output is written in place and must have the descriptor's element strides "
            f"{desc.strides}",
            field=f"{field}.strides",
            value=tuple(s // size for s in array.strides),
        )
    logical = "NCHW" if desc.spatial_dims == 2 else "NCDHW"
    memory = np.empty([desc.lengths[logical.index(a)] for a in desc.layout], desc.dtype.numpy)
    out = memory.transpose([desc.layout.index(a) for a in logical])
    np.copyto(out, array)
    return out
