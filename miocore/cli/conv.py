"""``miocore conv``, ``convfp16``, ``convbfp16``: MIOpenDriver's conv command.

``miocore conv -n 32 -c 64 -H 56 -W 56 -k 64 -y 3 -x 3 -p 1 -q 1 -F 1 -t 1 -V 1`` finds the
fastest solution of each selected direction, prints it, optionally times it and verifies it
against the float64 reference.

Exit status: 0 success, 1 verification (or a solver run) failed, 2 bad input or nothing can
solve the problem.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from miocore.cli.driver_flags import (
    CONV_COMMANDS,
    add_driver_arguments,
    build_problems,
    describe_problem,
    driver_values,
)
from miocore.cli.driver_output import MIOPEN_ALGORITHMS, MIOPEN_LABELS, stats_lines
from miocore.cli.miopen_solvers import is_unset, resolve_solver
from miocore.cli.output import PROG, fmt_bytes, fmt_gflops, fmt_ms, stderr_console
from miocore.cli.run_flags import DATA_FLAGS, add_run_arguments, report_ignored
from miocore.errors import (
    InvalidArgumentError,
    MiocoreError,
    NoApplicableSolverError,
    NotApplicableError,
    SolverFailedError,
)
from miocore.problem.conv import ConvProblem, Direction

_DIRECTION_TITLES = {
    Direction.FORWARD: "Forward Convolution",
    Direction.BACKWARD_DATA: "Backward Data Convolution",
    Direction.BACKWARD_WEIGHTS: "Backward Weights Convolution",
}


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
    mean_ms: float | None = None

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
        "accuracy": args.accuracy,
        "deterministic": args.deterministic,
    }
    console = stderr_console()
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
        # Immediate mode: the named solver (MIOpen names and ids mapped), no find.
        solution = handle.compile_solution(problem, resolve_solver(args.solution, handle, problem))
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
    if args.time:  # as MIOpenDriver, no find time without -t 1
        kind = "estimate" if solution.is_estimate else "measured"
        stats = ""
        if solution.timing is not None:
            t = solution.timing
            stats = f", median of {t.count} runs, spread {t.spread_ms:.4g} ms"
        out(f"  time:      {fmt_ms(solution.time_ms)} ({kind}{stats})")
        out(f"  GFLOP/s:   {fmt_gflops(solution.gflops).removesuffix(' GFLOP/s')}")
    out(f"  workspace: {fmt_bytes(solution.workspace_size)}")
    out(f"  source:    {solution.source}" + (f" ({solution.note})" if solution.note else ""))
    label = MIOPEN_LABELS[problem.direction]
    out(
        f"MIOpen {label} Conv. Algorithm: {MIOPEN_ALGORITHMS[solution.algorithm.value]}, "
        f"Solution: {solution.solver_id}/{solution.solver}"
    )
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
    for short, long, tensor in DATA_FLAGS:
        path = getattr(args, long.lstrip("-"), "")
        if path and tensor != out_name:  # MIOpenDriver reads a file only into an input
            host_arrays[tensor] = read_buffer(path, getattr(problem, tensor), f"{short}/{long}")
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
            started = time.perf_counter()
            samples = [handle.backend.time_ms(lambda: run(arrays)) for _ in range(args.iter)]
            wall_ms = (time.perf_counter() - started) * 1e3 / args.iter
            result.timing = Timing.from_samples(samples)
            result.mean_ms = statistics.fmean(samples)
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
            f"  timed:     median {fmt_ms(t.median_ms)} over {t.count} iterations (min "
            f"{t.min_ms:.4f} ms, max {t.max_ms:.4f} ms), {fmt_gflops(gflops)}"
        )
        if args.wall:
            out(f"Wall-clock Time {label} Conv. Elapsed: {wall_ms:f} ms")
        out(f"GPU Kernel Time {label} Conv. Elapsed: {result.mean_ms:f} ms (average)")
        for line in stats_lines(problem, result.mean_ms):
            out(line)
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


def read_buffer(path: str, desc: Any, flag: str) -> Any:
    """A tensor from a raw file, as MIOpenDriver's ``-d``/``-e``/``-D`` read it: the elements
    of ``desc``'s data type in its layout's memory order, returned in logical order."""
    import numpy as np

    from miocore.backends.cpu import empty_for

    try:
        flat = np.fromfile(path, dtype=desc.dtype.numpy)
    except OSError as exc:
        raise InvalidArgumentError(f"cannot read it: {exc}", field=flag, value=path) from exc
    if flat.size != desc.element_count:
        raise InvalidArgumentError(
            f"holds {flat.size} {desc.dtype.value} elements; the tensor "
            f"{'x'.join(map(str, desc.lengths))} {desc.layout} needs {desc.element_count}",
            field=flag,
            value=path,
        )
    # Memory order: axes from the largest stride to the smallest.
    order = sorted(range(len(desc.lengths)), key=lambda axis: -desc.strides[axis])
    physical = flat.reshape([desc.lengths[axis] for axis in order])
    out = empty_for(desc)
    out[...] = physical.transpose(np.argsort(order))
    return out


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
    if args.from_file is not None:
        return _run_file(args, registry)
    if is_unset(args.solution):
        args.solution = None  # MIOpenDriver's "no solver chosen"
    problems = build_problems(driver_values(args), dtype)
    report_ignored(args)
    if args.dry_run:
        return _dry_run(args, problems)
    handle = Handle(args.device, registry=registry, user_db_path=args.user_db_path)
    if not len(handle.registry):
        raise _no_solver_error(handle.registry)

    lines: list[str] = []

    def out(line: str) -> None:
        if args.json:
            lines.append(line)
        else:
            print(line, flush=True)

    if args.printconv:
        out(
            f"{PROG} {args.command}: {describe_problem(problems[0])}; device "
            f"{handle.device.identity}"
        )
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


def add_parser(subparsers: Any) -> None:
    """Add ``conv``, ``convfp16`` and ``convbfp16`` (one per element type)."""
    for name, dtype in CONV_COMMANDS.items():
        conv = subparsers.add_parser(
            name,
            help=f"find, run, time and verify a {dtype.value} convolution (MIOpenDriver {name})",
            description=f"Find the fastest solution of a {dtype.value} convolution for each "
            "direction chosen by -F, print it, time it (-t 1) and verify it against the float64 "
            "reference (-V 1). Exit status: 0 ok, 1 verification failed, 2 bad input.",
            allow_abbrev=False,
        )
        add_driver_arguments(conv)
        add_run_arguments(conv)
        conv.set_defaults(handler=run_conv)


def _dry_run(args: argparse.Namespace, problems: list[ConvProblem]) -> int:
    """``--dry-run``: each problem and its key, nothing run."""
    rows = [
        {
            "direction": p.direction.value,
            "transposed": p.is_transposed,
            "key": p.key,
            "problem": describe_problem(p),
        }
        for p in problems
    ]
    if args.json:
        print(json.dumps({"command": args.command, "problems": rows}, indent=2))
        return 0
    for row in rows:
        title = ("Transposed " if row["transposed"] else "") + _DIRECTION_TITLES[
            Direction(row["direction"])
        ]
        print(f"{title}: {row['key']}")
        print(f"  {row['problem']}")
    return 0


def _run_file(args: argparse.Namespace, registry: Any) -> int:
    """``--from-file FILE``: run each MIOpenDriver line, with this command line's flags added.

    Blank lines and ``#`` comments are skipped. The exit status is the worst of the lines'.
    """
    from miocore.cli.driver_flags import split_driver_line

    path = Path(args.from_file)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InvalidArgumentError(
            f"cannot read it: {exc.strerror}", field="--from-file", value=str(path)
        ) from exc
    extra = _flags_beside_from_file(getattr(args, "argv", []))
    status = 0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.split("#", 1)[0].strip():
            continue
        try:
            command, flags = split_driver_line(line)
        except InvalidArgumentError as exc:
            print(f"{PROG} {args.command}: {path}:{number}: error: {exc}", file=sys.stderr)
            status = 2
            continue
        if any(flag.startswith("--from-file") for flag in flags):
            print(
                f"{PROG} {args.command}: {path}:{number}: error: --from-file inside a listed "
                "line is refused (no nesting)",
                file=sys.stderr,
            )
            status = 2
            continue
        # The header goes to stderr with --json, so stdout stays one document per line.
        header_stream = sys.stderr if args.json else sys.stdout
        print(f"# {path}:{number}: {line.strip()}", file=header_stream, flush=True)
        status = max(status, args.run_line([command, *flags, *extra]))
    return status


def _flags_beside_from_file(argv: list[str]) -> list[str]:
    """The flags given with ``--from-file``, without the command and ``--from-file`` itself."""
    flags = list(argv[1:])
    for i, token in enumerate(flags):
        if token == "--from-file":
            return flags[:i] + flags[i + 2 :]
        if token.startswith("--from-file="):
            return flags[:i] + flags[i + 1 :]
    return flags
