"""Numerics a caller can choose and trust: numerical notes, accuracy policies, error bounds.

**Numerical notes** are what a solver declares about its arithmetic (``Solver.numerical_notes``),
as cuDNN's frontend tags its engines: ``winograd`` and ``fft`` transform the operands (more
rounding), ``tf32`` rounds fp32 inputs to 10 mantissa bits, ``reduced_precision_accumulation``
sums in fewer than 32 bits, ``down_convert`` keeps intermediate buffers in a narrower type than
the problem's, and ``nondeterministic`` sums in an order that changes from run to run (split-K
atomics) so two runs may differ in the last bits.

**Accuracy policies** (``find_solutions(accuracy=...)``, ``MIOCORE_ACCURACY``):

* ``strict``: no note that loses accuracy against a plain fp32-accumulating GEMM
  (:data:`LOSSY_NOTES`: every note but ``nondeterministic``);
* ``default``: every candidate's error is measured during find against a trusted float64
  reference and a candidate beyond :func:`error_bound` is left out;
* ``fast``: no check, every note allowed.

Errors are relative: max abs difference over max abs reference, as
:func:`miocore.reference.relative_error` measures them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from miocore import env
from miocore.errors import InvalidArgumentError, InvalidEnvironmentError
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.dtypes import DataType

if TYPE_CHECKING:
    import numpy as np


class NumericalNote(StrEnum):
    """One property of a solver's arithmetic that a caller may want to avoid."""

    WINOGRAD = "winograd"
    FFT = "fft"
    TF32 = "tf32"
    REDUCED_PRECISION_ACCUMULATION = "reduced_precision_accumulation"
    DOWN_CONVERT = "down_convert"
    NONDETERMINISTIC = "nondeterministic"


#: Every note a solver may declare.
KNOWN_NOTES: frozenset[str] = frozenset(n.value for n in NumericalNote)

#: Notes that lose accuracy against a plain fp32-accumulating GEMM: ``strict`` refuses them.
#: ``nondeterministic`` is not among them: an atomic fp32 sum is as accurate, only unordered.
LOSSY_NOTES: frozenset[str] = KNOWN_NOTES - {NumericalNote.NONDETERMINISTIC.value}


def parse_notes(values: Iterable[Any], field: str = "numerical_notes") -> frozenset[str]:
    """The notes in ``values`` as a frozenset of names; an unknown note is an error naming it."""
    if isinstance(values, str):  # a lone string would be taken letter by letter
        raise InvalidArgumentError(
            f"expected a set of notes from {sorted(KNOWN_NOTES)}, got one string",
            field=field,
            value=values,
        )
    notes = frozenset(str(v) for v in values)
    unknown = sorted(notes - KNOWN_NOTES)
    if unknown:
        raise InvalidArgumentError(
            f"unknown numerical note(s) {unknown}; known: {sorted(KNOWN_NOTES)}",
            field=field,
            value=sorted(notes),
        )
    return notes


def format_notes(notes: Iterable[str]) -> str:
    """Notes as ``miocore solvers`` and ``explain()`` print them: sorted, comma-separated."""
    return ",".join(sorted(notes)) or "-"


class AccuracyPolicy(StrEnum):
    """What find does about accuracy (module docstring)."""

    STRICT = "strict"
    DEFAULT = "default"
    FAST = "fast"

    @classmethod
    def parse(cls, value: Any, field: str = "accuracy") -> AccuracyPolicy:
        """Accept a policy or its name in any case; anything else names the field."""
        if isinstance(value, AccuracyPolicy):
            return value
        if isinstance(value, str) and value.strip().lower() in cls._value2member_map_:
            return cls(value.strip().lower())
        raise InvalidArgumentError(
            f"expected one of {', '.join(p.value for p in cls)}", field=field, value=value
        )

    def allows(self, notes: Iterable[str]) -> bool:
        """Whether a solver with ``notes`` may be a candidate under this policy."""
        return self is not AccuracyPolicy.STRICT or not (frozenset(notes) & LOSSY_NOTES)


def accuracy_from_env() -> AccuracyPolicy:
    """``MIOCORE_ACCURACY`` (default ``default``); a bad value is an error naming it."""
    raw = env.get("MIOCORE_ACCURACY", "").strip()
    if not raw:
        return AccuracyPolicy.DEFAULT
    try:
        return AccuracyPolicy.parse(raw, field="MIOCORE_ACCURACY")
    except InvalidArgumentError:
        choices = ", ".join(p.value for p in AccuracyPolicy)
        raise InvalidEnvironmentError(
            f"expected one of {choices}", field="MIOCORE_ACCURACY", value=raw
        ) from None


