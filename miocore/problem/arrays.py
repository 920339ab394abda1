"""Descriptors read off arrays: shape, element type and memory layout of a numpy array, a torch
tensor (CPU or GPU) or any array with ``shape``, ``dtype`` and byte ``strides`` (CuPy).

Nothing here imports an array library: a torch tensor is recognised by its type's module, its
strides are read with ``stride()`` (elements); other arrays give byte strides (or none, when
they are always packed row-major, as JAX's). The layout is the one whose packed strides the
array has (dimensions of length 1 may carry any stride); an array packed in several layouts
(a 1x1 filter, one channel) takes the problem's layout.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

from miocore.errors import InvalidDescriptorError, InvalidProblemError
from miocore.problem.descriptors import (
    LAYOUTS,
    ConvolutionDescriptor,
    TensorDescriptor,
    packed_strides,
)
from miocore.problem.dtypes import DataType
from miocore.values import frozen


@frozen(kw_only=True)
class ArrayInfo:
    """What an array says about itself: element type, logical lengths, element strides, and
    the layouts it is packed in (NCHW first; empty when it is packed in none)."""

    field: str
    dtype: DataType
    lengths: tuple[int, ...]
    strides: tuple[int, ...]
    packed_in: tuple[str, ...]

    def descriptor(self, layout: str, *, required: bool) -> TensorDescriptor:
        """The descriptor of this array: packed in ``layout`` when the array is packed in it;
        else (unless the layout is ``required``) packed in the first layout it is packed in;
        else with its own strides, which must follow ``layout`` when it is required."""
        if layout in self.packed_in:
            return TensorDescriptor(self.dtype, self.lengths, layout=layout)
        if self.packed_in and not required:
            return TensorDescriptor(self.dtype, self.lengths, layout=self.packed_in[0])
        desc = self.strided()
        if required and desc.layout != layout:
            raise InvalidProblemError(
                f"the array's strides follow layout {desc.layout}, not layout={layout!r}",
                field=f"{self.field}.strides",
                value=self.strides,
            )
        return desc

    def strided(self) -> TensorDescriptor:
        """The descriptor with the array's own strides (their order gives the layout)."""
        try:
            return TensorDescriptor(self.dtype, self.lengths, strides=self.strides)
        except InvalidDescriptorError:
            raise InvalidProblemError(
                f"the strides follow none of the layouts {LAYOUTS[len(self.lengths) - 2]}",
                field=f"{self.field}.strides",
                value=self.strides,
            ) from None


def array_info(array: Any, field: str) -> ArrayInfo:
    """Read ``array``'s element type, lengths and strides; refuse what is not a 4-D or 5-D
    array of a supported type, naming ``field``."""
    shape = getattr(array, "shape", None)
    dtype = getattr(array, "dtype", None)
    if shape is None or dtype is None:
        raise InvalidProblemError(
            "expected an array (numpy, torch, or any with shape, dtype and strides)",
            field=field,
            value=type(array).__name__,
        )
    try:
        lengths = tuple(operator.index(n) for n in shape)
    except TypeError:
        raise InvalidProblemError(
            "the shape must be integers", field=f"{field}.shape", value=shape
        ) from None
    if len(lengths) not in (4, 5):
        raise InvalidProblemError(
            "expected a 4-D (N, C, H, W) or 5-D (N, C, D, H, W) array in logical order",
            field=f"{field}.shape",
            value=lengths,
        )
    if min(lengths) < 1:
        raise InvalidProblemError(
            "every length must be >= 1", field=f"{field}.shape", value=lengths
        )
    dt = DataType.parse(dtype, field=f"{field}.dtype")
    strides = _element_strides(array, lengths, dt.itemsize, field)
    layouts = tuple(
        layout
        for layout in LAYOUTS[len(lengths) - 2]
        if _same_steps(strides, packed_strides(lengths, layout), lengths)
    )
    return ArrayInfo(field=field, dtype=dt, lengths=lengths, strides=strides, packed_in=layouts)


