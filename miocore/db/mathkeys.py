"""Database keys per math mode: a TF32 find's record never passes for an exact one.

An fp32 problem found in the ``"tf32"`` math mode is recorded under its MIOpen key with
:data:`TF32_SUFFIX` appended (``...-NHWC-FP32-F_tf32``, ``...-FP32-W_g32_tf32``). The same
cuDNN engine runs on tensor cores in that mode and exactly in the other (on the sm90 tuning
sample one engine measured 2x faster on a tenth of its problems), and the TF32-only solvers
have no meaning for an exact handle, so the two finds keep separate records and the learned
heuristic sees the mode as a feature. Every other problem (fp16, bf16, fp32 in the exact mode)
keeps MIOpen's key byte for byte. MIOpen has no such mode: text exports leave these records
out.
"""

from __future__ import annotations

from typing import Any

#: Appended to an fp32 problem's key for records of the ``"tf32"`` math mode.
TF32_SUFFIX = "_tf32"


def record_key(problem: Any, math_mode: str) -> str:
    """The FindDb / PerfDb key of ``problem`` found in ``math_mode``."""
    key: str = problem.key
    if math_mode == "tf32" and problem.dtype == "float32":  # a DataType, a str enum
        return key + TF32_SUFFIX
    return key


def split_record_key(key: str) -> tuple[str, str]:
    """``(MIOpen key, math mode)`` of a database key."""
    if key.endswith(TF32_SUFFIX):
        return key[: -len(TF32_SUFFIX)], "tf32"
    return key, "exact"
