"""MIOpenDriver's ``conv`` flags: declared once, turned into problems.

:data:`DRIVER_FLAGS` is the table of problem flags shared by ``conv``, ``convfp16``,
``convbfp16`` and ``solvers``; :func:`build_problems` turns their values into one
:class:`~miocore.ConvProblem` per direction selected by ``-F``.
"""

from __future__ import annotations

import argparse
import functools
import shlex
from dataclasses import dataclass
from typing import Any, NoReturn

from miocore.cli.run_flags import add_run_arguments
from miocore.errors import InvalidArgumentError
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.descriptors import LAYOUTS, ConvolutionDescriptor, TensorDescriptor
from miocore.problem.dtypes import DataType

#: ``miocore <command>`` -> element type, as MIOpenDriver's ``conv``, ``convfp16``, ``convbfp16``.
CONV_COMMANDS: dict[str, DataType] = {
    "conv": DataType.FLOAT32,
    "convfp16": DataType.FLOAT16,
    "convbfp16": DataType.BFLOAT16,
}

_DIRECTION_BITS: tuple[tuple[int, Direction], ...] = (
    (1, Direction.FORWARD),
    (2, Direction.BACKWARD_DATA),
    (4, Direction.BACKWARD_WEIGHTS),
)


@dataclass(frozen=True)
class DriverFlag:
    """One MIOpenDriver ``conv`` flag describing the problem: ``-c/--in_channels`` and so on."""

    short: str
    long: str
    default: int | str
    help: str
    minimum: int | None = None
    choices: tuple[Any, ...] | None = None

    @property
    def dest(self) -> str:
        """The attribute name argparse stores the value under (the long name)."""
        return self.long.lstrip("-")

    @property
    def label(self) -> str:
        """``-c/--in_channels``: how error messages name the flag."""
        return f"{self.short}/{self.long}"

    @property
    def kind(self) -> type:
        """``int`` or ``str``, from the default."""
        return type(self.default)


#: MIOpenDriver's problem flags with its defaults. Depth flags only matter with ``-_ 3``.
DRIVER_FLAGS: tuple[DriverFlag, ...] = (
    DriverFlag(
        "-_", "--spatial_dim", 2, "spatial dimensions: 2 (images) or 3 (volumes)", choices=(2, 3)
    ),
    DriverFlag("-n", "--batchsize", 100, "mini-batch size", minimum=1),
    DriverFlag("-c", "--in_channels", 3, "input channels", minimum=1),
    DriverFlag("-!", "--in_d", 32, "input depth (3-D)", minimum=1),
    DriverFlag("-H", "--in_h", 32, "input height", minimum=1),
    DriverFlag("-W", "--in_w", 32, "input width", minimum=1),
    DriverFlag("-k", "--out_channels", 32, "output channels", minimum=1),
    DriverFlag("-@", "--fil_d", 3, "filter depth (3-D)", minimum=1),
    DriverFlag("-y", "--fil_h", 3, "filter height", minimum=1),
    DriverFlag("-x", "--fil_w", 3, "filter width", minimum=1),
    DriverFlag("-$", "--pad_d", 0, "zero padding, depth (3-D)", minimum=0),
    DriverFlag("-p", "--pad_h", 0, "zero padding, height", minimum=0),
    DriverFlag("-q", "--pad_w", 0, "zero padding, width", minimum=0),
    DriverFlag("-#", "--conv_stride_d", 1, "stride, depth (3-D)", minimum=1),
    DriverFlag("-u", "--conv_stride_h", 1, "stride, height", minimum=1),
    DriverFlag("-v", "--conv_stride_w", 1, "stride, width", minimum=1),
    DriverFlag("-^", "--dilation_d", 1, "dilation, depth (3-D)", minimum=1),
    DriverFlag("-l", "--dilation_h", 1, "dilation, height", minimum=1),
    DriverFlag("-j", "--dilation_w", 1, "dilation, width", minimum=1),
    DriverFlag(
        "-%", "--trans_output_pad_d", 0, "transposed output padding, depth (3-D)", minimum=0
    ),
    DriverFlag("-Y", "--trans_output_pad_h", 0, "transposed output padding, height", minimum=0),
    DriverFlag("-X", "--trans_output_pad_w", 0, "transposed output padding, width", minimum=0),
    DriverFlag("-g", "--group_count", 1, "groups (C and K must be divisible by it)", minimum=1),
    DriverFlag(
        "-m",
        "--mode",
        "conv",
        "conv, or trans for a transposed convolution",
        choices=("conv", "trans"),
    ),
    DriverFlag(
        "-F",
        "--forw",
        0,
        "directions: 0 all, 1 forward, 2 backward data, 4 backward "
        "weights, or a sum (3 = forward + backward data, ...)",
        minimum=0,
    ),
    DriverFlag(
        "-I",
        "--in_layout",
        "",
        "input layout: NCHW, NHWC (2-D), NCDHW, NDHWC (3-D); default NCHW/NCDHW",
    ),
    DriverFlag("-O", "--out_layout", "", "output layout (default NCHW/NCDHW, as MIOpenDriver)"),
    DriverFlag("-f", "--fil_layout", "", "filter layout (default NCHW/NCDHW, as MIOpenDriver)"),
    DriverFlag(
        "-z",
        "--pad_mode",
        "default",
        "default (use -p/-q/-$), same (pad so the output is ceil(input/stride)) or valid "
        "(no padding)",
        choices=("default", "same", "valid"),
    ),
)
_FLAGS_BY_DEST = {f.dest: f for f in DRIVER_FLAGS}
#: The depth flags: ignored (never checked) in a 2-D problem, as MIOpenDriver does.
DEPTH_FLAGS = frozenset(
    ("in_d", "fil_d", "pad_d", "conv_stride_d", "dilation_d", "trans_output_pad_d")
)


