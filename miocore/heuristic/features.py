"""The numbers a learned heuristic sees of a problem: sizes, shape family, type, direction.

Features are computed from the canonical problem (a transposed convolution is its opposite
direction), in forward terms, mostly as log2 so that trees split sizes evenly across scales.
The list is versioned with the model format: a model records the names it was trained on and
is refused unless they begin this list. New features go at the end, so that a model trained
before them (it never reads their columns) keeps working.
"""

from __future__ import annotations

import math

import numpy as np

from miocore.problem.conv import ConvProblem

FEATURES: tuple[str, ...] = (
    "dir_forward",
    "dir_backward_data",
    "dir_backward_weights",
    "dtype_float32",
    "dtype_float16",
    "dtype_bfloat16",
    "channels_last",
    "rank3",
    "log2_n",
    "log2_c",
    "log2_k",
    "log2_groups",
    "log2_c_per_group",
    "log2_k_per_group",
    "depthwise",
    "log2_in_spatial",
    "log2_out_spatial",
    "filter_h",
    "filter_w",
    "filter_d",
    "log2_filter_taps",
    "pointwise",
    "stride_max",
    "dilation_max",
    "pad_max",
    "log2_flops",
    "log2_bytes",
    "log2_flops_per_byte",
    # fp32 found in the tf32 math mode (its records' keys say so: miocore.db.mathkeys)
    "math_tf32",
)


def _log2(value: float) -> float:
    return math.log2(value) if value > 0 else -1.0


def problem_features(problem: ConvProblem, math_mode: str = "exact") -> np.ndarray:
    """The :data:`FEATURES` of ``problem`` found in ``math_mode`` as a float64 vector."""
    p = problem.canonical
    x, w, y, conv = p.x, p.w, p.y, p.conv
    n, c = x.lengths[0], x.lengths[1]
    k = y.lengths[1]
    g = conv.groups
    filt = tuple(w.lengths[2:])
    rank = len(filt)
    in_sp = math.prod(x.lengths[2:])
    out_sp = math.prod(y.lengths[2:])
    taps = math.prod(filt)
    flops, nbytes = float(p.flops), float(p.bytes_moved)
    direction = p.direction.value
    dtype = str(x.dtype)
    return np.array(
        [
            direction == "forward",
            direction == "backward_data",
            direction == "backward_weights",
            "float32" in dtype,
            "float16" in dtype and "bfloat16" not in dtype,
            "bfloat16" in dtype,
            x.layout in ("NHWC", "NDHWC"),
            rank == 3,
            _log2(n),
            _log2(c),
            _log2(k),
            _log2(g),
            _log2(c // g),
            _log2(k // g),
            g > 1 and g == c == k,
            _log2(in_sp),
            _log2(out_sp),
            filt[-2],
            filt[-1],
            filt[0] if rank == 3 else 1,
            _log2(taps),
            taps == 1,
            max(conv.strides),
            max(conv.dilations),
            max(conv.pads),
            _log2(flops),
            _log2(nbytes),
            _log2(flops / nbytes) if nbytes else 0.0,
            math_mode == "tf32" and "float32" in dtype,
        ],
        dtype=np.float64,
    )
