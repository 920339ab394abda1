"""The ``miocore`` command line: ``conv`` (MIOpenDriver's flags), ``solvers``, ``plugins``, ``db``.

The top of the house: it may import every other room.
"""

from miocore.cli.driver import DRIVER_FLAGS, add_driver_arguments, build_parser, main

__all__ = ["DRIVER_FLAGS", "add_driver_arguments", "build_parser", "main"]