def add_driver_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every :data:`DRIVER_FLAGS` flag to ``parser``.

    Defaults are not stored (``argparse.SUPPRESS``) so :func:`given_driver_flags` can tell
    which flags the user gave; :func:`driver_values` fills in MIOpenDriver's defaults.
    """
    group = parser.add_argument_group(
        "problem (MIOpenDriver conv flags)",
        "Sizes in forward terms; defaults are MIOpenDriver's.",
    )
    for flag in DRIVER_FLAGS:
        metavar = None if flag.choices else flag.dest.upper() if flag.kind is int else "LAYOUT"
        group.add_argument(
            flag.short,
            flag.long,
            dest=flag.dest,
            type=flag.kind,
            default=argparse.SUPPRESS,
            choices=flag.choices,
            metavar=metavar,
            help=_help_text(flag),
        )


def _help_text(flag: DriverFlag) -> str:
    text = flag.help if flag.default == "" else f"{flag.help} (default: {flag.default})"
    return text.replace("%", "%%")  # argparse %-formats help strings


def given_driver_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The problem flags the user gave explicitly, by destination name."""
    return {f.dest: getattr(args, f.dest) for f in DRIVER_FLAGS if hasattr(args, f.dest)}


def driver_values(args: argparse.Namespace) -> dict[str, Any]:
    """Every problem flag's value: the given ones, MIOpenDriver's defaults for the rest."""
    return {f.dest: getattr(args, f.dest, f.default) for f in DRIVER_FLAGS}


