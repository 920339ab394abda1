"""``MIOCORE_LOG_LEVEL`` (or MIOpen's ``MIOPEN_LOG_LEVEL``): miocore's log records on stderr.

The levels are MIOpen's numbers, or their names:

| level | name | what shows |
|---|---|---|
| 0 | default | warnings (as 4) |
| 1 | quiet | nothing |
| 2 | fatal, critical | fatal errors only |
| 3 | error | errors |
| 4 | warning | warnings: a plugin that failed to load, a database degraded to memory |
| 5 | info | what find decides: candidates, database reads and writes, the chosen solution |
| 6 | info2, debug | and each timing, each candidate skipped and why (``miocore.find`` debug) |
| 7 | trace | everything miocore logs, at any level |

A bad value never stops ``import miocore``: it is reported once as a warning naming the
accepted values, and logging stays as it was.
"""

from __future__ import annotations

import logging
import warnings

from miocore import env

#: MIOpen's log level numbers -> Python logging levels. 1 (quiet) is above every level used.
LEVELS: dict[int, int] = {
    0: logging.WARNING,
    1: logging.CRITICAL + 10,
    2: logging.CRITICAL,
    3: logging.ERROR,
    4: logging.WARNING,
    5: logging.INFO,
    6: logging.DEBUG,
    7: 1,
}
#: Level names accepted beside the numbers.
NAMES: dict[str, int] = {
    "default": 0,
    "quiet": 1,
    "fatal": 2,
    "critical": 2,
    "error": 3,
    "warning": 4,
    "warn": 4,
    "info": 5,
    "info2": 6,
    "debug": 6,
    "trace": 7,
}
ACCEPTED = "0-7 or " + ", ".join(NAMES)


def parse_level(raw: str) -> int | None:
    """The Python logging level of a ``MIOCORE_LOG_LEVEL`` value, or None when it is not one."""
    text = raw.strip().lower()
    number = int(text) if text.isdigit() else NAMES.get(text)
    return LEVELS.get(number) if number is not None else None


def configure_from_env() -> None:
    """Apply ``MIOCORE_LOG_LEVEL`` / ``MIOPEN_LOG_LEVEL`` once, at import."""
    found = env.lookup("MIOCORE_LOG_LEVEL")
    if found is None:
        return
    variable, raw = found
    level = parse_level(raw)
    if level is None:
        warnings.warn(
            f"{variable}={raw!r} is not a log level; expected {ACCEPTED}. Logging is unchanged.",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    logger = logging.getLogger("miocore")
    logger.setLevel(level)
    if not any(getattr(h, "_miocore", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("miocore %(levelname)s %(name)s: %(message)s"))
        handler._miocore = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
