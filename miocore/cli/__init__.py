"""The ``miocore`` command line: one module per subcommand.

``conv``/``convfp16``/``convbfp16`` (:mod:`~miocore.cli.conv`, MIOpenDriver's flags from
:mod:`~miocore.cli.driver_flags`), ``solvers``, ``plugins``, ``db`` and ``heuristic``. Each
module in :data:`SUBCOMMANDS` exposes ``add_parser(subparsers)``, which registers its
subcommand with a ``handler(args, registry)`` default; adding a subcommand is one line here.

The top of the house: it may import every other room.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from miocore.cli import conv, db, heuristic, plugins, solvers, tune
from miocore.cli.driver_flags import DRIVER_FLAGS, add_driver_arguments
from miocore.cli.output import PROG
from miocore.errors import MiocoreError

#: The subcommand modules, in the order ``miocore --help`` lists them.
SUBCOMMANDS: list[ModuleType] = [conv, solvers, plugins, db, tune, heuristic]

__all__ = ["DRIVER_FLAGS", "SUBCOMMANDS", "add_driver_arguments", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The full ``miocore`` argument parser, one subcommand per :data:`SUBCOMMANDS` module."""
    from miocore import __version__

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Find and run the fastest convolution algorithm for a problem "
        "(MIOpenDriver-compatible conv flags).",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        # The db module names its hook add_db_parser (it predates this list).
        add = getattr(module, "add_parser", None) or module.add_db_parser
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, registry: Any = None) -> int:
    """Run the ``miocore`` command line; returns the exit status.

    ``registry`` (a :class:`miocore.Registry`) replaces the installed plugins: for tests and
    embedding.
    """
    parser = build_parser()
    argv = list(argv) if argv is not None else sys.argv[1:]
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and argparse's own errors (status 2)
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    args.argv = argv  # --from-file passes the flags given beside it on to each line
    args.run_line = lambda line_argv: main(line_argv, registry=registry)  # and runs each line
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