def parse_directions(value: int) -> list[Direction]:
    """MIOpenDriver's ``-F``: 0 all, 1 forward, 2 backward data, 4 backward weights, or a sum."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 7:
        raise InvalidArgumentError(
            "expected 0 (all), 1 (forward), 2 (backward data), 4 (backward weights) or a sum "
            "of them (3, 5, 6, 7)",
            field=_FLAGS_BY_DEST["forw"].label,
            value=value,
        )
    if value == 0:
        value = 7
    return [d for bit, d in _DIRECTION_BITS if value & bit]


def _bad(dest: str, value: Any, message: str) -> InvalidArgumentError:
    return InvalidArgumentError(message, field=_FLAGS_BY_DEST[dest].label, value=value)


def _layout(values: dict[str, Any], dest: str, fallback: str, rank: int) -> str:
    raw = str(values[dest] or fallback).strip().upper()
    # MIOpenDriver users often keep NCHW/NHWC for 3-D problems: take them as NCDHW/NDHWC.
    if rank == 3:
        raw = {"NCHW": "NCDHW", "NHWC": "NDHWC"}.get(raw, raw)
    if raw not in LAYOUTS[rank]:
        choices = ", ".join(LAYOUTS[rank])
        raise _bad(dest, values[dest], f"a {rank}-D problem takes one of {choices}")
    return raw


def check_driver_values(values: dict[str, Any]) -> None:
    """Reject flag values MIOpenDriver would reject, naming the flag (``-c/--in_channels=3``)."""
    rank = values["spatial_dim"]
    for flag in DRIVER_FLAGS:
        value = values[flag.dest]
        if rank == 2 and flag.dest in DEPTH_FLAGS:
            continue  # MIOpenDriver ignores the depth fields of a 2-D problem (its logs print 0)
        if flag.minimum is not None and value < flag.minimum:
            raise _bad(flag.dest, value, f"must be >= {flag.minimum}")
    groups = values["group_count"]
    g_label = _FLAGS_BY_DEST["group_count"].label
    for dest in ("in_channels", "out_channels"):
        if values[dest] % groups:
            raise _bad(dest, values[dest], f"must be divisible by {g_label}={groups}")
    parse_directions(values["forw"])
    if values["mode"] == "conv":
        for dest in ("trans_output_pad_h", "trans_output_pad_w", "trans_output_pad_d"):
            if values[dest] and (dest != "trans_output_pad_d" or values["spatial_dim"] == 3):
                raise _bad(dest, values[dest], "only a transposed convolution (-m trans) takes it")


def build_problems(values: dict[str, Any], dtype: DataType | str) -> list[ConvProblem]:
    """The problems the flags describe, one per direction selected by ``-F``.

    ``-m trans`` gives a transposed convolution: x is (N, C, ...), w is (C, K/groups, ...)
    as MIOpenDriver and PyTorch's ``conv_transpose`` have it, and y is grown by the stride.
    """
    check_driver_values(values)
    rank = values["spatial_dim"]

    def spatial(prefix: str) -> tuple[int, ...]:
        hw = (values[f"{prefix}h"], values[f"{prefix}w"])
        return (values[f"{prefix}d"], *hw) if rank == 3 else hw

    transposed = values["mode"] == "trans"
    n, c, k, g = (values[d] for d in ("batchsize", "in_channels", "out_channels", "group_count"))
    in_layout = _layout(values, "in_layout", LAYOUTS[rank][0], rank)
    # MIOpenDriver defaults -O and -f to NCHW whatever -I says: -I NHWC alone is NHWC-NCHW-NCHW.
    out_layout = _layout(values, "out_layout", LAYOUTS[rank][0], rank)
    fil_layout = _layout(values, "fil_layout", LAYOUTS[rank][0], rank)
    filt = spatial("fil_")
    conv = ConvolutionDescriptor(
        pads=_pads(values, spatial("in_"), filt, spatial("conv_stride_"), spatial("dilation_")),
        strides=spatial("conv_stride_"),
        dilations=spatial("dilation_"),
        groups=g,
        mode="transpose" if transposed else "conv",
        output_pads=spatial("trans_output_pad_") if transposed else None,
    )
    x = TensorDescriptor(dtype, (n, c, *spatial("in_")), layout=in_layout)
    w_lengths = (c, k // g, *filt) if transposed else (k, c // g, *filt)
    w = TensorDescriptor(dtype, w_lengths, layout=fil_layout)
    out_spatial = conv.output_spatial(x.spatial, filt)
    if min(out_spatial) < 1:
        raise _empty_output(values, conv, x.spatial, filt, out_spatial)
    y = conv.output_descriptor(x, w, layout=out_layout)
    return [ConvProblem(d, x=x, w=w, y=y, conv=conv) for d in parse_directions(values["forw"])]


def _pads(
    values: dict[str, Any],
    in_spatial: tuple[int, ...],
    filt: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
) -> tuple[int, ...]:
    """The pads ``-z/--pad_mode`` asks for: the given ones, ``same`` or ``valid`` (none)."""
    prefix = ("pad_d", "pad_h", "pad_w")[3 - len(in_spatial) :]
    mode = values["pad_mode"]
    if mode == "valid":
        return (0,) * len(in_spatial)
    if mode == "same":
        # An output of ceil(input / stride), as MIOpen's same mode. Pads are symmetric here,
        # so where the total is odd take the half (down or up) that keeps that output length.
        pads = []
        for size, f, s, d in zip(in_spatial, filt, strides, dilations, strict=True):
            out, span = -(-size // s), d * (f - 1) + 1
            total = max(0, (out - 1) * s + span - size)
            low, high = total // 2, -(-total // 2)
            pads.append(high if (size + 2 * high - span) // s + 1 == out else low)
        return tuple(pads)
    return tuple(values[dest] for dest in prefix)


def _empty_output(
    values: dict[str, Any],
    conv: ConvolutionDescriptor,
    in_spatial: tuple[int, ...],
    filt: tuple[int, ...],
    out_spatial: tuple[int, ...],
) -> InvalidArgumentError:
    """The error for a problem whose output would be empty, naming what makes it so."""
    if conv.mode == "conv":
        return InvalidArgumentError(
            f"the output would have spatial size {out_spatial}: the (dilated) filter "
            f"{tuple(filt)} is larger than the padded input {tuple(in_spatial)} (pads "
            f"{conv.pads})",
            field="-y/--fil_h, -x/--fil_w",
            value=tuple(filt),
        )
    # A transposed output is (in - 1) * stride - 2 * pad + dilation * (fil - 1) + 1 + out_pad:
    # here the padding trims more than the grown input has.
    return InvalidArgumentError(
        f"the transposed convolution's output would have spatial size {out_spatial}: "
        f"(input - 1) * stride - 2 * pad + dilation * (filter - 1) + 1 + output_pad is below "
        f"1; pads {conv.pads} trim more than input {tuple(in_spatial)} grown by strides "
        f"{conv.strides} and filter {tuple(filt)} give",
        field="-p/--pad_h, -q/--pad_w",
        value=conv.pads,
    )


def describe_problem(problem: ConvProblem) -> str:
    """One line with the tensors and the convolution, as MIOpenDriver's ``printconv`` does."""
    conv = problem.conv

    def t(name: str) -> str:
        d = getattr(problem, name)
        return f"{name} {'x'.join(map(str, d.lengths))} {d.layout}"

    mode = "transposed" if problem.is_transposed else "conv"
    return (
        f"{t('x')}, {t('w')}, {t('y')}, {problem.dtype.value}; pads {conv.pads}, strides "
        f"{conv.strides}, dilations {conv.dilations}, groups {conv.groups}, {mode}"
    )


