"""Shared output helpers of the ``miocore`` subcommands: consoles and number formats."""

from __future__ import annotations

import math
import sys
from typing import Any

PROG = "miocore"


def stdout_console() -> Any:
    from rich.console import Console

    # Wide when piped, so tables are not squeezed into 80 columns.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        size /= 1024
        if size < 1024 or unit == "TiB":
            break
    return f"{size:.1f} {unit} ({n} B)"


def fmt_ms(ms: float) -> str:
    return f"{ms:.4f} ms" if math.isfinite(ms) else "unknown"


def fmt_gflops(g: float) -> str:
    return f"{g:.2f} GFLOP/s" if math.isfinite(g) else "n/a GFLOP/s"
