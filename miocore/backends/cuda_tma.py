"""Tensor maps for the tensor memory accelerator (TMA) of NVIDIA sm_90 and later.

A kernel that loads tiles with ``cp.async.bulk.tensor`` takes a ``CUtensorMap`` (128 opaque
bytes) by value: the global tensor's address, sizes and strides and the box it copies, made on
the host by ``cuTensorMapEncodeTiled``. The bytes go into the kernel's argument block like any
struct (:class:`~miocore.backends.gpu_kernels.KernelArgs`, kind ``"bytes"``). Encoding needs no
context or device, only the driver library.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from miocore.errors import InvalidArgumentError
from miocore.problem.dtypes import DataType

__all__ = ["TENSOR_MAP_BYTES", "tiled_tensor_map"]

#: Size of a ``CUtensorMap``.
TENSOR_MAP_BYTES = 128

_DTYPES = {
    DataType.FLOAT16: "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    DataType.BFLOAT16: "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    DataType.FLOAT32: "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
}

#: L2 promotion by bytes, to the driver's names.
_L2_PROMOTIONS = {
    0: "CU_TENSOR_MAP_L2_PROMOTION_NONE",
    64: "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
    128: "CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
    256: "CU_TENSOR_MAP_L2_PROMOTION_L2_256B",
}


def tiled_tensor_map(
    dtype: DataType,
    address: int,
    dims: Sequence[int],
    strides: Sequence[int],
    box: Sequence[int],
    element_strides: Sequence[int],
    swizzle: bool = True,
    l2_promotion: int = 256,
) -> bytes:
    """A tiled ``CUtensorMap`` of the tensor at ``address``: ``dims`` innermost first (the
    innermost contiguous), ``strides`` in bytes for every dimension but the innermost, a
    ``box`` of elements traversed per copy, taking every ``element_strides[i]``-th along
    dimension ``i`` (so ``box[i] / element_strides[i]`` land in shared memory). 128-byte
    swizzle (the layout wgmma reads), or with ``swizzle=False`` the box as it lies, densely in
    shared memory; zeros for elements outside the tensor (negative coordinates included).
    ``l2_promotion``: the bytes (0, 64, 128 or 256) L2 fetches from memory around each
    requested piece: more than a box row uses is fetched for nothing once the rest is evicted
    before another block wants it."""
    rank = len(dims)
    if not (len(strides) == rank - 1 and len(box) == rank == len(element_strides)):
        raise InvalidArgumentError(
            "a tensor map takes one size, box and element stride per dimension and one byte "
            "stride per outer dimension",
            field="strides",
            value=(tuple(dims), tuple(strides), tuple(box), tuple(element_strides)),
        )
    if dtype not in _DTYPES:
        raise InvalidArgumentError(
            f"tensor maps here hold {', '.join(sorted(d.value for d in _DTYPES))}",
            field="dtype",
            value=dtype.value,
        )
    if l2_promotion not in _L2_PROMOTIONS:
        raise InvalidArgumentError(
            f"L2 promotion is one of {', '.join(map(str, _L2_PROMOTIONS))} bytes",
            field="l2_promotion",
            value=l2_promotion,
        )
    from cuda.bindings import driver as cu

    from miocore.backends.cuda import _check

    made = _check(
        cu.cuTensorMapEncodeTiled(
            getattr(cu.CUtensorMapDataType, _DTYPES[dtype]),
            rank,
            address,
            [cu.cuuint64_t(int(v)) for v in dims],
            [cu.cuuint64_t(int(v)) for v in strides],
            [cu.cuuint32_t(int(v)) for v in box],
            [cu.cuuint32_t(int(v)) for v in element_strides],
            cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B
            if swizzle
            else cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_NONE,
            getattr(cu.CUtensorMapL2promotion, _L2_PROMOTIONS[l2_promotion]),
            cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        f"cuTensorMapEncodeTiled(dims={list(dims)}, box={list(box)})",
    )
    return ctypes.string_at(made.getPtr(), TENSOR_MAP_BYTES)
