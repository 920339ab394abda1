"""How ``direct.depthwise`` moves a caller's tensor to and from the layout its kernels read:
in place where it already is that layout, else a float32 channels-last copy in the workspace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from miocore import DataType

if TYPE_CHECKING:
    import numpy as np


def channels_last(array: np.ndarray) -> np.ndarray:
    """The logical (N, C, H, W) array as an (N, H, W, C) view."""
    return array.transpose(0, 2, 3, 1)


def in_place(desc: Any, layout: str) -> bool:
    """Whether arrays of ``desc`` can be handed to kernels reading ``layout`` without a copy."""
    return desc.dtype is DataType.FLOAT32 and desc.is_packed and desc.layout == layout


def packed_float32_nchw(array: np.ndarray) -> bool:
    """Whether ``array`` (logically N, C, H, W) is float32 in packed NCHW order."""
    import numpy as np

    return array.dtype == np.float32 and array.flags.c_contiguous


def nchw_to_channels_last(array: np.ndarray, staged: np.ndarray) -> None:
    """A packed float32 NCHW tensor into its (N, H, W, C) staging: 16x16 register-block
    transposes where the channels come in whole blocks (1.2-4x faster: 8x144x56x56 0.94 against
    2.07 ms, 8x96x112x112 2.6 against 10.4, one thread), else one scalar pass."""
    if array.shape[1] % 16 == 0:
        from miocore_direct.grouped_transpose import nchw_into_padded

        nchw_into_padded(array, staged, 0, 0)
    else:
        from miocore_direct.depthwise_kernels import nchw_to_nhwc

        nchw_to_nhwc(array, staged)


def channels_last_to_nchw(staged: np.ndarray, array: np.ndarray) -> None:
    """The way back of :func:`nchw_to_channels_last` (8x144x56x56: 0.75 against 2.49 ms)."""
    if array.shape[1] % 16 == 0:
        from miocore_direct.grouped_transpose import nhwc_into_nchw

        nhwc_into_nchw(staged, array)
    else:
        from miocore_direct.depthwise_kernels import nhwc_to_nchw

        nhwc_to_nchw(staged, array)
