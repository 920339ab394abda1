"""The convolution problem: direction, the three tensors and the convolution.

A problem is validated when it is built: channels, groups, batch and output sizes must fit.
Transposed convolutions are expressed as the opposite direction of an ordinary convolution with
x and y swapped (as MIOpen does); :attr:`ConvProblem.canonical` gives that form, and solvers only
ever see canonical problems.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from enum import StrEnum
from functools import cached_property
from typing import Any

from miocore.errors import InvalidProblemError
from miocore.problem.arrays import descriptors_of_arrays
from miocore.problem.descriptors import (
    LAYOUTS,
    ConvolutionDescriptor,
    TensorDescriptor,
    channel_hint,
)
from miocore.problem.dtypes import DataType
from miocore.values import frozen, init_fields


class Direction(StrEnum):
    """Which tensor a convolution computes: y (forward), x (backward data), w (backward weights)."""

    FORWARD = "forward"
    BACKWARD_DATA = "backward_data"
    BACKWARD_WEIGHTS = "backward_weights"

    @property
    def letter(self) -> str:
        """MIOpen's key letter: F, B or W."""
        return {"forward": "F", "backward_data": "B", "backward_weights": "W"}[self.value]

    @property
    def output_tensor(self) -> str:
        """Name of the tensor this direction writes: ``"y"``, ``"x"`` or ``"w"``."""
        return {"forward": "y", "backward_data": "x", "backward_weights": "w"}[self.value]

    @classmethod
    def parse(cls, value: Any, field: str = "direction") -> Direction:
        """Accept a Direction, its name, or MIOpen's letter (F, B, W)."""
        if isinstance(value, Direction):
            return value
        if isinstance(value, str):
            text = value.strip().lower().replace("-", "_")
            for d in cls:
                if text in (d.value, d.letter.lower()):
                    return d
            aliases = {
                "fwd": cls.FORWARD,
                "bwd": cls.BACKWARD_DATA,
                "bwd_data": cls.BACKWARD_DATA,
                "wrw": cls.BACKWARD_WEIGHTS,
                "bwd_weights": cls.BACKWARD_WEIGHTS,
            }
            if text in aliases:
                return aliases[text]
        raise InvalidProblemError(
            f"expected one of {[d.value for d in cls]}", field=field, value=value
        )


_TRANSPOSED_DIRECTION = {
    Direction.FORWARD: Direction.BACKWARD_DATA,
    Direction.BACKWARD_DATA: Direction.FORWARD,
    Direction.BACKWARD_WEIGHTS: Direction.BACKWARD_WEIGHTS,
}


