"""Tensor and convolution descriptors: frozen values, validated when they are built.

Lengths are always in logical order, ``(N, C, H, W)`` or ``(N, C, D, H, W)`` (weights:
``(K, C/groups, [Z,] Y, X)``), whatever the memory layout; the layout only decides the strides.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from typing import Any

from miocore.errors import InvalidDescriptorError
from miocore.problem.dtypes import DataType
from miocore.values import frozen, init_fields

#: Memory layouts by spatial rank; each names the dimension order from outermost to innermost.
LAYOUTS: dict[int, tuple[str, ...]] = {2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
_LOGICAL = {2: "NCHW", 3: "NCDHW"}


def _as_int_tuple(value: Any, field: str, *, minimum: int) -> tuple[int, ...]:
    try:
        items = tuple(value)
    except TypeError:
        raise InvalidDescriptorError(
            "expected a sequence of integers", field=field, value=value
        ) from None
    out = []
    for item in items:
        try:
            if isinstance(item, bool):
                raise TypeError
            number = operator.index(item)
        except TypeError:
            raise InvalidDescriptorError("expected integers", field=field, value=value) from None
        if number < minimum:
            raise InvalidDescriptorError(
                f"every entry must be >= {minimum}", field=field, value=value
            )
        out.append(number)
    return tuple(out)


def packed_strides(lengths: Sequence[int], layout: str) -> tuple[int, ...]:
    """Element strides, in logical order, of a packed tensor with ``layout``."""
    logical = _LOGICAL[len(lengths) - 2]
    by_dim = dict(zip(logical, lengths, strict=True))
    stride = 1
    stride_of = {}
    for dim in reversed(layout):
        stride_of[dim] = stride
        stride *= by_dim[dim]
    return tuple(stride_of[d] for d in logical)


def layout_from_strides(lengths: Sequence[int], strides: Sequence[int]) -> str:
    """The known layout whose dimension order the strides follow (ties broken toward NCHW)."""
    spatial = len(lengths) - 2
    logical = _LOGICAL[spatial]
    for layout in LAYOUTS[spatial]:
        order = [logical.index(d) for d in layout]
        # Dimensions of length 1 may carry any stride; ignore them in the order check.
        sized = [(strides[i], lengths[i]) for i in order if lengths[i] != 1]
        if all(a[0] >= b[0] * b[1] for a, b in itertools.pairwise(sized)):
            return layout
    raise InvalidDescriptorError(
        f"strides follow none of the layouts {LAYOUTS[spatial]}",
        field="strides",
        value=tuple(strides),
    )


@frozen(init=False)
class TensorDescriptor:
    """Element type, logical lengths and memory strides of one tensor.

    ``TensorDescriptor("float16", (32, 64, 56, 56), layout="NHWC")`` or, for a strided view,
    ``TensorDescriptor("float32", (1, 3, 4, 4), strides=(64, 16, 4, 1))``. When strides are
    given the layout is derived from their order; lengths stay in logical order.
    """

    dtype: DataType
    lengths: tuple[int, ...]
    layout: str
    strides: tuple[int, ...]

    def __init__(
        self,
        dtype: Any,
        lengths: Sequence[int],
        layout: str | None = None,
        strides: Sequence[int] | None = None,
    ) -> None:
        dt = DataType.parse(dtype)
        lens = _as_int_tuple(lengths, "lengths", minimum=1)
        if len(lens) not in (4, 5):
            raise InvalidDescriptorError(
                "expected 4 lengths (N, C, H, W) or 5 (N, C, D, H, W)",
                field="lengths",
                value=lengths,
            )
        spatial = len(lens) - 2
        if layout is not None:
            if not isinstance(layout, str) or layout.upper() not in LAYOUTS[spatial]:
                raise InvalidDescriptorError(
                    f"a {len(lens)}-D tensor takes one of {LAYOUTS[spatial]}",
                    field="layout",
                    value=layout,
                )
            layout = layout.upper()
        if strides is None:
            layout = layout or _LOGICAL[spatial]
            strd = packed_strides(lens, layout)
        else:
            strd = _as_int_tuple(strides, "strides", minimum=1)
            if len(strd) != len(lens):
                raise InvalidDescriptorError(
                    f"expected {len(lens)} strides, one per length", field="strides", value=strides
                )
            derived = layout_from_strides(lens, strd)
            if layout is not None and layout != derived:
                raise InvalidDescriptorError(
                    f"strides {strd} follow layout {derived}, not {layout}",
                    field="layout",
                    value=layout,
                )
            layout = derived
        init_fields(self, dtype=dt, lengths=lens, layout=layout, strides=strd)

    @property
    def spatial_dims(self) -> int:
        """2 for images, 3 for volumes."""
        return len(self.lengths) - 2

    @property
    def n(self) -> int:
        """Batch size (for weights: output channels K)."""
        return self.lengths[0]

    @property
    def c(self) -> int:
        """Channels (for weights: input channels per group)."""
        return self.lengths[1]

    @property
    def spatial(self) -> tuple[int, ...]:
        """Spatial lengths, ``(H, W)`` or ``(D, H, W)``."""
        return self.lengths[2:]

    @property
    def element_count(self) -> int:
        """Number of logical elements."""
        count = 1
        for length in self.lengths:
            count *= length
        return count

    @property
    def element_space(self) -> int:
        """Elements a buffer must hold to cover every stride step (>= element_count)."""
        return 1 + sum(
            (length - 1) * s for length, s in zip(self.lengths, self.strides, strict=True)
        )

    @property
    def nbytes(self) -> int:
        """Bytes a buffer for this tensor must hold."""
        return self.element_space * self.dtype.itemsize

    @property
    def is_packed(self) -> bool:
        """True when the strides are exactly those of a packed tensor in ``layout``."""
        return self.strides == packed_strides(self.lengths, self.layout)

    def with_lengths(self, lengths: Sequence[int]) -> TensorDescriptor:
        """A packed descriptor of the same dtype and layout with other lengths."""
        return TensorDescriptor(self.dtype, lengths, layout=self.layout)

    def __repr__(self) -> str:
        extra = "" if self.is_packed else f", strides={self.strides}"
        return (
            f"TensorDescriptor({self.dtype.value!r}, {self.lengths}, layout={self.layout!r}{extra})"
        )


def channel_hint(desc: TensorDescriptor, expected: int) -> str:
    """A hint for a channel mismatch that comes from lengths given in memory order.

    Lengths are logical, ``(N, C, H, W)`` / ``(N, C, D, H, W)``, even for NHWC data: a caller
    who passed ``(N, H, W, C)`` gets told so.
    """
    if desc.layout in ("NCHW", "NCDHW") and expected not in desc.spatial:
        return ""
    logical = "(N, C, H, W)" if len(desc.lengths) == 4 else "(N, C, D, H, W)"
    return (
        f" (lengths are in logical order {logical} whatever the layout, here {desc.layout}:"
        " for channels-last data give (N, C, H, W) with layout='NHWC', not (N, H, W, C))"
    )


def _spatial_field(value: Any, field: str, minimum: int) -> tuple[int, ...] | None:
    if value is None:
        return None
    return _as_int_tuple(value, field, minimum=minimum)


@frozen(init=False)
class ConvolutionDescriptor:
    """Padding, stride, dilation, groups and mode of a 2-D or 3-D convolution.

    ``mode`` is ``"conv"`` (cross-correlation, as every DL framework means by convolution) or
    ``"transpose"`` (the gradient of conv with respect to its input, used as a layer).
    ``output_pads`` only matters for ``transpose``: extra rows added at the high end of the
    output, as PyTorch's ``output_padding``.
    """

    pads: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    mode: str
    output_pads: tuple[int, ...]

    def __init__(
        self,
        pads: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        dilations: Sequence[int] | None = None,
        groups: int = 1,
        mode: str = "conv",
        output_pads: Sequence[int] | None = None,
    ) -> None:
        given = {
            "pads": _spatial_field(pads, "pads", 0),
            "strides": _spatial_field(strides, "strides", 1),
            "dilations": _spatial_field(dilations, "dilations", 1),
            "output_pads": _spatial_field(output_pads, "output_pads", 0),
        }
        ranks = {len(v) for v in given.values() if v is not None}
        if len(ranks) > 1:
            raise InvalidDescriptorError(
                "pads, strides, dilations and output_pads must have the same length",
                field="pads/strides/dilations",
                value={k: v for k, v in given.items() if v is not None},
            )
        rank = ranks.pop() if ranks else 2
        if rank not in (2, 3):
            raise InvalidDescriptorError(
                "only 2-D and 3-D convolutions are supported", field="pads", value=pads
            )
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
            raise InvalidDescriptorError("must be an integer >= 1", field="groups", value=groups)
        if mode not in ("conv", "transpose"):
            raise InvalidDescriptorError("expected 'conv' or 'transpose'", field="mode", value=mode)
        out_pads = given["output_pads"] or (0,) * rank
        strd = given["strides"] or (1,) * rank
        if mode == "conv" and any(out_pads):
            raise InvalidDescriptorError(
                "output_pads only apply to mode='transpose'", field="output_pads", value=out_pads
            )
        dils = given["dilations"] or (1,) * rank
        for i, (op, s, d) in enumerate(zip(out_pads, strd, dils, strict=True)):
            if op >= max(s, d):
                raise InvalidDescriptorError(
                    f"output_pads[{i}] must be smaller than the stride or the dilation",
                    field="output_pads",
                    value=out_pads,
                )
        init_fields(
            self,
            pads=given["pads"] or (0,) * rank,
            strides=strd,
            dilations=dils,
            groups=groups,
            mode=mode,
            output_pads=out_pads,
        )

    @property
    def spatial_dims(self) -> int:
        """2 or 3."""
        return len(self.pads)

    def _check_channels(self, x: TensorDescriptor, w: TensorDescriptor) -> None:
        """x's channels, w's shape and the group count must agree (before any arithmetic)."""
        g = self.groups
        if self.mode == "conv":
            # x (N, C, ...) -> y (N, K, ...); w is (K, C/g, ...).
            if x.c % g:
                raise InvalidDescriptorError(
                    f"x has {x.c} channels, which do not split into groups={g}",
                    field="groups",
                    value=g,
                )
            if x.c != w.c * g:
                raise InvalidDescriptorError(
                    f"x has {x.c} channels but w {w.lengths} expects {w.c} per group x {g} "
                    f"groups = {w.c * g}" + channel_hint(x, w.c * g),
                    field="x.lengths",
                    value=x.lengths,
                )
            if w.n % g:
                raise InvalidDescriptorError(
                    f"w's {w.n} output channels do not split into groups={g}",
                    field="w.lengths",
                    value=w.lengths,
                )
        else:
            # A transposed layer runs the canonical convolution backwards: x has w's K channels.
            if w.n % g or x.c % g:
                raise InvalidDescriptorError(
                    f"x's {x.c} channels and w's first length {w.n} must split into groups={g}",
                    field="groups",
                    value=g,
                )
            if x.c != w.n:
                raise InvalidDescriptorError(
                    f"x has {x.c} channels but a transposed convolution with w {w.lengths} "
                    f"expects w's first length, {w.n}" + channel_hint(x, w.n),
                    field="x.lengths",
                    value=x.lengths,
                )

    def output_spatial(
        self, in_spatial: Sequence[int], filter_spatial: Sequence[int]
    ) -> tuple[int, ...]:
        """Spatial output lengths of this convolution (as a layer, so transpose grows)."""
        out = []
        for i, (size, f) in enumerate(zip(in_spatial, filter_spatial, strict=True)):
            p, s, d = self.pads[i], self.strides[i], self.dilations[i]
            if self.mode == "conv":
                o = (size + 2 * p - d * (f - 1) - 1) // s + 1
            else:
                o = (size - 1) * s - 2 * p + d * (f - 1) + 1 + self.output_pads[i]
            out.append(o)
        return tuple(out)

    def output_descriptor(
        self,
        x: TensorDescriptor,
        w: TensorDescriptor,
        *,
        layout: str | None = None,
        dtype: Any = None,
    ) -> TensorDescriptor:
        """The packed output descriptor of applying this convolution to ``x`` with ``w``.

        It takes ``x``'s dtype and layout unless told otherwise.
        """
        if x.spatial_dims != self.spatial_dims or w.spatial_dims != self.spatial_dims:
            raise InvalidDescriptorError(
                f"the convolution is {self.spatial_dims}-D but x is {x.spatial_dims}-D"
                f" and w is {w.spatial_dims}-D",
                field="x.lengths",
                value=x.lengths,
            )
        self._check_channels(x, w)
        spatial = self.output_spatial(x.spatial, w.spatial)
        if min(spatial) < 1:
            raise InvalidDescriptorError(
                f"the output would have spatial size {spatial}: the filter (with dilation) is"
                " larger than the padded input",
                field="x.lengths",
                value=x.lengths,
            )
        channels = w.n if self.mode == "conv" else w.c * self.groups
        return TensorDescriptor(
            dtype if dtype is not None else x.dtype,
            (x.n, channels, *spatial),
            layout=layout or x.layout,
        )