#: Unit roundoff of each data type (half an ulp of 1.0): the relative error of one rounding.
UNIT_ROUNDOFF: dict[DataType, float] = {
    DataType.FLOAT32: 2.0**-24,
    DataType.FLOAT16: 2.0**-11,
    DataType.BFLOAT16: 2.0**-8,
}

#: Each type's largest finite value: a correctly rounded result beyond it is an infinity.
MAX_FINITE: dict[DataType, float] = {
    DataType.FLOAT32: 3.4028234663852886e38,
    DataType.FLOAT16: 65504.0,
    DataType.BFLOAT16: 3.3895313892515355e38,
}

#: An infinity is a right answer where the exact value reaches this share of the largest
#: finite value (an accumulation within its error bound may round up from just below it).
OVERFLOW_SHARE = 63.0 / 64.0

#: How much worse than the trusted path a candidate may be in the ``default`` policy.
BOUND_FACTOR = 4.0

#: How much worse than the most accurate plain candidate (no lossy note) measured in the same
#: find, on the same data, a candidate with a lossy note may be in the ``default`` policy. The
#: bound above is an estimate; vendors' plain paths reach 3-7x less in fp32, so without this a
#: Winograd winner could be 5-28x the vendor's error (docs/numerics.md).
PLAIN_PATH_FACTOR = 2.0

#: A relative error beyond this is no rounding error at all but a wrong answer (a zeroed
#: output gives 1, an off-by-one pixel 0.1 to 1 on random data): such a candidate goes on the
#: deny list. The loosest bound (bfloat16, long reductions) is about 0.016: a factor 3 below.
WRONG_ERROR = 0.05


def reduction_length(problem: ConvProblem) -> int:
    """Terms summed into one output element: C/G·R·S (forward, backward weights sums N·P·Q
    instead, backward data K/G·R·S), the length that rounding error grows with."""
    filt = math.prod(problem.filter_spatial)
    g = problem.conv.groups
    if problem.direction is Direction.FORWARD:
        return problem.c // g * filt
    if problem.direction is Direction.BACKWARD_DATA:
        return problem.k // g * filt
    return problem.n * math.prod(problem.out_spatial)


#: Unit roundoff of TF32 (10 explicit mantissa bits): what fp32 inputs are rounded to by the
#: tensor cores in the ``"tf32"`` math mode.
TF32_ROUNDOFF = 2.0**-11


def trusted_error(dtype: DataType | str, length: int, *, tf32: bool = False) -> float:
    """The error a plain fp32-accumulating GEMM is expected to reach: one rounding to the
    output type plus fp32 accumulation growing as sqrt(length) (random-sign rounding). With
    ``tf32`` (a handle in the ``"tf32"`` math mode, fp32 data) the caller accepted inputs
    rounded to TF32: each product then carries two such roundings."""
    dtype = DataType.parse(dtype)
    error = UNIT_ROUNDOFF[dtype] + UNIT_ROUNDOFF[DataType.FLOAT32] * math.sqrt(max(1, length))
    if tf32 and dtype is DataType.FLOAT32:
        error += 2 * TF32_ROUNDOFF
    return error


def error_bound(dtype: DataType | str, length: int, *, tf32: bool = False) -> float:
    """The largest relative error the ``default`` policy accepts: :data:`BOUND_FACTOR` times
    :func:`trusted_error` for the data type, reduction length and math mode."""
    return BOUND_FACTOR * trusted_error(dtype, length, tf32=tf32)


def overflowed(expected: np.ndarray, got: np.ndarray, dtype: DataType) -> np.ndarray:
    """Where ``got`` holds the infinity that rounding ``expected`` (exact) to ``dtype`` gives:
    the same sign, and ``expected`` beyond the type's range (:data:`OVERFLOW_SHARE`). A
    backward weights reduction over a batch of correlated data can exceed fp16's range; every
    correct kernel writes infinity there, and is not wrong for it."""
    import numpy as np

    limit = MAX_FINITE[dtype] * OVERFLOW_SHARE
    same_sign = np.sign(got) == np.sign(expected)
    mask: np.ndarray = np.isinf(got) & same_sign & (np.abs(expected) >= limit)
    return mask


def is_wrong(error: float, reference_has_nan: bool = False) -> bool:
    """Whether a measured error means a wrong answer (NaN, or beyond :data:`WRONG_ERROR`),
    not a loss of precision. NaN is wrong only where the reference has none."""
    if math.isnan(error):
        return not reference_has_nan
    return error > WRONG_ERROR