@frozen(init=False, eq=False)
class ConvProblem:
    """One convolution to find a solution for: ``ConvProblem("forward", x=x, w=w, y=y, conv=conv)``.

    Sizes are in forward terms whatever the direction: ``x`` is the convolution's input,
    ``y`` its output and ``w`` the weights ``(K, C/groups, [Z,] Y, X)``. For a transposed
    convolution (``conv.mode == "transpose"``) ``x`` is the layer's input, ``y`` its output,
    and ``w`` is ``(C_in, C_out/groups, ...)`` as in PyTorch's ``conv_transpose``.
    """

    direction: Direction
    x: TensorDescriptor
    w: TensorDescriptor
    y: TensorDescriptor
    conv: ConvolutionDescriptor

    def __init__(
        self,
        direction: Any,
        *,
        x: TensorDescriptor,
        w: TensorDescriptor,
        y: TensorDescriptor,
        conv: ConvolutionDescriptor | None = None,
    ) -> None:
        d = Direction.parse(direction)
        conv = (
            conv
            if conv is not None
            else ConvolutionDescriptor(
                pads=(0,) * (x.spatial_dims if isinstance(x, TensorDescriptor) else 2)
            )
        )
        for name, desc in (("x", x), ("w", w), ("y", y)):
            if not isinstance(desc, TensorDescriptor):
                raise InvalidProblemError(
                    "expected a miocore.TensorDescriptor", field=name, value=desc
                )
        if not isinstance(conv, ConvolutionDescriptor):
            raise InvalidProblemError(
                "expected a miocore.ConvolutionDescriptor", field="conv", value=conv
            )
        init_fields(self, direction=d, x=x, w=w, y=y, conv=conv)
        _validate(self)

    # -- forward-term sizes of the canonical convolution (what solvers use) -----------------

    @cached_property
    def canonical(self) -> ConvProblem:
        """This problem as an ordinary (``mode="conv"``) convolution.

        A transposed forward is a backward-data convolution with x and y swapped, and so on.
        """
        if self.conv.mode == "conv":
            return self
        conv = ConvolutionDescriptor(
            pads=self.conv.pads,
            strides=self.conv.strides,
            dilations=self.conv.dilations,
            groups=self.conv.groups,
        )
        return ConvProblem(
            _TRANSPOSED_DIRECTION[self.direction], x=self.y, w=self.w, y=self.x, conv=conv
        )

    @property
    def is_transposed(self) -> bool:
        """True for ``mode="transpose"`` problems."""
        return self.conv.mode == "transpose"

    @property
    def spatial_dims(self) -> int:
        """2 or 3."""
        return self.conv.spatial_dims

    @property
    def dtype(self) -> DataType:
        """The element type shared by x, w and y."""
        return self.x.dtype

    @property
    def groups(self) -> int:
        """Group count."""
        return self.conv.groups

    @property
    def n(self) -> int:
        """Batch size."""
        return self.canonical.x.n

    @property
    def c(self) -> int:
        """Input channels of the canonical convolution (all groups)."""
        return self.canonical.x.c

    @property
    def k(self) -> int:
        """Output channels of the canonical convolution (all groups)."""
        return self.canonical.y.c

    @property
    def in_spatial(self) -> tuple[int, ...]:
        """Spatial sizes of the canonical convolution's input."""
        return self.canonical.x.spatial

    @property
    def out_spatial(self) -> tuple[int, ...]:
        """Spatial sizes of the canonical convolution's output."""
        return self.canonical.y.spatial

    @property
    def filter_spatial(self) -> tuple[int, ...]:
        """Filter sizes, ``(Y, X)`` or ``(Z, Y, X)``."""
        return self.w.spatial

    @property
    def is_depthwise(self) -> bool:
        """One input and one output channel per group (``groups == C == K``)."""
        return self.groups > 1 and self.groups == self.c == self.k

    @property
    def flops(self) -> int:
        """Multiply-adds times two: the same count in every direction."""
        c_per_group = self.c // self.groups
        return (
            2
            * self.n
            * self.k
            * c_per_group
            * math.prod(self.out_spatial)
            * math.prod(self.filter_spatial)
        )

    @property
    def bytes_moved(self) -> int:
        """Bytes of x, w and y, each read or written once: the floor of memory traffic."""
        return sum(d.element_count * d.dtype.itemsize for d in (self.x, self.w, self.y))

    # -- identity --------------------------------------------------------------------------

    @cached_property
    def key(self) -> str:
        """MIOpen's FindDb key of this problem, byte-identical to what MIOpen writes.

        The key is direction-relative: for backward data and backward weights its "input" is
        dy. Transposed problems are keyed as their canonical form.
        """
        p = self.canonical
        if p.direction is Direction.FORWARD:
            src, dst = p.x, p.y
        else:
            src, dst = p.y, p.x
        fields = [
            str(src.c),
            *map(str, src.spatial),
            "x".join(map(str, p.w.spatial)),
            str(dst.c),
            *map(str, dst.spatial),
            str(p.x.n),
            "x".join(map(str, p.conv.pads)),
            "x".join(map(str, p.conv.strides)),
            "x".join(map(str, p.conv.dilations)),
            "0",
        ]
        layouts = (src.layout, p.w.layout, dst.layout)
        default = LAYOUTS[p.spatial_dims][0]
        fields.extend([default] if all(lay == default for lay in layouts) else layouts)
        fields.append(p.dtype.key_token)
        fields.append(p.direction.letter)
        key = "-".join(fields)
        if p.groups != 1:
            key += f"_g{p.groups}"
        return key

    @cached_property
    def network_config(self) -> str:
        """Everything an invoker may bake in: the key plus the element strides of all tensors.

        Two problems with the same network config can share a compiled invoker.
        """
        p = self.canonical
        strides = "|".join(
            f"{name}:{','.join(map(str, d.strides))}"
            for name, d in (("x", p.x), ("w", p.w), ("y", p.y))
        )
        return f"{p.key}|{strides}"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConvProblem):
            return NotImplemented
        return (self.direction, self.x, self.w, self.y, self.conv) == (
            other.direction,
            other.x,
            other.w,
            other.y,
            other.conv,
        )

    def __hash__(self) -> int:
        return hash((self.direction, self.x, self.w, self.y, self.conv))

    def __repr__(self) -> str:
        return f"ConvProblem({self.key!r}{', transposed' if self.is_transposed else ''})"

    # -- construction from sizes ------------------------------------------------------------

    @classmethod
    def from_sizes(
        cls,
        direction: Any,
        *,
        n: int,
        c: int,
        k: int,
        in_spatial: tuple[int, ...],
        filter_spatial: tuple[int, ...],
        pads: tuple[int, ...] | None = None,
        strides: tuple[int, ...] | None = None,
        dilations: tuple[int, ...] | None = None,
        groups: int = 1,
        dtype: Any = "float32",
        layout: str | None = None,
        out_spatial: tuple[int, ...] | None = None,
    ) -> ConvProblem:
        """Build an ordinary convolution problem from its sizes, as MIOpenDriver's flags give them.

        ``out_spatial`` is inferred when omitted; when given it is checked.
        """
        rank = len(in_spatial)
        conv = ConvolutionDescriptor(
            pads=pads or (0,) * rank, strides=strides, dilations=dilations, groups=groups
        )
        layout = layout or LAYOUTS.get(rank, ("NCHW",))[0]
        if c % groups:
            raise InvalidProblemError(
                f"input channels must be divisible by groups={groups}", field="c", value=c
            )
        x = TensorDescriptor(dtype, (n, c, *in_spatial), layout=layout)
        w = TensorDescriptor(dtype, (k, c // groups, *filter_spatial), layout=layout)
        if out_spatial is None:
            y = conv.output_descriptor(x, w)
        else:
            y = TensorDescriptor(dtype, (n, k, *out_spatial), layout=layout)
        return cls(direction, x=x, w=w, y=y, conv=conv)

    @classmethod
    def from_tensors(
        cls,
        x: Any,
        w: Any,
        *,
        direction: Any = "forward",
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        layout: str | None = None,
        y: Any = None,
    ) -> ConvProblem:
        """Build an ordinary convolution problem from arrays, as ``torch.nn.functional.conv2d``
        takes them: ``ConvProblem.from_tensors(x, w, padding=1)``.

        ``x`` and ``w`` are numpy arrays or torch tensors (CPU or GPU; anything with ``shape``,
        ``dtype`` and byte ``strides`` will do) in logical order, ``(N, C, [D,] H, W)`` and
        ``(K, C/groups, [Z,] Y, X)``; for the backward directions they are the buffers of those
        shapes (dx, dw). Shape, element type and layout are read off them: a channels-last
        tensor gives an NHWC problem (a tensor packed in both layouts, such as a 1x1 filter,
        follows the other one). ``stride``, ``padding`` and ``dilation`` are an int or one
        entry per spatial dimension. ``layout`` (NCHW, NHWC, NCDHW, NDHWC) requires every
        array to follow it. ``y`` (the output, or dy), when given, is checked against the
        problem and lends its layout; otherwise y is packed in the problem's layout.
        """
        x_desc, w_desc, y_desc, conv = descriptors_of_arrays(
            x, w, y, stride=stride, padding=padding, dilation=dilation, groups=groups, layout=layout
        )
        return cls(direction, x=x_desc, w=w_desc, y=y_desc, conv=conv)

    @classmethod
    def from_key(cls, key: str) -> ConvProblem:
        """Parse a MIOpen FindDb key back into a problem (packed tensors)."""
        match = _KEY_RE.match(key)
        if not match:
            raise InvalidProblemError("not a MIOpen convolution key", field="key", value=key)
        parts = match.group("body").split("-")
        groups = int(match.group("groups") or 1)
        letter = match.group("dir")
        try:
            filt = tuple(
                int(v) for v in parts[next(i for i, p in enumerate(parts) if "x" in p)].split("x")
            )
            rank = len(filt)
            pos = 0
            src_c = int(parts[pos])
            pos += 1
            src_sp = tuple(int(v) for v in parts[pos : pos + rank])
            pos += rank
            pos += 1  # filter
            dst_c = int(parts[pos])
            pos += 1
            dst_sp = tuple(int(v) for v in parts[pos : pos + rank])
            pos += rank
            n = int(parts[pos])
            pos += 1
            pads, strides, dils = (
                tuple(int(v) for v in parts[pos + i].split("x")) for i in range(3)
            )
            pos += 4  # pads, strides, dilations, bias
            rest = parts[pos:]
            dtype_token = rest[-1]
            layouts = rest[:-1]
        except (StopIteration, ValueError, IndexError):
            raise InvalidProblemError("malformed MIOpen key", field="key", value=key) from None
        if len(layouts) not in (1, 3):
            raise InvalidProblemError("malformed layout section", field="key", value=key)
        if len(layouts) == 1:
            layouts = layouts * 3
        dtype = next((d for d in DataType if d.key_token == dtype_token), None)
        if dtype is None:
            raise InvalidProblemError(
                f"unknown data type token {dtype_token!r}", field="key", value=key
            )
        direction = Direction.parse(letter)
        if direction is Direction.FORWARD:
            (c, x_sp, x_lay), (k, y_sp, y_lay) = (
                (src_c, src_sp, layouts[0]),
                (dst_c, dst_sp, layouts[2]),
            )
        else:
            (k, y_sp, y_lay), (c, x_sp, x_lay) = (
                (src_c, src_sp, layouts[0]),
                (dst_c, dst_sp, layouts[2]),
            )
        conv = ConvolutionDescriptor(pads=pads, strides=strides, dilations=dils, groups=groups)
        x = TensorDescriptor(dtype, (n, c, *x_sp), layout=x_lay)
        if c % groups:
            raise InvalidProblemError(
                f"{c} channels do not split into {groups} groups", field="key", value=key
            )
        w = TensorDescriptor(dtype, (k, c // groups, *filt), layout=layouts[1])
        y = TensorDescriptor(dtype, (n, k, *y_sp), layout=y_lay)
        return cls(direction, x=x, w=w, y=y, conv=conv)


_KEY_RE = re.compile(r"^(?P<body>.+)-(?P<dir>[FBW])(?:_g(?P<groups>\d+))?$")


def _validate(p: ConvProblem) -> None:
    conv = p.conv
    rank = conv.spatial_dims
    for name in ("x", "w", "y"):
        desc = getattr(p, name)
        if desc.spatial_dims != rank:
            raise InvalidProblemError(
                f"the convolution is {rank}-D but {name} has {len(desc.lengths)} lengths",
                field=f"{name}.lengths",
                value=desc.lengths,
            )
    dtypes = {p.x.dtype, p.w.dtype, p.y.dtype}
    if len(dtypes) != 1:
        raise InvalidProblemError(
            "x, w and y must share one data type",
            field="dtype",
            value=(p.x.dtype.value, p.w.dtype.value, p.y.dtype.value),
        )
    if p.x.n != p.y.n:
        raise InvalidProblemError(
            f"batch of x ({p.x.n}) and y ({p.y.n}) differ", field="y.lengths", value=p.y.lengths
        )
    g = conv.groups
    if conv.mode == "conv":
        src, dst = p.x, p.y
    else:
        src, dst = p.y, p.x  # the canonical convolution runs from the layer's output
    # Canonical convolution: src (C channels) -> dst (K channels); w is (K, C/g, ...).
    if src.c != p.w.c * g:
        raise InvalidProblemError(
            f"{'x' if conv.mode == 'conv' else 'y'} has {src.c} channels but w expects"
            f" {p.w.c} per group x {g} groups = {p.w.c * g}" + channel_hint(src, p.w.c * g),
            field="w.lengths",
            value=p.w.lengths,
        )
    if p.w.n % g:
        raise InvalidProblemError(
            f"w's first length {p.w.n} must be divisible by groups={g}",
            field="w.lengths",
            value=p.w.lengths,
        )
    if dst.c != p.w.n:
        raise InvalidProblemError(
            f"{'y' if conv.mode == 'conv' else 'x'} has {dst.c} channels but w produces {p.w.n}",
            field=f"{'y' if conv.mode == 'conv' else 'x'}.lengths",
            value=dst.lengths,
        )
    if conv.mode == "transpose":
        grown = conv.output_spatial(p.x.spatial, p.w.spatial)
        if grown != p.y.spatial:
            raise InvalidProblemError(
                f"a transposed convolution of x {p.x.spatial} with filter {p.w.spatial}, pads "
                f"{conv.pads}, strides {conv.strides}, dilations {conv.dilations} and output_pads "
                f"{conv.output_pads} gives y spatial size {grown}",
                field="y.lengths",
                value=p.y.lengths,
            )
    expected = []
    for i in range(rank):
        size, f = src.spatial[i], p.w.spatial[i]
        pad, s, d = conv.pads[i], conv.strides[i], conv.dilations[i]
        expected.append((size + 2 * pad - d * (f - 1) - 1) // s + 1)
    expected_t = tuple(expected)
    if min(expected_t) < 1 or expected_t != dst.spatial:
        raise InvalidProblemError(
            f"{'y' if conv.mode == 'conv' else 'x'}'s spatial size must be {expected_t} for "
            f"input {src.spatial}, filter {p.w.spatial}, pads {conv.pads}, strides "
            f"{conv.strides}, dilations {conv.dilations}",
            field=f"{'y' if conv.mode == 'conv' else 'x'}.lengths",
            value=dst.lengths,
        )
