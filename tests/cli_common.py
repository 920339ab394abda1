"""What the command-line tests share: a small problem's flags, a two-solver registry, and
the problems a command line describes."""

from __future__ import annotations

from fake_solvers import TimedSolver

import miocore
from miocore import cli
from miocore.cli import driver_flags
from miocore.solver.registry import Registry

SMALL = [
    "-n",
    "2",
    "-c",
    "4",
    "-H",
    "6",
    "-W",
    "6",
    "-k",
    "4",
    "-y",
    "3",
    "-x",
    "3",
    "-p",
    "1",
    "-q",
    "1",
]


def two_solver_registry() -> Registry:
    """A fast and a slow fake solver from one plugin."""
    return Registry.from_solvers(
        [
            TimedSolver("test.fast", delay_s=0.0),
            TimedSolver("test.slow", delay_s=0.02),
        ],
        plugin="testplug",
        distribution="miocore-test",
        version="1.2.3",
    )


def problems_of(argv: list[str], command: str = "conv") -> list[miocore.ConvProblem]:
    """The problems ``miocore COMMAND argv`` describes."""
    args = cli.build_parser().parse_args([command, *argv])
    return driver_flags.build_problems(
        driver_flags.driver_values(args), driver_flags.CONV_COMMANDS[command]
    )