def _element_strides(
    array: Any, lengths: tuple[int, ...], itemsize: int, field: str
) -> tuple[int, ...]:
    if type(array).__module__.split(".", 1)[0] == "torch" and callable(
        getattr(array, "stride", None)
    ):
        raw = tuple(array.stride())
    else:
        byte_strides = getattr(array, "strides", None)
        if byte_strides is None:  # always packed row-major (JAX)
            return tuple(math.prod(lengths[i + 1 :]) for i in range(len(lengths)))
        byte_strides = tuple(byte_strides)
        if any(s % itemsize for s in byte_strides):
            raise InvalidProblemError(
                f"byte strides must be multiples of the element size {itemsize}",
                field=f"{field}.strides",
                value=byte_strides,
            )
        raw = tuple(s // itemsize for s in byte_strides)
    # A dimension of length 1 is never stepped over: its stride does not matter (torch and
    # numpy give it any value, 0 included). Give it 1, which every descriptor accepts.
    strides = tuple(1 if n == 1 else s for n, s in zip(lengths, raw, strict=True))
    if min(strides) < 1:
        raise InvalidProblemError(
            "negative or zero strides (flipped or broadcast views) are not supported; pass a copy",
            field=f"{field}.strides",
            value=raw,
        )
    return strides


def _same_steps(a: Sequence[int], b: Sequence[int], lengths: Sequence[int]) -> bool:
    return all(x == y for x, y, n in zip(a, b, lengths, strict=True) if n != 1)


def descriptors_of_arrays(
    x: Any,
    w: Any,
    y: Any = None,
    *,
    stride: int | Sequence[int] = 1,
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    layout: str | None = None,
) -> tuple[TensorDescriptor, TensorDescriptor, TensorDescriptor, ConvolutionDescriptor]:
    """The x, w, y descriptors and the convolution of an ordinary convolution given as arrays
    (``ConvProblem.from_tensors`` says how each is read)."""
    infos = [array_info(x, "x"), array_info(w, "w")]
    if y is not None:
        infos.append(array_info(y, "y"))
    xi = infos[0]
    rank = len(xi.lengths) - 2
    for info in infos[1:]:
        if len(info.lengths) != len(xi.lengths):
            raise InvalidProblemError(
                f"x is {len(xi.lengths)}-D but {info.field} is {len(info.lengths)}-D",
                field=f"{info.field}.shape",
                value=info.lengths,
            )
        if info.dtype is not xi.dtype:
            raise InvalidProblemError(
                f"x is {xi.dtype.value} but {info.field} is {info.dtype.value}: x, w and y "
                "share one data type",
                field=f"{info.field}.dtype",
                value=info.dtype.value,
            )
    if layout is not None:
        if not isinstance(layout, str) or layout.upper() not in LAYOUTS[rank]:
            raise InvalidProblemError(
                f"a {rank}-D convolution takes one of {LAYOUTS[rank]}",
                field="layout",
                value=layout,
            )
        chosen = layout.upper()
    else:
        chosen = _problem_layout(infos, rank)
    required = layout is not None
    conv = ConvolutionDescriptor(
        pads=_per_dim(padding, "padding", rank, minimum=0),
        strides=_per_dim(stride, "stride", rank, minimum=1),
        dilations=_per_dim(dilation, "dilation", rank, minimum=1),
        groups=groups,
    )
    descs = [info.descriptor(chosen, required=required) for info in infos]
    if y is None:
        descs.append(conv.output_descriptor(descs[0], descs[1], layout=chosen))
    return descs[0], descs[1], descs[2], conv


def _problem_layout(infos: list[ArrayInfo], rank: int) -> str:
    """One layout for the problem: the first array (x, w, y) packed in exactly one layout
    decides; else the first strided one's; else the default (NCHW/NCDHW)."""
    for info in infos:
        if len(info.packed_in) == 1:
            return info.packed_in[0]
    for info in infos:
        if not info.packed_in:
            return info.strided().layout
    return LAYOUTS[rank][0]


def _per_dim(value: Any, field: str, rank: int, *, minimum: int) -> tuple[int, ...]:
    """An int, or one int per spatial dimension, as torch takes ``stride`` and ``padding``."""
    items = (value,) * rank if isinstance(value, int) and not isinstance(value, bool) else value
    try:
        out = tuple(operator.index(v) for v in items if not isinstance(v, bool))
        ok = len(out) == len(items) == rank
    except TypeError:
        ok = False
    if not ok or min(out) < minimum:
        raise InvalidProblemError(
            f"expected an integer >= {minimum} or {rank} of them, one per spatial dimension",
            field=field,
            value=value,
        )
    return out