def split_driver_line(line: str) -> tuple[str, list[str]]:
    """The command and flags of one MIOpenDriver line.

    Accepts ``./bin/MIOpenDriver convfp16 --batchsize 2 ...``, ``miocore conv -n 2 ...``,
    ``conv -n 2 ...`` or bare flags (then ``conv``). ``#`` starts a comment.
    """
    try:
        # shlex is slow; MIOpen's lines have no quotes, so a plain split does for most.
        plain = not any(ch in line for ch in "'\"\\")
        tokens = line.split("#", 1)[0].split() if plain else shlex.split(line, comments=True)
    except ValueError as exc:
        raise InvalidArgumentError(
            f"cannot split the line: {exc}", field="line", value=line
        ) from exc
    if tokens and not tokens[0].startswith("-") and tokens[0] not in CONV_COMMANDS:
        program = tokens.pop(0)
        if not program.endswith(("MIOpenDriver", "miocore")):
            raise InvalidArgumentError(
                "expected 'MIOpenDriver <command> flags...', '<command> flags...' or flags",
                field="line",
                value=line,
            )
    command = "conv"
    if tokens and not tokens[0].startswith("-"):
        command = tokens.pop(0)
        if command not in CONV_COMMANDS:
            raise InvalidArgumentError(
                f"miocore runs {', '.join(CONV_COMMANDS)} (MIOpenDriver's other commands, such "
                "as convint8 or pool, have no miocore meaning)",
                field="command",
                value=command,
            )
    return command, tokens


class _RaisingParser(argparse.ArgumentParser):
    """An argument parser whose errors raise :class:`InvalidArgumentError` (no exit)."""

    def error(self, message: str) -> NoReturn:
        raise InvalidArgumentError(message, field="flags", value=" ".join(self._seen))

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        self._seen = list(args or [])
        return super().parse_args(args, namespace)


@functools.cache
def _line_parser() -> _RaisingParser:
    parser = _RaisingParser(prog="MIOpenDriver conv", add_help=False, allow_abbrev=False)
    add_driver_arguments(parser)
    add_run_arguments(parser)
    return parser


def parse_driver_line(line: str) -> tuple[str, argparse.Namespace]:
    """The command and every flag of one MIOpenDriver line (problem and run flags)."""
    command, flags = split_driver_line(line)
    return command, _line_parser().parse_args(flags)


def problems_from_line(line: str) -> list[ConvProblem]:
    """The problems of one MIOpenDriver line, one per direction selected by ``-F``.

    Every flag MIOpenDriver's ``conv`` takes is accepted; a bad value raises
    :class:`~miocore.InvalidArgumentError` naming the flag.
    """
    command, args = parse_driver_line(line)
    return build_problems(driver_values(args), CONV_COMMANDS[command])
