"""The ``miocore`` command line: ``conv`` (MIOpenDriver-compatible), ``solvers``, ``plugins``
and ``db``.

``miocore conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1 -t 1 -V 1`` finds the
fastest solution of each selected direction, prints it, optionally times it and verifies it
against the float64 reference. ``miocore solvers`` lists the installed solvers and, given the
same problem flags, says which apply and why the others do not. ``miocore db`` maintains the
databases (see :mod:`miocore.cli.db`). ``miocore plugins`` lists each plugin with its
distribution, version, status and solvers. The problem flags are declared once, in
:data:`DRIVER_FLAGS`, and shared by ``conv``, ``convfp16``, ``convbfp16`` and ``solvers``.

Exit status: 0 success, 1 verification (or a solver run) failed, 2 bad input or nothing can
solve the problem.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from miocore.errors import (
    InvalidArgumentError,
    MiocoreError,
    NoApplicableSolverError,
    NotApplicableError,
    SolverFailedError,
)
from miocore.problem.conv import ConvProblem, Direction
from miocore.problem.descriptors import LAYOUTS, ConvolutionDescriptor, TensorDescriptor
from miocore.problem.dtypes import DataType

PROG = "miocore"

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
_DIRECTION_TITLES = {
    Direction.FORWARD: "Forward Convolution",
    Direction.BACKWARD_DATA: "Backward Data Convolution",
    Direction.BACKWARD_WEIGHTS: "Backward Weights Convolution",
}


# -- the driver flags: declared once, shared by conv* and solvers ---------------------------------


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
    DriverFlag("-O", "--out_layout", "", "output layout (default: the input layout)"),
    DriverFlag("-f", "--fil_layout", "", "filter layout (default: the input layout)"),
)
_FLAGS_BY_DEST = {f.dest: f for f in DRIVER_FLAGS}


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
    for flag in DRIVER_FLAGS:
        value = values[flag.dest]
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
    out_layout = _layout(values, "out_layout", in_layout, rank)
    fil_layout = _layout(values, "fil_layout", in_layout, rank)
    conv = ConvolutionDescriptor(
        pads=spatial("pad_"),
        strides=spatial("conv_stride_"),
        dilations=spatial("dilation_"),
        groups=g,
        mode="transpose" if transposed else "conv",
        output_pads=spatial("trans_output_pad_") if transposed else None,
    )
    filt = spatial("fil_")
    x = TensorDescriptor(dtype, (n, c, *spatial("in_")), layout=in_layout)
    w_lengths = (c, k // g, *filt) if transposed else (k, c // g, *filt)
    w = TensorDescriptor(dtype, w_lengths, layout=fil_layout)
    out_spatial = conv.output_spatial(x.spatial, filt)
    if min(out_spatial) < 1:
        raise InvalidArgumentError(
            f"the output would have spatial size {out_spatial}: the (dilated) filter "
            f"{tuple(filt)} is larger than the padded input {x.spatial}",
            field="-y/--fil_h, -x/--fil_w",
            value=tuple(filt),
        )
    y = conv.output_descriptor(x, w, layout=out_layout)
    return [ConvProblem(d, x=x, w=w, y=y, conv=conv) for d in parse_directions(values["forw"])]


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


# -- output helpers --------------------------------------------------------------------------------


def _stdout_console() -> Any:
    from rich.console import Console

    # Wide when piped, so tables are not squeezed into 80 columns.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def _fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit} ({n} B)"


def _fmt_ms(ms: float) -> str:
    return f"{ms:.4f} ms" if math.isfinite(ms) else "unknown"


def _fmt_gflops(g: float) -> str:
    return f"{g:.2f} GFLOP/s" if math.isfinite(g) else "n/a GFLOP/s"


# -- conv ------------------------------------------------------------------------------------------


@dataclass
class DirectionResult:
    """What ``miocore conv`` found, timed and verified for one direction."""

    problem: ConvProblem
    solution: Any
    ranking: list[Any] = field(default_factory=list)
    report_lines: list[str] = field(default_factory=list)
    timing: Any = None
    error: float | None = None
    tolerance: float | None = None

    @property
    def verified(self) -> bool | None:
        """None when not verified, else whether the error is within tolerance."""
        if self.error is None or self.tolerance is None:
            return None
        return math.isfinite(self.error) and self.error <= self.tolerance

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        s = self.solution
        out: dict[str, Any] = {
            "direction": self.problem.direction.value,
            "transposed": self.problem.is_transposed,
            "key": self.problem.key,
            "solver": s.solver,
            "solver_id": s.solver_id,
            "algorithm": s.algorithm.value,
            "time_ms": s.time_ms if math.isfinite(s.time_ms) else None,
            "gflops": s.gflops if math.isfinite(s.gflops) else None,
            "workspace_size": s.workspace_size,
            "source": s.source,
            "is_estimate": s.is_estimate,
        }
        if self.timing is not None:
            out["timed"] = {
                "median_ms": self.timing.median_ms,
                "min_ms": self.timing.min_ms,
                "max_ms": self.timing.max_ms,
                "spread_ms": self.timing.spread_ms,
                "iterations": self.timing.count,
                "gflops": self.problem.flops / (self.timing.median_ms * 1e6)
                if self.timing.median_ms > 0
                else None,
            }
        if self.verified is not None:
            out["verify"] = {
                "ok": self.verified,
                "relative_error": self.error,
                "tolerance": self.tolerance,
            }
        return out


def _no_solver_error(registry: Any) -> MiocoreError:
    failed = [p for p in registry.plugins if p.status != "active"]
    extra = ""
    if failed:
        extra = (
            " Plugins that did not load: "
            + "; ".join(f"{p.label} {p.status}: {p.error}" for p in failed)
            + "."
        )
    return MiocoreError(
        "no solver plugin is installed, so nothing can solve a convolution. Install one "
        "(for example `pip install miocore-gemm`) or check MIOCORE_DISABLE_PLUGINS; "
        "`miocore solvers` lists what is installed." + extra
    )


def _find(handle: Any, problem: ConvProblem, args: argparse.Namespace, title: str) -> Any:
    kwargs: dict[str, Any] = {
        "exhaustive": bool(args.search),
        "find_mode": args.find_mode,
        "workspace_limit": args.workspace_limit,
    }
    console = _stderr_console()
    if args.quiet or not console.is_terminal:
        return handle.find_solutions(problem, **kwargs)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(f"find {title}", total=None)

        def update(done: int, total: int, solver: str) -> None:
            label = f"find {title}: {solver}" if solver else f"find {title}"
            progress.update(task, total=total, completed=done, description=label)

        return handle.find_solutions(problem, progress=update, **kwargs)


def _verify_tolerance(handle: Any, problem: ConvProblem, solution: Any) -> float:
    """The data type's tolerance, or the solver's own expected error when that is larger."""
    from miocore import reference

    tolerance = reference.tolerance(problem.dtype)
    try:
        solver = handle.registry.get(solution.solver).solver
        own = solver.expected_error(handle.context, problem.canonical, solution.perf_config)
    except Exception:  # a broken accuracy estimate must not hide the verification
        own = None
    return max(tolerance, float(own)) if own is not None else tolerance


def _solve_direction(
    handle: Any, problem: ConvProblem, args: argparse.Namespace, out: Callable[[str], None]
) -> DirectionResult:
    from miocore import reference
    from miocore.solver.results import Timing

    title = ("Transposed " if problem.is_transposed else "") + _DIRECTION_TITLES[problem.direction]
    if args.solution is not None:
        # Immediate mode: the named solver, no find.
        solution = handle.compile_solution(problem, args.solution)
        ranking: list[Any] = [solution]

        def run(arrays: dict[str, Any]) -> None:
            handle.immediate(problem, solution.solver, **arrays)
    else:
        found = _find(handle, problem, args, title)
        solution = found[0]
        ranking = list(found)

        def run(arrays: dict[str, Any]) -> None:
            handle.run_solution(solution, **arrays)

    report = handle.last_report
    result = DirectionResult(
        problem=problem,
        solution=solution,
        ranking=ranking,
        report_lines=report.lines() if report is not None else [],
    )
    out(f"{title}: {problem.key}")
    how = "immediate mode, -S" if args.solution is not None else "find"
    algorithm = solution.algorithm.value
    out(f"  solver:    {solution.solver} (id {solution.solver_id}, {algorithm}; {how})")
    kind = "estimate" if solution.is_estimate else "measured"
    stats = ""
    if solution.timing is not None:
        t = solution.timing
        stats = f", median of {t.count} runs, spread {t.spread_ms:.4g} ms"
    out(f"  time:      {_fmt_ms(solution.time_ms)} ({kind}{stats})")
    out(f"  GFLOP/s:   {_fmt_gflops(solution.gflops).removesuffix(' GFLOP/s')}")
    out(f"  workspace: {_fmt_bytes(solution.workspace_size)}")
    out(f"  source:    {solution.source}" + (f" ({solution.note})" if solution.note else ""))
    if args.explain:
        out("  ranking:")
        for i, s in enumerate(ranking, 1):
            out(f"    {i}. {s.explain()}")
        for line in result.report_lines:
            out(f"  report: {line}")

    if not (args.time or args.verify):
        return result
    host_arrays = reference.random_inputs(problem, args.seed)
    out_name = problem.direction.output_tensor
    inputs = {name: a for name, a in host_arrays.items() if name != out_name}
    arrays = host_arrays
    if handle.backend.name != "cpu":  # device copies; the output comes back for verification
        arrays = {
            name: handle.backend.from_host(getattr(problem, name), a)
            for name, a in host_arrays.items()
        }
    try:
        run(arrays)  # first run: warms caches; its output is checked below
        if args.time:
            samples = [handle.backend.time_ms(lambda: run(arrays)) for _ in range(args.iter)]
            result.timing = Timing.from_samples(samples)
    except SolverFailedError as exc:  # the solver's own bug, named with its plugin
        raise SolverRunError(str(exc)) from exc
    except MiocoreError:
        raise
    except Exception as exc:
        raise SolverRunError(
            f"solver {solution.solver} failed while running: {type(exc).__name__}: {exc}"
        ) from exc
    if result.timing is not None:
        t = result.timing
        gflops = problem.flops / (t.median_ms * 1e6) if t.median_ms > 0 else float("nan")
        out(
            f"  timed:     median {_fmt_ms(t.median_ms)} over {t.count} iterations (min "
            f"{t.min_ms:.4f} ms, max {t.max_ms:.4f} ms), {_fmt_gflops(gflops)}"
        )
    if args.verify:
        expected = reference.convolution(problem, **inputs)
        got = arrays[out_name]
        if handle.backend.name != "cpu":
            got = handle.backend.to_host(got)
        result.error = reference.relative_error(got, expected)
        result.tolerance = _verify_tolerance(handle, problem, solution)
        if result.verified:
            out(
                f"{title} Verifies OK on CPU reference (relative error {result.error:.3g} <= "
                f"tolerance {result.tolerance:.3g})"
            )
        else:
            out(
                f"{title} FAILED verification on CPU reference (relative error "
                f"{result.error:.3g} > tolerance {result.tolerance:.3g})"
            )
    return result


class SolverRunError(MiocoreError):
    """The chosen solver raised while it ran (exit status 1, not a bad-input 2)."""


def run_conv(args: argparse.Namespace, registry: Any = None) -> int:
    """``miocore conv|convfp16|convbfp16``: find, print, time and verify each direction."""
    from miocore.env import FindMode
    from miocore.find.handle import Handle

    dtype = CONV_COMMANDS[args.command]
    if args.iter < 1:
        raise InvalidArgumentError("must be >= 1", field="-i/--iter", value=args.iter)
    if args.find_mode is not None:
        args.find_mode = FindMode.parse(args.find_mode, "--find-mode")
    if args.workspace_limit is not None and args.workspace_limit < 0:
        raise InvalidArgumentError(
            "must be >= 0 bytes", field="--workspace-limit", value=args.workspace_limit
        )
    if args.solution in ("-1", ""):
        args.solution = None  # MIOpenDriver's "no solver chosen"
    problems = build_problems(driver_values(args), dtype)
    handle = Handle(args.device, registry=registry, user_db_path=args.user_db_path)
    if not len(handle.registry):
        raise _no_solver_error(handle.registry)

    lines: list[str] = []

    def out(line: str) -> None:
        if args.json:
            lines.append(line)
        else:
            print(line, flush=True)

    out(f"{PROG} {args.command}: {describe_problem(problems[0])}; device {handle.device.identity}")
    results: list[DirectionResult] = []
    status = 0
    for problem in problems:
        try:
            result = _solve_direction(handle, problem, args, out)
        except SolverRunError as exc:
            print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
            status = max(status, 1)
            continue
        except (NoApplicableSolverError, NotApplicableError) as exc:
            # This direction cannot be solved; the others may still be.
            print(f"{PROG} {args.command}: error: {exc}", file=sys.stderr)
            status = 2
            continue
        results.append(result)
        if result.verified is False:
            status = max(status, 1)
    if args.json:
        print(
            json.dumps(
                {
                    "command": args.command,
                    "device": handle.device.identity,
                    "problem": describe_problem(problems[0]),
                    "results": [r.to_json() for r in results],
                    "ok": status == 0,
                },
                indent=2,
            )
        )
    return status


# -- solvers ---------------------------------------------------------------------------------------


def _solver_rows(registry: Any) -> list[dict[str, Any]]:
    from miocore.solver.interface import TunableSolver

    return [
        {
            "name": r.name,
            "id": r.id,
            "algorithm": r.algorithm.value,
            "dynamic": bool(getattr(r.solver, "is_dynamic", False)),
            "tunable": isinstance(r.solver, TunableSolver),
            "backends": sorted(getattr(r.solver, "backends", ())),
            "plugin": r.plugin,
            "distribution": r.distribution,
            "version": r.version,
        }
        for r in registry.solvers
    ]


def _applicability_rows(handle: Any, problem: ConvProblem) -> list[dict[str, Any]]:
    from miocore import env
    from miocore.solver.interface import normalize_applicability

    rows = []
    only = env.only_solver()
    for reg in handle.registry.solvers:
        row: dict[str, Any] = {
            "solver": reg.name,
            "algorithm": reg.algorithm.value,
            "applicable": False,
            "workspace_size": None,
            "reason": "",
        }
        rows.append(row)
        if handle.backend.name not in reg.solver.backends:
            row["reason"] = (
                f"runs on {', '.join(sorted(reg.solver.backends))}, not {handle.backend.name}"
            )
            continue
        try:
            answer = normalize_applicability(
                reg.solver.is_applicable(handle.context, problem.canonical)
            )
        except Exception as exc:  # a broken solver is reported, never fatal
            row["reason"] = f"is_applicable raised {type(exc).__name__}: {exc}"
            continue
        if not answer.ok:
            row["reason"] = answer.reason or "not applicable"
            continue
        row["applicable"] = True
        try:
            row["workspace_size"] = handle.get_solution_workspace_size(problem, reg.name)
        except Exception as exc:
            row["reason"] = f"workspace_size raised {type(exc).__name__}: {exc}"
        notes = []
        if not env.algorithm_enabled(reg.algorithm.value):
            notes.append(f"find skips it: MIOCORE_DEBUG_CONV_{reg.algorithm.value.upper()}=0")
        if only is not None and only not in (reg.name, str(reg.id)):
            notes.append("find skips it: MIOCORE_FIND_ONLY_SOLVER")
        if notes:
            row["reason"] = "; ".join([row["reason"], *notes] if row["reason"] else notes)
    return rows


def run_solvers(args: argparse.Namespace, registry: Any = None) -> int:
    """``miocore solvers``: what is installed; with problem flags, what applies and why not."""
    from rich.table import Table

    from miocore.find.handle import Handle
    from miocore.solver.registry import default_registry

    problems: list[ConvProblem] = []
    if given_driver_flags(args):
        problems = build_problems(driver_values(args), args.dtype or DataType.FLOAT32)
    reg = registry if registry is not None else default_registry()
    handle = Handle(args.device, registry=reg) if problems else None
    solvers = _solver_rows(reg)
    failures = [
        {
            "plugin": p.name,
            "distribution": p.distribution,
            "version": p.version,
            "status": p.status,
            "error": p.error or "",
        }
        for p in reg.plugins
        if p.status != "active"
    ]
    applicability = [
        {"direction": p.direction.value, "key": p.key, "solvers": _applicability_rows(handle, p)}
        for p in problems
    ]
    if args.json:
        print(
            json.dumps(
                {"solvers": solvers, "plugin_failures": failures, "problems": applicability},
                indent=2,
            )
        )
        return 0

    console = _stdout_console()
    if solvers:
        table = Table(title=f"Installed solvers ({len(solvers)})")
        for col in (
            "name",
            "id",
            "algorithm",
            "dynamic",
            "tunable",
            "backends",
            "plugin",
            "distribution",
            "version",
        ):
            table.add_column(col, justify="right" if col == "id" else "left")
        for row in solvers:
            table.add_row(
                row["name"],
                str(row["id"]),
                row["algorithm"],
                "yes" if row["dynamic"] else "no",
                "yes" if row["tunable"] else "no",
                ",".join(row["backends"]),
                row["plugin"],
                row["distribution"],
                row["version"],
            )
        console.print(table)
    else:
        console.print(
            "No solver plugin is installed: find has nothing to choose from. Install "
            "one (for example `pip install miocore-gemm`) or check "
            "MIOCORE_DISABLE_PLUGINS."
        )
    if failures:
        table = Table(title="Plugins not loaded")
        for col in ("plugin", "distribution", "version", "status", "error"):
            table.add_column(col)
        for row in failures:
            table.add_row(
                row["plugin"], row["distribution"], row["version"], row["status"], row["error"]
            )
        console.print(table)
    if problems:
        console.print(describe_problem(problems[0]), soft_wrap=True)
    for entry in applicability:
        rows = entry["solvers"]
        applies = sum(r["applicable"] for r in rows)
        console.print(
            f"{entry['direction']} {entry['key']}: {applies} of {len(rows)} solvers apply",
            soft_wrap=True,
        )
        table = Table()
        for col in ("solver", "algorithm", "applicable", "workspace", "reason"):
            table.add_column(col)
        for row in rows:
            ws = row["workspace_size"]
            table.add_row(
                row["solver"],
                row["algorithm"],
                "yes" if row["applicable"] else "no",
                _fmt_bytes(ws) if ws is not None else "",
                row["reason"],
            )
        console.print(table)
    return 0


# -- plugins ---------------------------------------------------------------------------------------


def _plugin_rows(registry: Any) -> list[dict[str, Any]]:
    return [
        {
            "plugin": p.name,
            "distribution": p.distribution,
            "version": p.version,
            "status": p.status,
            "error": p.error or "",
            "solvers": list(p.solvers),
        }
        for p in sorted(registry.plugins, key=lambda p: (p.name, p.distribution))
    ]


def run_plugins(args: argparse.Namespace, registry: Any = None) -> int:
    """``miocore plugins``: each plugin's distribution, version, status and solvers.

    Status is ``active``, ``disabled`` (with what disabled it) or ``failed`` (with why). Exit
    status 0 even when a plugin failed: the listing is the answer; ``--check`` makes a failed
    plugin exit 1, for deployment scripts.
    """
    from rich.table import Table

    from miocore.solver.registry import default_registry

    reg = registry if registry is not None else default_registry()
    rows = _plugin_rows(reg)
    failed = any(r["status"] == "failed" for r in rows)
    status = 1 if args.check and failed else 0
    if args.json:
        print(json.dumps({"plugins": rows}, indent=2))
        return status
    console = _stdout_console()
    if not rows:
        console.print(
            "No miocore plugin is installed (entry point group 'miocore'). Install one, for "
            "example `pip install miocore-gemm`."
        )
        return status
    table = Table(title=f"Plugins ({len(rows)})")
    for col in ("plugin", "distribution", "version", "status", "solvers", "details"):
        table.add_column(col)
    styles = {"active": "green", "disabled": "yellow", "failed": "red"}
    for row in rows:
        table.add_row(
            row["plugin"],
            row["distribution"],
            row["version"],
            f"[{styles.get(row['status'], '')}]{row['status']}[/]",
            ", ".join(row["solvers"]),
            row["error"],
        )
    console.print(table)
    if failed:
        console.print(
            "A failed plugin is skipped; the others work. Disable it with "
            "MIOCORE_DISABLE_PLUGINS=<plugin or distribution> (or all) until it is fixed."
        )
    return status


# -- the parser and main ---------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The full ``miocore`` argument parser (``conv*``, ``solvers`` and, when present, ``db``)."""
    from miocore import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Find and run the fastest convolution algorithm for a problem "
        "(MIOpenDriver-compatible conv flags).",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name, dtype in CONV_COMMANDS.items():
        conv = sub.add_parser(
            name,
            help=f"find, run, time and verify a {dtype.value} convolution (MIOpenDriver {name})",
            description=f"Find the fastest solution of a {dtype.value} convolution for each "
            "direction chosen by -F, print it, time it (-t 1) and verify it against the float64 "
            "reference (-V 1). Exit status: 0 ok, 1 verification failed, 2 bad input.",
            allow_abbrev=False,
        )
        add_driver_arguments(conv)
        run = conv.add_argument_group("running")
        run.add_argument(
            "-t",
            "--time",
            type=int,
            choices=(0, 1),
            default=0,
            help="time -i iterations of the chosen solution (default: 0)",
        )
        run.add_argument(
            "-V",
            "--verify",
            type=int,
            choices=(0, 1),
            default=1,
            help="verify against the float64 reference (default: 1)",
        )
        run.add_argument(
            "-i", "--iter", type=int, default=10, help="iterations timed with -t 1 (default: 10)"
        )
        run.add_argument(
            "-s",
            "--search",
            type=int,
            choices=(0, 1),
            default=0,
            help="1: exhaustive search (tune tunable solvers) (default: 0)",
        )
        run.add_argument(
            "-S",
            "--solution",
            default=None,
            metavar="SOLVER",
            help="run this solver (name or id) in immediate mode instead of find; "
            "-1: none (default)",
        )
        run.add_argument(
            "--device", default="cpu", help="cpu, cuda, cuda:N, hip, hip:N (default: cpu)"
        )
        run.add_argument(
            "--find-mode",
            default=None,
            metavar="MODE",
            help="NORMAL, FAST, HYBRID, DYNAMIC_HYBRID or 1/2/3/5 (default: "
            "$MIOCORE_FIND_MODE, else DYNAMIC_HYBRID)",
        )
        run.add_argument(
            "--workspace-limit",
            type=int,
            default=None,
            metavar="BYTES",
            help="consider only solutions needing at most this much workspace",
        )
        run.add_argument(
            "--user-db-path",
            default=None,
            metavar="DIR",
            help="user database folder (default: $MIOCORE_USER_DB_PATH)",
        )
        run.add_argument(
            "--seed",
            type=int,
            default=0,
            help="random seed of the data used for timing and verification",
        )
        run.add_argument(
            "--explain",
            action="store_true",
            help="also print every solution found and the find report",
        )
        run.add_argument("--json", action="store_true", help="print one JSON document")
        run.add_argument("--quiet", action="store_true", help="no progress display")
        conv.set_defaults(handler=run_conv)

    solvers = sub.add_parser(
        "solvers",
        help="list installed solvers; with problem flags, which apply and why not",
        description="List the installed solvers and the plugins that failed to load. Given "
        "problem flags (as for conv), say for each direction which solvers apply, their "
        "workspace, and why the others do not.",
        allow_abbrev=False,
    )
    add_driver_arguments(solvers)
    solvers.add_argument(
        "--dtype",
        default=None,
        type=lambda v: DataType.parse(v, "--dtype"),
        help="element type of the problem: float32 (default), float16, bfloat16",
    )
    solvers.add_argument("--device", default="cpu", help="device to check against (default: cpu)")
    solvers.add_argument("--json", action="store_true", help="print JSON instead of tables")
    solvers.set_defaults(handler=run_solvers)

    plugins = sub.add_parser(
        "plugins",
        help="list installed plugins: distribution, version, status and solvers",
        description="List every plugin of the 'miocore' entry point group with its "
        "distribution, version, status (active, disabled, failed and why) and the solvers "
        "it provides.",
        allow_abbrev=False,
    )
    plugins.add_argument("--json", action="store_true", help="print JSON instead of a table")
    plugins.add_argument("--check", action="store_true", help="exit 1 when a plugin failed to load")
    plugins.set_defaults(handler=run_plugins)

    try:
        from miocore.cli.db import add_db_parser
    except ImportError:  # the db command lands separately; the rest works without it
        pass
    else:
        add_db_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None, *, registry: Any = None) -> int:
    """Run the ``miocore`` command line; returns the exit status.

    ``registry`` (a :class:`miocore.Registry`) replaces the installed plugins: for tests and
    embedding.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # --help, --version and argparse's own errors (status 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    command = getattr(args, "command", None)
    if command is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        handler = getattr(args, "handler", None)
        if handler is not None:
            return int(handler(args, registry))
        return int(args.func(args))
    except MiocoreError as exc:
        print(f"{PROG} {command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG} {command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
