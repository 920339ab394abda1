"""The flags of ``miocore conv*`` that say how to run, not what the problem is.

Also MIOpenDriver's flags that miocore accepts for compatibility but has no meaning for
(:data:`IGNORED_FLAGS`): a value other than the default is reported as ignored.
"""

from __future__ import annotations

import argparse
import sys

from miocore.cli.output import PROG

#: MIOpenDriver conv flags accepted for compatibility that have no miocore meaning:
#: (short, long, default, what MIOpenDriver does with it). A value other than the default is
#: reported as ignored on stderr.
IGNORED_FLAGS: tuple[tuple[str, str, str, str], ...] = (
    ("-r", "--pad_val", "0", "padding value"),
    ("-C", "--verification_cache", "", "folder caching the CPU reference"),
    ("-o", "--dump_output", "0", "dump the buffers to files"),
    ("-b", "--bias", "0", "add a bias"),
    ("-Z", "--tensor_vect", "0", "vectorised tensors (INT8 NCHW_VECT_C)"),
    ("-L", "--vector_length", "1", "vector length of vectorised tensors"),
    ("-a", "--in_bias", "", "input bias file"),
    ("-G", "--gpualloc", "0", "allocate and fill the buffers on the GPU"),
    ("-~", "--gpubuffer_check", "0", "check the GPU buffers for out-of-bounds writes"),
    ("-U", "--in_cast_type", "-1", "cast type of x (FP8 casts)"),
    ("-T", "--out_cast_type", "-1", "cast type of y (FP8 casts)"),
    ("-R", "--wei_cast_type", "-1", "cast type of w (FP8 casts)"),
)


#: MIOpenDriver's data file flags: (short, long, the tensor the file holds).
DATA_FLAGS: tuple[tuple[str, str, str], ...] = (
    ("-d", "--in_data", "x"),
    ("-e", "--weights", "w"),
    ("-D", "--dout_data", "y"),
)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags of ``conv*`` that say how to run (not what the problem is)."""
    run = parser.add_argument_group("running")
    run.add_argument(
        "-t",
        "--time",
        type=int,
        choices=(0, 1),
        default=0,
        help="time -i iterations of the chosen solution and print MIOpenDriver's GPU Kernel "
        "Time and stats: lines (default: 0)",
    )
    run.add_argument(
        "-w",
        "--wall",
        type=int,
        choices=(0, 1, 2),
        default=0,
        help="with -t 1, also print the wall-clock time per iteration (default: 0)",
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
        help="run this solver in immediate mode instead of find: a miocore name or id, or "
        "a MIOpen solver name or numeric id (mapped, see docs/cli.md); -1: none (default)",
    )
    run.add_argument(
        "-P",
        "--printconv",
        type=int,
        choices=(0, 1),
        default=1,
        help="print the problem line first (default: 1)",
    )
    run.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, hip, hip:N (default: cpu)")
    run.add_argument(
        "--find-mode",
        default=None,
        metavar="MODE",
        help="NORMAL, FAST, HYBRID, DYNAMIC_HYBRID or 1/2/3/5 (default: "
        "$MIOCORE_FIND_MODE, else DYNAMIC_HYBRID)",
    )
    run.add_argument(
        "--accuracy",
        default=None,
        choices=("strict", "default", "fast"),
        help="accuracy policy of find (docs/numerics.md): strict (no solver whose arithmetic "
        "loses accuracy), default (each candidate's error measured, those over the bound left "
        "out), fast (no check) (default: $MIOCORE_ACCURACY, else default)",
    )
    run.add_argument(
        "--deterministic",
        action="store_true",
        help="leave out solvers whose result may vary from run to run",
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
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="parse the flags, print each problem and its FindDb key, run nothing",
    )
    run.add_argument(
        "--from-file",
        default=None,
        metavar="FILE",
        help="run every MIOpenDriver line of FILE ('./bin/MIOpenDriver conv ...'); flags "
        "given here are added to each line and win",
    )
    for short, long, tensor in DATA_FLAGS:
        run.add_argument(
            short,
            long,
            default="",
            metavar="FILE",
            help=f"read {tensor} from FILE (raw elements of the data type in the layout's memory "
            f"order, as MIOpenDriver) instead of random data, where {tensor} is an input",
        )
    run.add_argument("--json", action="store_true", help="print one JSON document")
    run.add_argument("--quiet", action="store_true", help="no progress display")
    ignored = parser.add_argument_group(
        "accepted for MIOpenDriver compatibility, ignored (no miocore meaning)"
    )
    for short, long, default, what in IGNORED_FLAGS:
        ignored.add_argument(
            short, long, default=default, metavar="VALUE", help=f"MIOpenDriver: {what}"
        )


def report_ignored(args: argparse.Namespace) -> None:
    for short, long, default, what in IGNORED_FLAGS:
        value = getattr(args, long.lstrip("-"), default)
        if str(value) != default:
            print(
                f"{PROG} {args.command}: note: {short}/{long}={value} ignored ({what}: no "
                "miocore meaning)",
                file=sys.stderr,
            )
